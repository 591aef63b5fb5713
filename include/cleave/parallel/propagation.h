// Sharding propagation (AUTO_PARALLEL, search_mode "sharding_propagation"): the strategies the
// user gave with shard() spread to the operators around them.
//
// NOTE [Sharding propagation]
// The graph is the forward traced with global shapes (before the step-parallel rewrite). Its
// operators are joined by edges: a producer's output read by a consumer's input, and two
// consumers of one parameter (which has one layout, so its users should agree on it). Each
// operator's candidates are its rule's valid strategies on device_num devices.
// 1. The configured operators (a strategy from shard() or a strategy file) are decided. The
//    graph's inputs are fixed by the dataset strategy and its constants are replicated.
// 2. In rounds, every undecided operator adjacent to one decided in the previous round is
//    decided, all of a round at once from the operators decided before it (so the result does
//    not depend on the order the graph was traced in, nor on which neighbour is visited first).
//    Among its candidates it takes the least by, in order:
//      a. bytes of redistribution per rank on its edges to decided operators and to the fixed
//         inputs (0 when each value is already where the candidate needs it, or a local slice
//         of it away);
//      b. computation per rank (the rule's flops of the local computation: a candidate using
//         every device beats one that repeats work);
//      c. its own forward communication (completing a split reduction);
//      d. how many decided neighbours have another device matrix (ones dropped): a candidate
//         that lays its loops over the devices as its neighbour does (MatMul ((2, 4), (4, 1))
//         then ReLU ((2, 4)), not ((8, 1)), as MindSpore's seed shows);
//      e. the strategy itself, larger splits of earlier dimensions first (so the batch).
//    This is MindSpore's rule (among candidates needing no communication on the edge the
//    cheapest computation, else the least communication) taken over all decided neighbours.
// 3. Operators no configured operator reaches keep no strategy: the rewrite makes them data
//    parallel, as it does in SEMI_AUTO_PARALLEL. Operators writing into their inputs (the
//    moving statistics' Assign) are left to the rewrite, which keeps their parameter's layout.
// Where the decided strategies still disagree on an edge (two configured operators asking for
// different layouts of one value, or no candidate fitting every neighbour) the rewrite inserts
// the redistribution; the report lists each such edge and the step_parallel_begin dump notes it
// at the consumer (redistribution_notes).
#pragma once

#include <string>
#include <vector>

#include "cleave/ir/dump.h"
#include "cleave/ir/graph.h"
#include "cleave/parallel/step_parallel.h"

namespace cleave::parallel {

struct PropagationReport {
  int configured = 0;  // operators with a strategy before propagation
  int derived = 0;     // operators propagation gave one
  int unreached = 0;   // operators left to the rewrite's default (data parallel)
  int rounds = 0;
  // One line per edge between decided operators whose layouts disagree:
  // "relu (scope ...) input 0 from matmul: (2, 1) over ... -> ...: AllGather(...)".
  std::vector<std::string> inconsistencies;
};

// Propagates the strategies of the configured operators of `global` (NOTE [Sharding
// propagation]): sets Node::strategy of every operator it reaches, with strategy_derived. Throws
// Error when no operator is configured (propagation has nothing to start from; say which
// operators to shard()) or a configured strategy is invalid (the rewrite's error).
PropagationReport propagate_strategies(ir::Graph& global, const StepParallelOptions& options);

// Per node of `global`, a line for each input that the plan moves between layouts:
// "input 0 (%3) (2, 1) -> (2, 4): Slice(dim 1 over axis 1)"; for the step_parallel_begin dump.
ir::NodeNotes redistribution_notes(const ir::Graph& global, const ParallelPlan& plan);

}  // namespace cleave::parallel

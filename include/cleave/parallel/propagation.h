// Sharding propagation (AUTO_PARALLEL, search_mode "sharding_propagation"): the strategies the
// user gave with shard() spread to the operators around them.
//
// NOTE [Sharding propagation]
// The graph is the forward traced with global shapes. Its edges join a producer's output to a
// consumer's input, and two consumers of one parameter; an operator's candidates are its rule's
// valid strategies on device_num devices.
// 1. The configured operators (shard() or a strategy file) are decided; the graph's inputs are
//    fixed by the dataset strategy, its constants replicated.
// 2. In rounds, every undecided operator adjacent to one decided in the previous round is decided,
//    all of a round at once from the operators decided before it, as the least candidate by:
//    (a) bytes of redistribution per rank on its edges to decided operators and fixed inputs;
//    (b) computation per rank; (c) its own forward communication; (d) how many decided neighbours
//    have another device matrix (ones dropped); (e) larger splits of earlier dimensions first.
//    Besides its rule's strategies (each loop on its own default axis), an operator described
//    by loops may take exactly the layout a decided neighbour gives a tensor they share, on that
//    neighbour's device matrix and axes (a tensor split over a minor axis, or over two axes of
//    one dimension): such a choice is written on the node as named layouts (Node::in_layouts;
//    NOTE [Named layouts] in cleave/ir/graph.h), so the rewrite uses the same axes.
// 3. Operators nothing configured reaches, and operators writing into their inputs, are left to
//    the rewrite (data parallel; their parameter's layout). Where decided strategies disagree on
//    an edge the rewrite inserts the redistribution, named in the report and the dump
//    (redistribution_notes). Reasons and examples: docs/design/sharding.md, section 5.
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

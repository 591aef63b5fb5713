// The step-parallel rewrite (SEMI_AUTO_PARALLEL): a forward graph traced with global shapes
// becomes the graph of one rank, with local shapes and the communication the strategies need.
//
// NOTE [Step-parallel rewrite]
// 1. plan_step_parallel (rank-independent): every op gets a strategy (shard()'s, or its rule's
//    default, marked derived) and its rule's layouts; the graph's inputs are laid out by the
//    dataset strategy, a parameter as its first consumer needs it, a constant replicated. An op
//    whose output is a pending reduction is followed by an AllReduce over the partial axes (its
//    forward communication, as MindSpore's forward_op).
// 2. materialize (per rank) re-traces the graph op by op on local tensors: the planned
//    redistribution wherever a consumer needs a value in another layout than its producer made
//    (once per value and layout), each op through its rule's lowering, the graph's outputs made
//    replicated. Every rank's graph has the same ops in the same order with the same shapes
//    (SPMD); ranks differ only in slice offsets and group rank lists.
// Backward communication comes later, from autodiff of the local graph through the communication
// primitives' gradient rules. The loss is seeded with 1 / device_num and each parameter's
// gradient summed over its mirror group (replica_ranks), which gives one device's gradient
// whatever the strategies (why: docs/design/sharding.md, section 4).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "cleave/core/tensor.h"
#include "cleave/ir/graph.h"
#include "cleave/parallel/layout.h"
#include "cleave/parallel/sharding_rule.h"

namespace cleave::parallel {

enum class DatasetSplit {
  kDataParallel,  // each rank's batch is its slice of dim 0 of the global batch
  kFullBatch,     // every rank reads the whole batch and takes its slice
  kStrategy,      // StepParallelOptions::dataset_strategy gives one strategy per input
};

struct StepParallelOptions {
  int64_t device_num = 1;
  DatasetSplit dataset = DatasetSplit::kDataParallel;
  ir::Strategy dataset_strategy;  // kStrategy: one entry per graph input
};

// What plan_step_parallel decides, for every rank.
struct ParallelPlan {
  int64_t device_num = 1;
  // Per node of the global graph: the sharding of an op (empty for other nodes), and the layout
  // of each output once complete (after the op's forward communication).
  std::vector<OpSharding> ops;
  std::vector<std::vector<Layout>> layouts;
};

// Plans `global` (NOTE [Step-parallel rewrite], step 1) and records every op's strategy in the
// graph (Node::strategy, strategy_derived) for the step_parallel_begin dump. Throws Error for an
// invalid strategy or dataset strategy (naming the op, its instance name and scope, the
// strategy, the shapes and what is valid), a primitive without a sharding rule, or a
// communication primitive — the same on every rank, before any communication.
ParallelPlan plan_step_parallel(ir::Graph& global, const StepParallelOptions& options);

struct LocalStep {
  ir::Graph graph;  // this rank's forward graph
  // Its parameter nodes (indices into graph.nodes) with their layouts: the node's output meta
  // is the local slice; the bound tensor may still hold the global value (the runtime slices it).
  std::vector<std::pair<int, Layout>> parameters;
  // How many ranks hold each graph output (all of them: outputs are replicated): the loss's
  // gradient seed is 1 / this.
  int64_t output_replicas = 1;
};

// The graph of `rank` (NOTE [Step-parallel rewrite], step 2). Nodes keep the global graph's
// instance names and scopes; inserted communication is named "<op>/forward_op",
// "<consumer>/redistribution_op" and carries "rank_list" attributes. Throws Error naming the op
// when a rule's lowering rejects its local inputs (a bug report, not a user error, in practice).
LocalStep materialize(const ir::Graph& global, const ParallelPlan& plan, int64_t rank);

// The layout of each of the graph's inputs (g.inputs order) under the dataset strategy. Throws
// Error when an input does not fit it.
std::vector<Layout> dataset_layouts(const ir::Graph& g, const StepParallelOptions& options);

// The layout a strategy entry gives a tensor on `device_num` devices: the device matrix is the
// splits, then the remaining devices as one replica axis; dimension d split over axis d.
Layout layout_of_splits(const std::vector<int64_t>& splits, int64_t device_num);

// ---- pieces the runtime also uses while tracing a rank's graph ----

// The ranks holding the same slice of `layout` as `rank` (differing only on its replica axes),
// ascending; just {rank} when it has no replicas.
std::vector<int64_t> replica_ranks(const Layout& layout, int64_t rank);
// Traces an AllReduce of `x` over the world ranks `ranks` (ascending, containing this rank)
// with group attributes from the list; x itself when `ranks` has one element.
Tensor all_reduce_over(const Tensor& x, const std::vector<int64_t>& ranks,
                       PartialOp op = PartialOp::kSum);
// Traces an AllGather of `x` along dimension `dim` over the world ranks `ranks` (ascending,
// containing this rank: the order of the slices); x itself when `ranks` has one element.
Tensor all_gather_over(const Tensor& x, const std::vector<int64_t>& ranks, int64_t dim);
// Traces the redistribution of rank `rank`'s local `x` of a tensor of global shape `global`
// from `from` to `to` (plan_redistribution's steps).
Tensor redistribute(const Tensor& x, const Layout& from, const Layout& to, const Shape& global,
                    int64_t rank);

}  // namespace cleave::parallel

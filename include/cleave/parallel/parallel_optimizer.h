// The parallel optimizer's plan: which parameters it splits, and how.
//
// NOTE [Parallel optimizer]
// With enable_parallel_optimizer, a trainable parameter that ranks hold replicas of (every rank in
// DATA_PARALLEL; the ranks of its mirror group in SEMI_AUTO/AUTO_PARALLEL) is split once more,
// along its first dimension, over those ranks: each keeps 1/k of its weight and of its optimizer
// state (k: the ranks of the split, its *shard group*) and updates only that slice. The step then
//   - gathers the weight before the forward reads it: an AllGather over the shard group on
//     dimension 0, which gives the layout the plan had before (in buckets of parameters: NOTE
//     [Parallel optimizer buckets] in src/runtime/pipeline.cc);
//   - gets the gradient of that slice from the AllGather's gradient, a ReduceScatter (sum) over
//     the same group: it replaces that group's share of the gradient AllReduce. Replicas the
//     shard group does not cover (optimizer_weight_shard_size smaller than the mirror group)
//     still all-reduce the slice's gradient among themselves;
//   - updates the slice in place, with optimizer state of the slice's shape.
// In device-matrix terms the parameter's layout L becomes L': dimension 0 split over its own
// axes, then (minor) over replica axes of L, the innermost ones (an axis is cut in two when only
// part of it is taken), so that each rank's slice of L' is the k-th part of its slice of L, k its
// index in the shard group. Those axes may be numbered below dimension 0's own (a data-parallel
// axis 0 under a model-parallel axis 1): L' then lists a dimension's axes out of ascending order,
// which layouts allow and which only the redistribution planner refuses (L' is never
// redistributed: the AllGather above is its only communication). A parameter stays as it is
// (replicated over its group) when it is smaller than the threshold, has no replicas, or its
// first dimension is not divisible by the slices it would need; the last is reported, not an
// error: training is the same, only the memory is not saved.
// Numerically the step equals the replicated one up to the order of the gradient sums (the same
// rank order on cleave's engines): losses and parameters agree within float rounding.
// L' is what checkpoints record: each rank saves its slice, the strategy file holds L', and
// merge/transform/load_distributed_checkpoint move weights and optimizer state with it.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "cleave/core/dtype.h"
#include "cleave/core/shape.h"
#include "cleave/parallel/layout.h"

namespace cleave::parallel {

struct OptimizerShardOptions {
  // Parameters of fewer bytes stay replicated (parallel_optimizer_threshold, in bytes here).
  int64_t threshold_bytes = 64 * 1024;
  // optimizer_weight_shard_size: -1 every replica; k: k of them when the replicas k divides.
  int64_t shard_size = -1;
};

struct OptimizerShard {
  // L' (NOTE [Parallel optimizer]); the given layout when the parameter is not split.
  Layout layout;
  // The axes of layout.device_matrix() that split dimension 0 for the optimizer (ascending);
  // empty when the parameter is not split.
  std::vector<int> shard_axes;
  // Why a parameter that has replicas is not split, for the user ("its first dimension 10 is not
  // divisible by 4"); empty when it is split or there is nothing to report (below the threshold,
  // no replicas).
  std::string not_split;
  bool split() const { return !shard_axes.empty(); }
};

// The parallel optimizer's layout for a parameter of shape `global` and type `dtype` that the plan
// lays out as `layout` (NOTE [Parallel optimizer]). `layout` must fit `global` and not be partial.
OptimizerShard optimizer_shard(const Layout& layout, const Shape& global, DType dtype,
                               const OptimizerShardOptions& options);

// The world ranks of `rank`'s shard group under `shard` (ascending: the order of the slices).
std::vector<int64_t> optimizer_shard_ranks(const OptimizerShard& shard, int64_t rank);

}  // namespace cleave::parallel

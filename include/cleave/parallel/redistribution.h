// Redistribution: moving a tensor from one layout to another (NOTE [Layouts] in layout.h).
//
// NOTE [Redistribution]
// The two layouts may use different device matrices ([2, 4, 1] for a MatMul's strategy, [8] for
// a data-parallel input). They are first put on one common device matrix: the coarsest whose axes
// refine both, row-major numbering kept ([8] and [2, 4] meet on [2, 4]; [4, 2] and [2, 4] on
// [2, 2, 2]). On it the plan is a shortest path over layouts, each step one of
//   AllReduce(axes)             partial over axes -> complete (replicated on them)
//   ReduceScatter(axis, dim)    partial over axis -> dim split one level finer over it
//   AllGather(axes, dim)        the last (minor) axes of dim dropped: its slices concatenated
//   AlltoAll(axis, x -> y)      the last axis of dim x moved to the end of dim y
//   Slice(axis, dim)            dim split one level finer over a replica axis (local, no message)
// costed by the bytes each rank sends in a ring algorithm (docs/design/sharding.md, section 3),
// ties broken by fewer steps. A dimension may list its axes in any order (named layouts): steps
// grow a dimension by the target's next axis and gather its last ones, so the order is kept; an
// AllGather over axes out of ascending order runs as one gather per axis, minor first, each
// concatenating in rank order (NOTE [Named layouts] in cleave/ir/graph.h). Without a common matrix
// ([2, 3] and [3, 2] on 6 devices) the plan goes through the replicated tensor. Plans are cached by
// (from, to, shape, dtype). A step's groups are the ranks that differ only on its axes
// (ranks_along), ascending, so a plan made once serves every rank: emit() (step_parallel.h)
// instantiates it for one rank.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "cleave/core/dtype.h"
#include "cleave/core/shape.h"
#include "cleave/parallel/layout.h"

namespace cleave::parallel {

struct RedistributionStep {
  enum class Kind { kAllReduce, kReduceScatter, kAllGather, kAllToAll, kSlice };
  Kind kind = Kind::kSlice;
  DeviceMatrix dev;  // the device matrix the axes refer to
  // The group's axes (ascending, but an AllGather's in its dimension's order); Slice: the one
  // new axis.
  std::vector<int> axes;
  // ReduceScatter, AllGather, Slice: the dimension split or gathered; AlltoAll: the dimension
  // that gains the split (split_dim).
  int64_t dim = -1;
  int64_t concat_dim = -1;  // AlltoAll: the dimension that loses it
  PartialOp op = PartialOp::kSum;
  Layout after;      // the layout once the step ran
  double bytes = 0;  // sent per rank
  // "AllGather(dim 0 over axes (1))"
  std::string to_string() const;
};

struct RedistributionPlan {
  std::vector<RedistributionStep> steps;
  double bytes = 0;  // sent per rank, all steps
  // "AllReduce(axes (1)) -> Slice(dim 1 over axis 1)", or "identity".
  std::string to_string() const;
};

// The cheapest plan from `from` to `to` for a tensor of global shape `global` (NOTE
// [Redistribution]); cached, thread-safe. Both layouts must lay out `global` on the same number
// of devices, and `to` must not be partial unless it has the same partial axes as `from`: an
// Error says which rule is broken otherwise. (A Bool tensor is planned as Int32: redistribute()
// casts it around the collectives.)
const RedistributionPlan& plan_redistribution(const Layout& from, const Layout& to,
                                              const Shape& global, DType dtype);

// What the cost model reads of a plan: each step's kind, the size of its groups and the bytes
// each rank sends, without the layouts. The strategy searches cost hundreds of thousands of
// redistributions (NOTE [Packed search layouts] in redistribution.cc); these are cached apart
// from the plans, at a tenth of their size.
struct RedistributionCost {
  struct Step {
    RedistributionStep::Kind kind = RedistributionStep::Kind::kSlice;
    int64_t group = 1;  // ranks in each of the step's groups
    double bytes = 0;   // sent per rank
  };
  std::vector<Step> steps;
  double bytes = 0;  // sent per rank, all steps
};
// plan_redistribution(from, to, global, dtype) as a cost: the same steps, cached, thread-safe,
// and the same Errors.
const RedistributionCost& redistribution_cost(const Layout& from, const Layout& to,
                                              const Shape& global, DType dtype);
// A plan's cost.
RedistributionCost cost_of(const RedistributionPlan& plan);
// Whether plans may use AlltoAll (the context's enable_alltoall). While a scope is alive, plans
// made on its thread follow `enabled`; without one they may. Without AlltoAll a split moving from
// one dimension to another is gathered and sliced (MindSpore's AllGather, Split and Concat with
// enable_alltoall off), which sends n - 1 times the local block where AlltoAll sends (n - 1) / n
// of it. The compile pipeline opens one per pass with the job's setting.
class AllToAllScope {
 public:
  explicit AllToAllScope(bool enabled);
  ~AllToAllScope();
  AllToAllScope(const AllToAllScope&) = delete;
  AllToAllScope& operator=(const AllToAllScope&) = delete;

 private:
  bool previous_;
};

// The common device matrix of two device matrices with the same device count, and for each
// axis of `a` and of `b` the axes of the common matrix it becomes (consecutive, ascending).
// Returns false when there is none.
struct UnifiedMatrix {
  DeviceMatrix dev;
  std::vector<std::vector<int>> a_axes, b_axes;
};
bool unify_device_matrices(const DeviceMatrix& a, const DeviceMatrix& b, UnifiedMatrix& out);

}  // namespace cleave::parallel

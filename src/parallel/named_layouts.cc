// Named layouts and output targets (NOTE [Named layouts] in cleave/ir/graph.h, NOTE [Output
// targets] below): how a node's in_layouts, out_strategy and out_layouts become its sharding.
//
// NOTE [Output targets]
// An op's rule says what its local computation produces: output k laid out as L_k, which may be
// partial (a MatMul whose reduction is split holds pending sums). Without an out_strategy the
// rewrite completes the pending reduction at once (an AllReduce over the partial axes). With
// one, the output is moved from L_k to the target the user asked for, by the redistribution
// planner (NOTE [Redistribution]), so a partial sum whose target splits a dimension over the
// reduction's devices becomes one ReduceScatter instead of an AllReduce and a slice. A target
// given as splits (out_strategy) is placed on the op's own device matrix: each dimension keeps
// its axes; one split further takes the partial axes first (their reduction then scatters), then
// the replica axes, appended as its minor axes; one split less drops its minor axes (gathered).
// Splits that no such choice gives (a factor no set of free axes multiplies to) fall back to the
// default layout of the splits on the job's devices, and the planner moves the output there.
// Named out_layouts are taken as written. Consumers then read the output from its target.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <numeric>

#include "cleave/core/error.h"
#include "cleave/parallel/redistribution.h"
#include "cleave/parallel/sharding_rule.h"
#include "cleave/parallel/step_parallel.h"
#include "parallel/output_targets.h"
#include "parallel/planned_dtype.h"

namespace cleave::parallel {
namespace {

std::string axes_text(const std::vector<int>& axes, const ir::TensorLayout& named) {
  std::vector<std::string> names;
  for (int a : axes) names.push_back(named.alias[static_cast<size_t>(a)]);
  return fmt::format("({})", fmt::join(names, ", "));
}

// Whether `a` and `b` give every rank the same slice of a tensor (their splits are equal).
bool same_slices(const Layout& a, const Layout& b) {
  if (a.tensor_rank() != b.tensor_rank() || a.num_devices() != b.num_devices()) return false;
  if (a.same_distribution(b)) return true;
  for (int64_t r = 0; r < a.num_devices(); ++r) {
    for (int64_t d = 0; d < a.tensor_rank(); ++d) {
      if (a.splits(d) != b.splits(d) || a.slice_index(d, r) != b.slice_index(d, r)) return false;
    }
  }
  return true;
}

// `axes` without the axes of size 1 (they split nothing).
std::vector<int> sized(const std::vector<int>& axes, const DeviceMatrix& dev) {
  std::vector<int> out;
  for (int a : axes) {
    if (dev[static_cast<size_t>(a)] > 1) out.push_back(a);
  }
  return out;
}

// The sharding `s` (the rule's, from the layouts' splits) moved onto the axes the named layouts
// give its inputs.
OpSharding with_layouts(const RuleContext& ctx, OpSharding s,
                        const std::vector<ir::TensorLayout>& named) {
  std::vector<Layout> given;
  for (size_t k = 0; k < named.size(); ++k) {
    Layout l = layout_of(named[k]);
    CLEAVE_CHECK_ARG(l.num_devices() == ctx.device_num,
                     "{}: input {} is laid out as {}, on {} devices, but the job has {}; expected "
                     "a device matrix whose sizes multiply to the device count",
                     describe_op(ctx), k, named[k].to_string(), l.num_devices(), ctx.device_num);
    given.push_back(std::move(l));
  }
  bool same = true;
  for (size_t k = 0; k < given.size() && same; ++k) same = same_slices(given[k], s.inputs[k]);
  if (same) return s;  // the rule's own axes hold the same slices: keep its layouts
  CLEAVE_CHECK_ARG(!s.space.loops.empty(),
                   "{}: the named layouts {} put input slices on other ranks than its rule does, "
                   "and the rule of {} ({}) takes its own axis order only; give this op a "
                   "strategy tuple or layouts listing its axes in the device matrix's order",
                   describe_op(ctx), named[0].to_string(), ctx.op.name, rule_of(ctx.op).summary());
  const DeviceMatrix& dev = given[0].device_matrix();
  const size_t loops = s.space.loops.size();
  std::vector<std::vector<int>> loop_axes(loops);
  std::vector<std::pair<size_t, size_t>> source(loops, {SIZE_MAX, 0});
  for (size_t k = 0; k < given.size(); ++k) {
    for (size_t d = 0; d < given[k].tensor_map().size(); ++d) {
      const int l = s.space.inputs[k][d];
      const std::vector<int> axes = sized(given[k].tensor_map()[d], dev);
      if (l < 0) continue;  // the rule's check: such a dimension has no split
      auto& [k0, d0] = source[static_cast<size_t>(l)];
      if (k0 == SIZE_MAX) {
        loop_axes[static_cast<size_t>(l)] = axes;
        source[static_cast<size_t>(l)] = {k, d};
      } else {
        CLEAVE_CHECK_ARG(
            loop_axes[static_cast<size_t>(l)] == axes,
            "{}: input {} dim {} is split over axes {} but input {} dim {} over {}; both index "
            "{}, so they must name the same axes in the same order",
            describe_op(ctx), k, d, axes_text(axes, named[k]), k0, d0,
            axes_text(loop_axes[static_cast<size_t>(l)], named[k0]),
            s.space.loops[static_cast<size_t>(l)].name);
      }
    }
  }
  s.device_matrix = dev;
  s.loop_axes = loop_axes;
  auto layout = [&](const std::vector<int>& dims, bool output) {
    std::vector<Layout::DimAxes> map;
    std::vector<bool> indexed(loops, false);
    for (int l : dims) {
      map.push_back(l >= 0 ? loop_axes[static_cast<size_t>(l)] : Layout::DimAxes{});
      if (l >= 0) indexed[static_cast<size_t>(l)] = true;
    }
    std::vector<int> partial;
    PartialOp op = PartialOp::kSum;
    for (size_t l = 0; output && l < loops; ++l) {
      const LoopDim& loop = s.space.loops[l];
      if (indexed[l] || loop.kind != LoopDim::Kind::kReduce) continue;
      for (int a : loop_axes[l]) partial.push_back(a);
      if (!loop_axes[l].empty()) op = loop.reduce;
    }
    std::sort(partial.begin(), partial.end());
    return Layout(dev, std::move(map), std::move(partial), op);
  };
  s.inputs.clear();
  s.outputs.clear();
  for (const auto& dims : s.space.inputs) s.inputs.push_back(layout(dims, false));
  for (const auto& dims : s.space.outputs) s.outputs.push_back(layout(dims, true));
  return s;
}

// The product of the sizes of `axes`.
int64_t size_of(const std::vector<int>& axes, const DeviceMatrix& dev) {
  int64_t n = 1;
  for (int a : axes) n *= dev[static_cast<size_t>(a)];
  return n;
}

// The first subset of `pool` (in its order of preference, fewest axes first) whose sizes multiply
// to `factor`; false when there is none.
bool pick_axes(const std::vector<int>& pool, const DeviceMatrix& dev, int64_t factor,
               std::vector<int>& out) {
  const size_t n = pool.size();
  for (size_t count = 0; count <= n; ++count) {
    // Subsets of `count` axes, earlier (preferred) axes first.
    std::vector<bool> pick(n, false);
    std::fill(pick.begin(), pick.begin() + static_cast<std::ptrdiff_t>(count), true);
    do {
      std::vector<int> axes;
      for (size_t i = 0; i < n; ++i) {
        if (pick[i]) axes.push_back(pool[i]);
      }
      if (size_of(axes, dev) == factor) {
        std::sort(axes.begin(), axes.end());
        out = std::move(axes);
        return true;
      }
    } while (std::prev_permutation(pick.begin(), pick.end()));
  }
  return false;
}

// Output k's target for the out_strategy entry `want` (NOTE [Output targets]).
Layout target_from_splits(const RuleContext& ctx, const Layout& made,
                          const std::vector<int64_t>& want) {
  const DeviceMatrix& dev = made.device_matrix();
  std::vector<int> pool = made.partial();  // preferred: their reduction scatters
  for (int a : made.replica_axes()) pool.push_back(a);
  std::vector<Layout::DimAxes> map = made.tensor_map();
  bool fits = true;
  for (size_t d = 0; d < map.size() && fits; ++d) {
    const int64_t have = size_of(map[d], dev);
    if (want[d] == have) continue;
    if (want[d] % have == 0) {
      std::vector<int> more;
      fits = pick_axes(pool, dev, want[d] / have, more);
      for (int a : more) {
        map[d].push_back(a);
        std::erase(pool, a);
      }
    } else if (have % want[d] == 0) {
      while (!map[d].empty() && size_of(map[d], dev) > want[d]) map[d].pop_back();
      fits = size_of(map[d], dev) == want[d];
    } else {
      fits = false;
    }
  }
  if (fits) return Layout(dev, std::move(map));
  return layout_of_splits(want, ctx.device_num);  // the splits' default layout
}

std::vector<Layout> output_targets(const RuleContext& ctx, const OpSharding& s, const ir::Node& n) {
  std::vector<Layout> out;
  if (n.out_strategy.empty() && n.out_layouts.empty()) return out;
  const size_t count = n.out_layouts.empty() ? n.out_strategy.size() : n.out_layouts.size();
  CLEAVE_CHECK_ARG(count == s.outputs.size(),
                   "{}: out_strategy has {} entr{} but the op has {} output{}; expected one "
                   "entry per output",
                   describe_op(ctx), count, count == 1 ? "y" : "ies", s.outputs.size(),
                   s.outputs.size() == 1 ? "" : "s");
  for (size_t k = 0; k < count; ++k) {
    const Shape& global = ctx.outputs[k].shape;
    Layout target;
    if (!n.out_layouts.empty()) {
      target = layout_of(n.out_layouts[k]);
      CLEAVE_CHECK_ARG(target.num_devices() == ctx.device_num,
                       "{}: output {} is to be laid out as {}, on {} devices, but the job has {}",
                       describe_op(ctx), k, n.out_layouts[k].to_string(), target.num_devices(),
                       ctx.device_num);
      CLEAVE_CHECK_ARG(target.tensor_rank() == global.rank(),
                       "{}: out layout {} has {} dimensions but output {} has shape {}",
                       describe_op(ctx), n.out_layouts[k].to_string(), target.tensor_rank(), k,
                       global.to_string());
    } else {
      const std::vector<int64_t>& want = n.out_strategy[k];
      if (want.empty() && global.rank() > 0) {  // no request for this output (a block's)
        out.push_back(s.outputs[k].completed());
        continue;
      }
      CLEAVE_CHECK_ARG(static_cast<int64_t>(want.size()) == global.rank(),
                       "{}: out_strategy {} gives output {} {} split{} but it has shape {}; "
                       "expected one split per dimension",
                       describe_op(ctx), ir::strategy_to_string(n.out_strategy), k, want.size(),
                       want.size() == 1 ? "" : "s", global.to_string());
      const int64_t used = std::accumulate(want.begin(), want.end(), int64_t{1},
                                           [](int64_t a, int64_t b) { return a * b; });
      CLEAVE_CHECK_ARG(ctx.device_num % used == 0,
                       "{}: out_strategy {} splits output {} into {} slices, which does not divide "
                       "the {} devices",
                       describe_op(ctx), ir::strategy_to_string(n.out_strategy), k, used,
                       ctx.device_num);
      target = target_from_splits(ctx, s.outputs[k], want);
    }
    const std::string why = target.check_shape(global);
    CLEAVE_CHECK_ARG(why.empty(), "{}: output {} of shape {} cannot be laid out as {}: {}",
                     describe_op(ctx), k, global.to_string(), target.to_string(), why);
    out.push_back(std::move(target));
  }
  return out;
}

}  // namespace

Layout layout_of(const ir::TensorLayout& named) {
  std::vector<Layout::DimAxes> map;
  for (const std::vector<std::string>& dim : named.map) {
    Layout::DimAxes axes;
    for (const std::string& name : dim) {
      const auto at = std::find(named.alias.begin(), named.alias.end(), name);
      CLEAVE_CHECK_ARG(at != named.alias.end(), "{}: '{}' is not an axis of its device matrix",
                       named.to_string(), name);
      axes.push_back(static_cast<int>(at - named.alias.begin()));
    }
    map.push_back(std::move(axes));
  }
  return Layout(named.device_matrix, std::move(map));
}

ir::TensorLayout named_of(const Layout& layout) {
  std::vector<std::string> alias;
  for (size_t a = 0; a < layout.device_matrix().size(); ++a) alias.push_back(fmt::format("a{}", a));
  std::vector<std::vector<std::string>> map;
  for (const Layout::DimAxes& axes : layout.tensor_map()) {
    std::vector<std::string> names;
    for (int a : axes) names.push_back(alias[static_cast<size_t>(a)]);
    map.push_back(std::move(names));
  }
  return ir::TensorLayout(layout.device_matrix(), std::move(alias), std::move(map));
}

OpSharding infer_with_layouts(const ShardingRule& rule, const RuleContext& ctx,
                              const std::vector<ir::TensorLayout>& named) {
  CLEAVE_CHECK_ARG(named.size() == ctx.inputs.size(),
                   "{}: {} named layouts for {} inputs; expected one per input", describe_op(ctx),
                   named.size(), ctx.inputs.size());
  ir::Strategy strategy;
  for (const ir::TensorLayout& l : named) strategy.push_back(l.splits());
  return with_layouts(ctx, rule.infer(ctx, strategy), named);
}

OpSharding infer_node(const ShardingRule& rule, const RuleContext& ctx, const ir::Node& n,
                      const ir::Strategy& strategy) {
  OpSharding s = !n.in_layouts.empty() && strategy == n.strategy
                     ? infer_with_layouts(rule, ctx, n.in_layouts)
                     : rule.infer(ctx, strategy);
  s.out_targets = output_targets(ctx, s, n);
  if (!s.out_targets.empty()) {
    // The bytes of the redistributions to the targets, which the rewrite runs instead of the
    // AllReduce the rule counted (CostModel::op_cost times the same moves).
    s.forward_comm_bytes = 0;
    for (const RedistributionCost* move : output_target_moves(ctx, s)) {
      s.forward_comm_bytes += move->bytes;
    }
  }
  return s;
}

std::vector<const RedistributionCost*> output_target_moves(const RuleContext& ctx,
                                                           const OpSharding& sharding) {
  std::vector<const RedistributionCost*> moves;
  for (size_t k = 0;
       k < sharding.out_targets.size() && k < ctx.outputs.size() && k < sharding.outputs.size();
       ++k) {
    const Layout &made = sharding.outputs[k], &target = sharding.out_targets[k];
    if (made.same_distribution(target)) continue;
    moves.push_back(&redistribution_cost(made, target, ctx.outputs[k].shape,
                                         planned_dtype(ctx.outputs[k].dtype)));
  }
  return moves;
}

}  // namespace cleave::parallel

// The step-parallel rewrite (NOTE [Step-parallel rewrite] in cleave/parallel/step_parallel.h).
#include "cleave/parallel/step_parallel.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <map>
#include <tuple>

#include "cleave/core/error.h"
#include "cleave/ir/dispatch.h"
#include "cleave/ir/passes.h"
#include "cleave/ir/registry.h"
#include "cleave/ops/elementwise.h"
#include "cleave/ops/shape.h"
#include "cleave/parallel/redistribution.h"
#include "parallel/planned_dtype.h"

namespace cleave::parallel {
namespace {

using ir::Graph;
using ir::Node;
using ir::NodeKind;
using ir::ValueRef;

RuleContext context_of(const Graph& g, const Node& n, std::vector<ir::TensorMeta>& inputs,
                       int64_t device_num) {
  inputs.clear();
  for (const ValueRef& v : n.inputs) inputs.push_back(g.meta(v));
  return RuleContext{*n.op, n.attrs, inputs, n.outputs, n.name, n.scope, device_num};
}

// A mutating op (Assign of a moving statistic) writes into its parameter in place: its
// strategy must lay that parameter out as it is laid out already.
ir::Strategy strategy_keeping_parameters(const Graph& g, const Node& n, const RuleContext& ctx,
                                         const ShardingRule& rule, const ParallelPlan& plan) {
  for (const OpSharding& sharding : rule.shardings(ctx)) {
    bool keeps = true;
    for (size_t k = 0; k < n.inputs.size() && keeps; ++k) {
      const ValueRef v = n.inputs[k];
      if (g.nodes[static_cast<size_t>(v.node)].kind != NodeKind::kParameter) continue;
      const std::vector<Layout>& have = plan.layouts[static_cast<size_t>(v.node)];
      keeps = have.empty() || have[0].same_distribution(sharding.inputs[k]);
    }
    if (keeps) return sharding.strategy;
  }
  CLEAVE_FAIL(
      "{}: it writes into a parameter in place, and none of its strategies keeps the "
      "parameter's layout; give it a strategy that lays the parameter out as its other "
      "users do",
      describe_op(ctx));
}

std::string group_name(const std::vector<int64_t>& ranks) {
  return fmt::format("{}", fmt::join(ranks, "-"));
}

Tensor call_on(const char* op, const Tensor& x, const std::vector<int64_t>& ranks,
               ir::Attrs attrs) {
  attrs.set("group", group_name(ranks));
  attrs.set("rank_list", ranks);
  return ir::call1(ir::Registry::global().get(op), {x}, attrs);
}

}  // namespace

std::vector<Layout> dataset_layouts(const Graph& g, const StepParallelOptions& o) {
  const int64_t n = o.device_num;
  std::vector<Layout> out;
  if (o.dataset == DatasetSplit::kStrategy) {
    CLEAVE_CHECK_ARG(o.dataset_strategy.size() == g.inputs.size(),
                     "dataset_strategy {} has {} entries, but the step has {} inputs; expected "
                     "one strategy per input",
                     ir::strategy_to_string(o.dataset_strategy), o.dataset_strategy.size(),
                     g.inputs.size());
  }
  for (size_t k = 0; k < g.inputs.size(); ++k) {
    const Node& in = g.nodes[static_cast<size_t>(g.inputs[k])];
    const Shape& shape = in.outputs[0].shape;
    Layout layout = Layout::replicated({n}, shape.rank());
    if (o.dataset == DatasetSplit::kDataParallel && shape.rank() > 0 && n > 1) {
      CLEAVE_CHECK_ARG(shape[0] % n == 0,
                       "input {} ('{}') of global shape {}: with dataset_strategy "
                       "\"data_parallel\" its dim 0 is split over the {} devices, but {} is not "
                       "divisible by {}",
                       k, in.name, shape.to_string(), n, shape[0], n);
      std::vector<Layout::DimAxes> map(static_cast<size_t>(shape.rank()));
      map[0] = {0};
      layout = Layout({n}, std::move(map));
    } else if (o.dataset == DatasetSplit::kStrategy) {
      const std::vector<int64_t>& entry = o.dataset_strategy[k];
      int64_t used = 1;
      bool ok = static_cast<int64_t>(entry.size()) == shape.rank();
      for (size_t d = 0; ok && d < entry.size(); ++d) {
        ok = entry[d] >= 1 && shape[static_cast<int64_t>(d)] % entry[d] == 0;
        used *= entry[d];
      }
      CLEAVE_CHECK_ARG(ok && n % used == 0,
                       "dataset_strategy entry {} ({}) does not fit input {} ('{}') of global "
                       "shape {} on {} devices: expected one split per dimension, each dividing "
                       "its dimension, their product dividing the device count",
                       k, Shape(entry).to_string(), k, in.name, shape.to_string(), n);
      layout = layout_of_splits(entry, n);
    }
    out.push_back(std::move(layout));
  }
  return out;
}

Layout layout_of_splits(const std::vector<int64_t>& splits, int64_t device_num) {
  DeviceMatrix dev = splits;
  int64_t used = 1;
  for (int64_t s : splits) used *= s;
  if (dev.empty()) dev.push_back(1);
  if (device_num / used > 1) dev.push_back(device_num / used);
  std::vector<Layout::DimAxes> map;
  for (size_t d = 0; d < splits.size(); ++d) {
    map.push_back(splits[d] > 1 ? Layout::DimAxes{static_cast<int>(d)} : Layout::DimAxes{});
  }
  return Layout(std::move(dev), std::move(map));
}

std::vector<int64_t> replica_ranks(const Layout& layout, int64_t rank) {
  const std::vector<int> axes = layout.replica_axes();
  return ranks_along(rank, layout.device_matrix(), axes);
}

Tensor all_reduce_over(const Tensor& x, const std::vector<int64_t>& ranks, PartialOp op) {
  if (ranks.size() <= 1) return x;
  return call_on("AllReduce", x, ranks, {{"op", std::string(partial_op_name(op))}});
}

Tensor all_gather_over(const Tensor& x, const std::vector<int64_t>& ranks, int64_t dim) {
  if (ranks.size() <= 1) return x;
  return call_on("AllGather", x, ranks, {{"axis", dim}});
}

Tensor redistribute(const Tensor& x, const Layout& from, const Layout& to, const Shape& global,
                    int64_t rank) {
  // No collective carries booleans: a Bool tensor moves as Int32 (planned_dtype).
  const bool boolean = x.dtype() == DType::kBool;
  const RedistributionPlan& plan = plan_redistribution(from, to, global, planned_dtype(x.dtype()));
  const bool moves = std::any_of(plan.steps.begin(), plan.steps.end(), [](const auto& s) {
    return s.kind != RedistributionStep::Kind::kSlice;
  });
  Tensor t = boolean && moves ? ops::cast(x, DType::kInt32) : x;
  for (const RedistributionStep& s : plan.steps) {
    const std::vector<int64_t> ranks = ranks_along(rank, s.dev, s.axes);
    const auto n = static_cast<int64_t>(ranks.size());
    switch (s.kind) {
      case RedistributionStep::Kind::kAllReduce:
        t = all_reduce_over(t, ranks, s.op);
        break;
      case RedistributionStep::Kind::kReduceScatter:
        t = call_on("ReduceScatter", t, ranks, {{"op", std::string("sum")}, {"axis", s.dim}});
        break;
      case RedistributionStep::Kind::kAllGather:
        if (std::is_sorted(s.axes.begin(), s.axes.end())) {
          t = call_on("AllGather", t, ranks, {{"axis", s.dim}});
        } else {
          // Axes out of order (NOTE [Redistribution]): one gather per axis, minor first, each
          // group in rank order, which is that axis's slice order.
          for (auto a = s.axes.rbegin(); a != s.axes.rend(); ++a) {
            const std::vector<int> one{*a};
            t = all_gather_over(t, ranks_along(rank, s.dev, one), s.dim);
          }
        }
        break;
      case RedistributionStep::Kind::kAllToAll:
        t = call_on("AlltoAll", t, ranks,
                    {{"split_count", n}, {"split_dim", s.dim}, {"concat_dim", s.concat_dim}});
        break;
      case RedistributionStep::Kind::kSlice: {
        const int axis = s.axes[0];
        const int64_t parts = s.dev[static_cast<size_t>(axis)];
        const int64_t index = rank_to_coordinate(rank, s.dev)[static_cast<size_t>(axis)];
        std::vector<int64_t> size = t.shape().dims();
        std::vector<int64_t> begin(size.size(), 0);
        size[static_cast<size_t>(s.dim)] /= parts;
        begin[static_cast<size_t>(s.dim)] = index * size[static_cast<size_t>(s.dim)];
        t = ops::slice(t, begin, size);
        break;
      }
    }
  }
  return boolean && moves ? ops::cast(t, DType::kBool) : t;
}

ParallelPlan plan_step_parallel(Graph& g, const StepParallelOptions& o) {
  CLEAVE_CHECK_ARG(o.device_num >= 1, "device_num is {}; expected a positive device count",
                   o.device_num);
  ParallelPlan plan;
  plan.device_num = o.device_num;
  plan.ops.resize(g.nodes.size());
  plan.layouts.resize(g.nodes.size());
  const std::vector<Layout> inputs = dataset_layouts(g, o);
  for (size_t k = 0; k < g.inputs.size(); ++k) {
    plan.layouts[static_cast<size_t>(g.inputs[k])] = {inputs[k]};
  }
  std::vector<ir::TensorMeta> metas;
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    Node& n = g.nodes[i];
    if (n.kind == NodeKind::kConstant) {
      plan.layouts[i] = {Layout::replicated({o.device_num}, n.outputs[0].shape.rank())};
    }
    if (!n.is_op()) continue;
    const RuleContext ctx = context_of(g, n, metas, o.device_num);
    const ShardingRule* rule = find_rule(*n.op);
    CLEAVE_CHECK_ARG(rule != nullptr,
                     "{}: this primitive has no sharding rule, so it cannot be part of a "
                     "SEMI_AUTO_PARALLEL or AUTO_PARALLEL graph",
                     describe_op(ctx));
    const bool given = !n.strategy.empty();
    ir::Strategy strategy = n.strategy;
    if (!given) {
      strategy = n.op->mutates_inputs ? strategy_keeping_parameters(g, n, ctx, *rule, plan)
                                      : rule->default_strategy(ctx);
    }
    OpSharding sharding = infer_node(*rule, ctx, n, strategy);
    for (size_t k = 0; k < n.inputs.size(); ++k) {
      const ValueRef v = n.inputs[k];
      const Node& src = g.nodes[static_cast<size_t>(v.node)];
      std::vector<Layout>& have = plan.layouts[static_cast<size_t>(v.node)];
      if (src.kind == NodeKind::kParameter && have.empty()) {
        have = {sharding.inputs[k]};  // a parameter is laid out as its first consumer needs it
      } else if (n.op->mutates_inputs && src.kind == NodeKind::kParameter &&
                 !have[0].same_distribution(sharding.inputs[k])) {
        invalid_strategy(
            ctx, strategy,
            fmt::format("input {} is parameter '{}', laid out as {} by an earlier "
                        "operator, and this operator writes into it in place as {}; "
                        "they must be the same",
                        k, src.name, have[0].to_string(), sharding.inputs[k].to_string()));
      }
    }
    n.strategy = strategy;
    n.strategy_derived = !given || n.strategy_derived;  // propagation marks its own
    for (size_t k = 0; k < sharding.outputs.size(); ++k) {
      plan.layouts[i].push_back(sharding.final_output(k));
    }
    plan.ops[i] = std::move(sharding);
  }
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    if (g.nodes[i].kind == NodeKind::kParameter && plan.layouts[i].empty()) {
      plan.layouts[i] = {Layout::replicated({o.device_num}, g.nodes[i].outputs[0].shape.rank())};
    }
  }
  return plan;
}

LocalStep materialize(const Graph& global, const ParallelPlan& plan, int64_t rank) {
  CLEAVE_ASSERT(rank >= 0 && rank < plan.device_num, "materialize rank {} of {}", rank,
                plan.device_num);
  LocalStep out;
  Graph& g = out.graph;
  g.name = global.name;
  std::vector<std::vector<Tensor>> produced(global.nodes.size());
  std::vector<int> local_index(global.nodes.size(), -1);
  // Inputs, parameters and constants first, in their order, with local shapes.
  for (size_t i = 0; i < global.nodes.size(); ++i) {
    const Node& n = global.nodes[i];
    if (n.is_op()) continue;
    Node local = n;
    local.outputs[0].shape = plan.layouts[i][0].slice_shape(n.outputs[0].shape);
    local_index[i] = static_cast<int>(g.nodes.size());
    if (n.kind == NodeKind::kInput) g.inputs.push_back(local_index[i]);
    if (n.kind == NodeKind::kParameter) {
      out.parameters.emplace_back(local_index[i], plan.layouts[i][0]);
    }
    g.nodes.push_back(std::move(local));
  }
  ir::Tracer tracer(g);
  for (size_t i = 0; i < global.nodes.size(); ++i) {
    if (local_index[i] >= 0) produced[i] = {tracer.symbolic({local_index[i], 0})};
  }
  std::map<std::tuple<int, int, std::string>, Tensor> moved;
  auto value = [&](ValueRef v, const Layout& want) -> Tensor {
    const Tensor& have = produced[static_cast<size_t>(v.node)][static_cast<size_t>(v.output)];
    const Layout& from = plan.layouts[static_cast<size_t>(v.node)][static_cast<size_t>(v.output)];
    if (from.same_distribution(want)) return have;
    const auto key = std::make_tuple(v.node, v.output, want.normalized().to_string());
    auto it = moved.find(key);
    if (it != moved.end()) return it->second;
    const Tensor t = redistribute(have, from, want, global.meta(v).shape, rank);
    moved.emplace(key, t);
    return t;
  };
  auto name_nodes = [&](size_t begin, const Node& n, const std::string& suffix) {
    for (size_t j = begin; j < g.nodes.size(); ++j) {
      g.nodes[j].name = n.name + suffix;
      g.nodes[j].scope = n.scope;
    }
  };
  std::vector<ir::TensorMeta> metas;
  for (size_t i = 0; i < global.nodes.size(); ++i) {
    const Node& n = global.nodes[i];
    if (!n.is_op()) continue;
    const OpSharding& sharding = plan.ops[i];
    const RuleContext ctx = context_of(global, n, metas, plan.device_num);
    const size_t first = g.nodes.size();
    std::vector<Tensor> inputs;
    for (size_t k = 0; k < n.inputs.size(); ++k) {
      inputs.push_back(value(n.inputs[k], sharding.inputs[k]));
    }
    name_nodes(first, n, "/redistribution_op");
    const size_t lowered = g.nodes.size();
    std::vector<Tensor> outs = rule_of(*n.op).lower(LowerContext{ctx, sharding, rank, inputs});
    CLEAVE_ASSERT(outs.size() == n.outputs.size(), "{}: the lowering made {} outputs, not {}",
                  describe_op(ctx), outs.size(), n.outputs.size());
    for (size_t j = lowered; j < g.nodes.size(); ++j) {
      Node& made = g.nodes[j];
      made.scope = n.scope;
      if (!made.is_op()) {
        made.name = n.name + "/const";
      } else if (made.op == n.op) {
        made.name = n.name;
        made.strategy = n.strategy;
        made.strategy_derived = n.strategy_derived;
      } else {
        made.name = n.name + "/" + ir::instance_stem(made.op->name);
      }
    }
    const size_t forward = g.nodes.size();
    for (size_t k = 0; k < outs.size(); ++k) {
      const Layout& l = sharding.outputs[k];
      const Shape want = l.slice_shape(n.outputs[k].shape);
      CLEAVE_ASSERT(outs[k].shape() == want, "{}: output {} is {} on rank {}, expected {}",
                    describe_op(ctx), k, outs[k].shape().to_string(), rank, want.to_string());
      if (!sharding.out_targets.empty()) {  // NOTE [Output targets]
        const Layout& target = sharding.out_targets[k];
        if (!l.same_distribution(target)) {
          outs[k] = redistribute(outs[k], l, target, n.outputs[k].shape, rank);
        }
      } else if (l.is_partial()) {
        outs[k] = all_reduce_over(outs[k], ranks_along(rank, l.device_matrix(), l.partial()),
                                  l.partial_op());
      }
    }
    name_nodes(forward, n, "/forward_op");
    produced[i] = std::move(outs);
  }
  const size_t last = g.nodes.size();
  for (const ValueRef& v : global.outputs) {
    const Tensor t = value(v, Layout::replicated({plan.device_num}, global.meta(v).shape.rank()));
    g.outputs.push_back(tracer.value_of(t));
  }
  for (size_t j = last; j < g.nodes.size(); ++j) {
    g.nodes[j].name = "output/redistribution_op";
    g.nodes[j].scope = "Default";
  }
  out.output_replicas = plan.device_num;
  return out;
}

}  // namespace cleave::parallel

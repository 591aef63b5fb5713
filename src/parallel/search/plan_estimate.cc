// The cost of a plan, op by op, and runner-up plans (cleave/parallel/plan_estimate.h).
#include "cleave/parallel/plan_estimate.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <optional>

#include "cleave/core/error.h"
#include "cleave/parallel/redistribution.h"
#include "cleave/parallel/step_parallel.h"
#include "parallel/planned_dtype.h"
#include "parallel/search/candidates.h"

namespace cleave::parallel {
namespace {

using ir::Graph;
using ir::Node;
using ir::NodeKind;

double slice_bytes(const ir::TensorMeta& m, const Layout& l) {
  return static_cast<double>(l.slice_shape(m.shape).numel() * dtype_size(m.dtype));
}

struct Redistribution {
  double s = 0, bytes = 0;
};

Redistribution redistribution(const CostModel& model, const Layout& from, const Layout& to,
                              const ir::TensorMeta& meta) {
  if (from.same_distribution(to)) return {};
  const RedistributionCost& cost =
      redistribution_cost(from, to, meta.shape, planned_dtype(meta.dtype));
  return {model.redistribution_s(cost), cost.bytes};
}

}  // namespace

std::string path_name(const Node& node) {
  // "Default/network-WithLossCell/_backbone-ResNet/layer1-SequentialCell/0-ResidualBlock/
  // conv2-Conv2d" and "conv2.conv2d" -> "_backbone.layer1.0.conv2.conv2d".
  std::string path;
  size_t begin = 0;
  int segment = 0;
  const std::string& scope = node.scope;
  while (begin <= scope.size()) {
    size_t end = scope.find('/', begin);
    if (end == std::string::npos) end = scope.size();
    const std::string part = scope.substr(begin, end - begin);
    const size_t dash = part.find('-');
    // The first two segments are the root ("Default") and the network cell ("network-...").
    if (segment >= 2 && dash != std::string::npos && dash > 0) {
      path += part.substr(0, dash) + ".";
    }
    ++segment;
    begin = end + 1;
  }
  if (path.empty()) return node.name;
  const size_t dot = node.name.rfind('.');
  // A parameter's name is already its path from the network ("_backbone.fc1.weight").
  if (node.kind == NodeKind::kParameter) return node.name;
  return path + (dot == std::string::npos ? node.name : node.name.substr(dot + 1));
}

PlanEstimate estimate_plan(const Graph& global, const EstimateOptions& options) {
  const SearchOptions& so = options.search;
  const CostModel& model = so.cost_model != nullptr ? *so.cost_model : default_cost_model();
  CLEAVE_CHECK_ARG(std::isfinite(so.beta) && so.beta >= 0,
                   "plan estimate: beta is {}; expected a finite weight >= 0", so.beta);
  CLEAVE_CHECK_ARG(options.optimizer_state_per_parameter >= 0,
                   "plan estimate: optimizer_state_per_parameter is {}; expected >= 0",
                   options.optimizer_state_per_parameter);
  Graph g = global;  // plan_step_parallel records the strategies it settles on
  const std::vector<bool> given = [&] {
    std::vector<bool> v(g.nodes.size());
    for (size_t i = 0; i < g.nodes.size(); ++i) {
      v[i] = !g.nodes[i].strategy.empty() && !g.nodes[i].strategy_derived;
    }
    return v;
  }();
  const ParallelPlan plan = plan_step_parallel(g, so.step_parallel);

  PlanEstimate e;
  e.training = so.training;
  const std::vector<search_detail::OpBackward> backward =
      search_detail::op_backwards(g, so.training);
  e.comm_factor = so.training ? 2.0 : 1.0;
  e.beta = so.beta;
  // compute_sum: the ops' forward computation; step_compute: each times its factor.
  double forward_comm_s = 0, forward_comm_bytes = 0, compute_sum = 0, step_compute = 0,
         update_sum = 0;
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    const Node& n = g.nodes[i];
    if (!n.is_op()) continue;
    std::vector<ir::TensorMeta> metas;
    for (const ir::ValueRef& v : n.inputs) metas.push_back(g.meta(v));
    const RuleContext ctx{
        *n.op, n.attrs, metas, n.outputs, n.name, n.scope, so.step_parallel.device_num};
    const OpSharding& sharding = plan.ops[i];
    const search_detail::StepOpCost step =
        search_detail::step_op_cost(model, ctx, sharding, backward[i]);
    const OpCost& c = step.cost;
    OpEstimate op;
    op.node = static_cast<int>(i);
    op.name = path_name(n);
    op.op = n.op->name;
    op.strategy = ir::strategy_to_string(sharding.strategy);
    op.given = given[i];
    op.compute_s = c.compute_s;
    op.comm_s = c.comm_s;
    op.comm_bytes = c.comm_s > 0 ? sharding.forward_comm_bytes : 0;
    op.memory_bytes = c.memory_bytes;
    for (size_t k = 0; k < n.inputs.size(); ++k) {
      const ir::ValueRef v = n.inputs[k];
      const Layout& from = plan.layouts[static_cast<size_t>(v.node)][static_cast<size_t>(v.output)];
      const Redistribution r = redistribution(model, from, sharding.inputs[k], metas[k]);
      op.redistribution_s += r.s;
      op.comm_bytes += r.bytes;
    }
    op.compute_factor = step.factor;
    op.measured = step.measured;
    op.cost = op.compute_factor * op.compute_s +
              e.beta * e.comm_factor * (op.comm_s + op.redistribution_s);
    compute_sum += op.compute_s;
    step_compute += op.compute_factor * op.compute_s;
    forward_comm_s += op.comm_s + op.redistribution_s;
    forward_comm_bytes += op.comm_bytes;
    e.activation_bytes += op.memory_bytes;
    e.ops.push_back(std::move(op));
  }
  for (size_t p = 0; p < g.nodes.size(); ++p) {
    const Node& n = g.nodes[p];
    if (n.kind != NodeKind::kParameter) continue;
    const Layout& l = plan.layouts[p][0];
    ParameterEstimate pe;
    pe.node = static_cast<int>(p);
    pe.name = path_name(n);
    pe.layout = l.to_string();
    pe.slice_bytes = slice_bytes(n.outputs[0], l);
    pe.replicas = l.replicas();
    // A parameter without gradient (BatchNorm's moving statistics) has nothing to reduce; in a
    // parsed graph no tensor is bound and every parameter counts as trainable.
    pe.trainable = !n.value.defined() || n.value.requires_grad();
    if (so.training && pe.trainable && pe.replicas > 1) {
      const double r = static_cast<double>(pe.replicas);
      pe.gradient_bytes = 2 * pe.slice_bytes * (r - 1) / r;
      pe.gradient_s = model.collective_s(Collective::kAllReduce, pe.gradient_bytes, pe.replicas);
    }
    e.parameter_bytes += pe.slice_bytes;
    if (so.training && pe.trainable) {
      // NOTE [Optimizer updates in the cost] in src/parallel/search/candidates.h.
      pe.update_s = search_detail::update_s(model, pe.slice_bytes);
      update_sum += pe.update_s;
      e.gradient_bytes += pe.slice_bytes;
      e.optimizer_state_bytes += options.optimizer_state_per_parameter * pe.slice_bytes;
    }
    e.gradient_s += pe.gradient_s;
    e.traffic_bytes += pe.gradient_bytes;
    e.parameters.push_back(std::move(pe));
  }
  e.compute_s = step_compute + update_sum;
  e.communication_s = e.comm_factor * forward_comm_s + e.gradient_s;
  e.traffic_bytes += e.comm_factor * forward_comm_bytes;
  e.cost = e.compute_s + e.beta * e.communication_s;
  // NOTE [Plan estimate]: what blocks an op is exposed; the gradient reductions hide behind the
  // backward where the schedule lets them.
  const double backward_s = step_compute - compute_sum;
  const double hidden = options.overlap_gradients ? std::min(e.gradient_s, backward_s) : 0.0;
  e.exposed_communication_s = e.communication_s - hidden;
  return e;
}

void apply_choice(Graph& global, const CostGraph& graph, std::span<const int> choice) {
  CLEAVE_CHECK_ARG(choice.size() == graph.nodes.size(),
                   "apply_choice: {} choices for a cost graph of {} nodes", choice.size(),
                   graph.nodes.size());
  for (size_t i = 0; i < graph.nodes.size(); ++i) {
    const CostNode& n = graph.nodes[i];
    if (n.kind != CostNode::Kind::kOperator || n.graph_node < 0) continue;
    CLEAVE_CHECK_ARG(static_cast<size_t>(n.graph_node) < global.nodes.size() && choice[i] >= 0 &&
                         choice[i] < n.num_candidates() && n.strategies.size() == n.cost.size(),
                     "apply_choice: cost node {} ({}) does not match the graph or the choice", i,
                     n.name);
    Node& node = global.nodes[static_cast<size_t>(n.graph_node)];
    if (!node.strategy.empty() && !node.strategy_derived) continue;  // given: its only candidate
    node.strategy = n.strategies[static_cast<size_t>(choice[i])];
    node.strategy_derived = true;
  }
}

std::vector<RunnerUp> runner_up_plans(const CostGraph& graph, const SearchResult& best,
                                      const SearchOptions& options, int count, int tries) {
  CLEAVE_CHECK_ARG(best.choice.size() == graph.nodes.size(),
                   "runner_up_plans: the best plan has {} choices for {} nodes", best.choice.size(),
                   graph.nodes.size());
  CLEAVE_CHECK_ARG(count >= 0 && tries >= 0,
                   "runner_up_plans: count {} and tries {}; expected >= 0", count, tries);
  // The operators with a choice to make, the most costly chosen candidate first.
  std::vector<int> order;
  for (size_t i = 0; i < graph.nodes.size(); ++i) {
    const CostNode& n = graph.nodes[i];
    if (n.kind == CostNode::Kind::kOperator && n.num_candidates() > 1) {
      order.push_back(static_cast<int>(i));
    }
  }
  const auto chosen_cost = [&](int i) {
    return graph.nodes[static_cast<size_t>(i)].cost[static_cast<size_t>(best.choice[i])];
  };
  std::stable_sort(order.begin(), order.end(),
                   [&](int a, int b) { return chosen_cost(a) > chosen_cost(b); });
  if (static_cast<int>(order.size()) > tries) order.resize(static_cast<size_t>(tries));

  // The re-solves are independent: on a large graph they run on several threads, and are then
  // read in order, as one loop would have made them.
  std::vector<std::optional<SearchResult>> solved(order.size());
  int64_t cells = 0;
  for (const CostEdge& e : graph.edges) cells += static_cast<int64_t>(e.cost.size());
  // A graph that fails its checks has no runner-up (as each re-solve failed them before).
  try {
    graph.check();
  } catch (const Error&) {
    return {};
  }
  search_detail::parallel_for(order.size(), cells < (int64_t{1} << 20) ? 1 : 8, 1, [&](size_t k) {
    const int v = order[k];
    try {
      solved[k] = search_detail::solve_without_candidate(
          graph, v, best.choice[static_cast<size_t>(v)], options);
    } catch (const Error&) {
      // Nothing feasible without that candidate (a parameter forced elsewhere).
    }
  });
  std::vector<RunnerUp> found;
  for (size_t k = 0; k < order.size(); ++k) {
    if (!solved[k]) continue;
    const int v = order[k];
    const int drop = best.choice[static_cast<size_t>(v)];
    SearchResult r = std::move(*solved[k]);  // its choices index `graph`'s candidates
    if (!std::isfinite(r.cost)) continue;
    const bool seen = std::any_of(found.begin(), found.end(),
                                  [&](const RunnerUp& u) { return u.result.choice == r.choice; });
    if (seen) continue;
    const CostNode& n = graph.nodes[static_cast<size_t>(v)];
    RunnerUp u;
    u.changed_node = v;
    u.from = n.labels[static_cast<size_t>(drop)];
    u.to = n.labels[static_cast<size_t>(r.choice[static_cast<size_t>(v)])];
    u.result = std::move(r);
    found.push_back(std::move(u));
  }
  std::stable_sort(found.begin(), found.end(), [](const RunnerUp& a, const RunnerUp& b) {
    return a.result.cost < b.result.cost;
  });
  if (static_cast<int>(found.size()) > count) found.resize(static_cast<size_t>(count));
  return found;
}

}  // namespace cleave::parallel

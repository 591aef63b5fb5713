// The op-cost estimate (include/cleave/parallel/cost_model.h).
#include "cleave/parallel/cost_model.h"

#include <algorithm>
#include <cmath>

#include "cleave/parallel/calibrated_cost_model.h"
#include "cleave/parallel/sharding_rule.h"
#include "parallel/output_targets.h"

namespace cleave::parallel {

double estimate_op_cost(const ir::Graph& graph, const ir::Node& node) {
  double elements = 0, product = 1;
  for (const ir::ValueRef& v : node.inputs) {
    const double c = static_cast<double>(graph.meta(v).shape.numel());
    elements += c;
    product *= std::max(c, 1.0);
  }
  for (const ir::TensorMeta& m : node.outputs) {
    const double c = static_cast<double>(m.shape.numel());
    elements += c;
    product *= std::max(c, 1.0);
  }
  double cost = 1 + elements / 4096;
  // The ops that multiply (their rule's compute class) add their multiply-adds: for a matmul
  // mk * kn * mn = (mkn)^2, and close to it for a convolution. TODO(#25): seconds from a
  // calibrated profile per compute class.
  const ShardingRule* rule = find_rule(*node.op);
  if (rule != nullptr && rule->compute_class() != ShardingRule::ComputeClass::kMemory) {
    cost += std::sqrt(product) / 4096;
  }
  return cost;
}

}  // namespace cleave::parallel

namespace cleave::parallel {

namespace {

double slice_bytes(const ir::TensorMeta& m, const Layout& l) {
  return static_cast<double>(l.slice_shape(m.shape).numel() * dtype_size(m.dtype));
}

Collective collective_of(RedistributionStep::Kind k) {
  switch (k) {
    case RedistributionStep::Kind::kAllReduce:
      return Collective::kAllReduce;
    case RedistributionStep::Kind::kReduceScatter:
      return Collective::kReduceScatter;
    case RedistributionStep::Kind::kAllGather:
      return Collective::kAllGather;
    case RedistributionStep::Kind::kAllToAll:
      return Collective::kAllToAll;
    case RedistributionStep::Kind::kSlice:
      break;
  }
  return Collective::kBroadcast;  // not reached: a slice is no collective
}

}  // namespace

OpCost CostModel::op_cost(const RuleContext& ctx, const OpSharding& sharding) const {
  OpCost cost;
  for (size_t k = 0; k < ctx.inputs.size() && k < sharding.inputs.size(); ++k) {
    cost.memory_bytes += slice_bytes(ctx.inputs[k], sharding.inputs[k]);
  }
  for (size_t k = 0; k < ctx.outputs.size() && k < sharding.outputs.size(); ++k) {
    cost.memory_bytes += slice_bytes(ctx.outputs[k], sharding.outputs[k]);
  }
  const ShardingRule* rule = find_rule(ctx.op);
  const auto cls = rule != nullptr ? rule->compute_class() : ShardingRule::ComputeClass::kMemory;
  cost.compute_s = compute_s(cls, sharding.compute_flops, cost.memory_bytes);
  if (!sharding.out_targets.empty()) {
    // NOTE [Output targets]: each output moves from what the op computes to its target by the
    // redistribution the rewrite runs (a ReduceScatter where the target splits a pending sum).
    for (const RedistributionCost* move : output_target_moves(ctx, sharding)) {
      cost.comm_s += redistribution_s(*move);
    }
    return cost;
  }
  for (const Layout& l : sharding.outputs) {
    if (!l.is_partial()) continue;
    int64_t n = 1;
    for (int a : l.partial()) n *= l.device_matrix()[static_cast<size_t>(a)];
    // forward_comm_bytes holds the sum over the partial outputs; they share one group here.
    cost.comm_s = collective_s(Collective::kAllReduce, sharding.forward_comm_bytes, n);
    break;
  }
  return cost;
}

double CostModel::redistribution_s(const RedistributionPlan& plan) const {
  return redistribution_s(cost_of(plan));
}

double CostModel::redistribution_s(const RedistributionCost& cost) const {
  double s = 0;
  for (const RedistributionCost::Step& step : cost.steps) {
    if (step.kind == RedistributionStep::Kind::kSlice) {
      s += compute_s(ShardingRule::ComputeClass::kMemory, 0, step.bytes);
    } else {
      s += collective_s(collective_of(step.kind), step.bytes, step.group);
    }
  }
  return s;
}

double ConstantCostModel::compute_s(ShardingRule::ComputeClass cls, double flops,
                                    double bytes) const {
  const double memory = bytes / rates_.memory_bytes_per_s;
  switch (cls) {
    case ShardingRule::ComputeClass::kMatMul:
      return std::max(memory, flops / rates_.matmul_flops_per_s);
    case ShardingRule::ComputeClass::kConvolution:
      return std::max(memory, flops / rates_.conv_flops_per_s);
    case ShardingRule::ComputeClass::kMemory:
      break;
  }
  return memory;
}

double ConstantCostModel::collective_s(Collective c, double bytes_sent, int64_t group_size) const {
  if (group_size <= 1) return 0;
  // A ring: n - 1 steps (twice that for an AllReduce), each paying the latency.
  const double steps = static_cast<double>(group_size - 1) * (c == Collective::kAllReduce ? 2 : 1);
  return steps * rates_.latency_s + bytes_sent / rates_.bandwidth_bytes_per_s;
}

const CostModel& default_cost_model() { return cost_model_for_profile(""); }

}  // namespace cleave::parallel

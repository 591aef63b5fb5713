// The op-cost estimate (include/cleave/parallel/cost_model.h).
#include "cleave/parallel/cost_model.h"

#include <algorithm>
#include <cmath>

#include "cleave/parallel/sharding_rule.h"

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

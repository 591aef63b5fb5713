// The op-cost estimate (include/cleave/parallel/cost_model.h).
#include "cleave/parallel/cost_model.h"

#include <algorithm>
#include <cmath>
#include <unordered_map>

#include "cleave/ir/registry.h"

namespace cleave::parallel {
namespace {

// An op's compute time beyond its memory traffic, from the product of the element counts of its
// operands and results.
using ComputeCost = double (*)(double operand_product);

double multiply_adds(double operand_product) { return std::sqrt(operand_product) / 4096; }

// The ops with a compute term, keyed by their registry entry; every other op costs its memory
// traffic only. TODO(#13): the per-op sharding rules will provide these costs (per op family,
// for a sharded op's slice), replacing this table.
const std::unordered_map<const ir::OpDef*, ComputeCost>& compute_costs() {
  static const auto* table = [] {
    const ir::Registry& registry = ir::Registry::global();
    auto* t = new std::unordered_map<const ir::OpDef*, ComputeCost>();
    for (const char* name :
         {"MatMul", "BatchMatMul", "Conv2D", "Conv2DBackpropInput", "Conv2DBackpropFilter"}) {
      t->emplace(&registry.get(name), multiply_adds);
    }
    return t;
  }();
  return *table;
}

}  // namespace

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
  const auto it = compute_costs().find(node.op);
  if (it != compute_costs().end()) cost += it->second(product);
  return cost;
}

}  // namespace cleave::parallel

// Cost model: how long an op is estimated to take, in abstract cost units, for planning (the
// schedule simulation of partition(); later the strategy search). Nothing is measured: the
// estimate reads only the shapes of the graph.
#pragma once

#include "cleave/ir/graph.h"

namespace cleave::parallel {

// The estimated time of op `node` of `graph`, in cost units (at least 1): a fixed overhead of 1,
// plus memory traffic (1 per 4096 elements read or written), plus, for the ops that multiply (the
// compute class of their sharding rule: MatMul, BatchMatMul, Conv2D and its backward ops), the
// square root of the product of the element counts of their operands and results / 4096: the
// multiply-add count of a matmul (mk * kn * mn = (mkn)^2), and close to it for a convolution.
// Requires node.is_op() and inputs that refer to nodes of `graph`.
double estimate_op_cost(const ir::Graph& graph, const ir::Node& node);

}  // namespace cleave::parallel

// The op-cost estimate (cleave/parallel/cost_model.h): every op costs an overhead plus its memory
// traffic; matmuls and convolutions (found by their registry entry) add their multiply-adds.
#include "cleave/parallel/cost_model.h"

#include <gtest/gtest.h>

#include <cmath>
#include <string>

#include "cleave/ir/registry.h"

namespace cleave::parallel {
namespace {

// A graph of two inputs of shapes `a` and `b` and one op `op_name` reading both, with result
// shape `out`; returns the graph, its op is the last node.
ir::Graph one_op(const std::string& op_name, Shape a, Shape b, Shape out) {
  ir::Graph g;
  for (Shape s : {a, b}) {
    ir::Node in;
    in.kind = ir::NodeKind::kInput;
    in.outputs = {{s, DType::kFloat32}};
    g.inputs.push_back(static_cast<int>(g.nodes.size()));
    g.nodes.push_back(in);
  }
  ir::Node op;
  op.kind = ir::NodeKind::kOp;
  op.op = &ir::Registry::global().get(op_name);
  op.inputs = {{0, 0}, {1, 0}};
  op.outputs = {{out, DType::kFloat32}};
  g.nodes.push_back(op);
  return g;
}

double cost_of(const ir::Graph& g) { return estimate_op_cost(g, g.nodes.back()); }

TEST(CostModel, ElementwiseOpCostsItsMemoryTraffic) {
  const ir::Graph g = one_op("Add", {64, 32}, {64, 32}, {64, 32});
  EXPECT_DOUBLE_EQ(cost_of(g), 1 + 3 * 64 * 32 / 4096.0);
}

TEST(CostModel, MatMulAddsItsMultiplyAdds) {
  // (m, k) x (k, n) -> (m, n): sqrt(mk * kn * mn) = m * k * n multiply-adds.
  const double m = 64, k = 128, n = 32;
  const ir::Graph g = one_op("MatMul", {64, 128}, {128, 32}, {64, 32});
  EXPECT_DOUBLE_EQ(cost_of(g), 1 + (m * k + k * n + m * n) / 4096 + m * k * n / 4096);
}

TEST(CostModel, EveryMatMulAndConvolutionOpHasAComputeTerm) {
  for (const char* name :
       {"MatMul", "BatchMatMul", "Conv2D", "Conv2DBackpropInput", "Conv2DBackpropFilter"}) {
    const ir::Graph g = one_op(name, {4, 4}, {4, 4}, {4, 4});
    EXPECT_DOUBLE_EQ(cost_of(g), 1 + 48 / 4096.0 + std::sqrt(16.0 * 16 * 16) / 4096) << name;
  }
  const ir::Graph mul = one_op("Mul", {4, 4}, {4, 4}, {4, 4});
  EXPECT_DOUBLE_EQ(cost_of(mul), 1 + 48 / 4096.0);
}

}  // namespace
}  // namespace cleave::parallel

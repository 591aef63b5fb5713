#include "cleave/autodiff/backward.h"

#include <gtest/gtest.h>

#include "testing/gradcheck.h"

namespace cleave {
namespace {

using testing::all_close;
using testing::random_f64;

TEST(Backward, AccumulatesIntoLeaves) {
  Tensor x = Tensor::from_vector<double>({1, 2, 3}).set_requires_grad(true);
  Tensor y = ops::reduce_sum(x * x);
  autodiff::backward(y);
  EXPECT_TRUE(all_close(x.grad(), Tensor::from_vector<double>({2, 4, 6})));
  autodiff::backward(ops::reduce_sum(x * x));  // gradient accumulation
  EXPECT_TRUE(all_close(x.grad(), Tensor::from_vector<double>({4, 8, 12})));
}

TEST(Backward, SharedSubexpressionSumsBothPaths) {
  Tensor x = Tensor::from_vector<double>({3}).set_requires_grad(true);
  Tensor a = x * x;      // 2x
  Tensor y = a * a + a;  // x^4 + x^2 -> 4x^3 + 2x
  const std::vector<Tensor> g = autodiff::grad(ops::reduce_sum(y), {x, a});
  EXPECT_NEAR(g[0].item(), 4 * 27 + 6, 1e-12);
  EXPECT_NEAR(g[1].item(), 2 * 9 + 1, 1e-12);
  EXPECT_FALSE(x.grad().defined());  // grad() does not accumulate
}

TEST(Backward, NoGradRecordsNothing) {
  Tensor x = Tensor::ones({2}).set_requires_grad(true);
  Tensor y;
  {
    NoGradGuard guard;
    y = ops::reduce_sum(x * x);
  }
  EXPECT_FALSE(y.requires_grad());
  EXPECT_ERROR(autodiff::backward(y), "does not require a gradient");
}

TEST(Backward, NonScalarNeedsGradOutput) {
  Tensor x = Tensor::ones({2, 2}).set_requires_grad(true);
  Tensor y = x * x;
  EXPECT_ERROR(autodiff::backward(y), "shape (2, 2)", "scalar", "grad_output");
  autodiff::backward(y, Tensor::ones({2, 2}));
  EXPECT_TRUE(all_close(x.grad(), Tensor::full({2, 2}, 2.0)));
  EXPECT_ERROR(autodiff::backward(y, Tensor::ones({3})), "grad_output is Float32 (3)");
}

TEST(Backward, OpWithoutGradRuleIsNamed) {
  static const ir::OpDef& op = ir::Registry::global().add(ir::OpDef{
      .name = "TestNoGrad",
      .num_inputs = 1,
      .infer =
          [](const ir::InferContext& ctx) { return std::vector<ir::TensorMeta>{ctx.inputs[0]}; },
      .cpu_kernel = [](const ir::KernelContext& ctx) { ctx.outputs[0].copy_from(ctx.inputs[0]); },
  });
  Tensor x = Tensor::ones({2}).set_requires_grad(true);
  Tensor y = ops::reduce_sum(ir::call1(op, {x}));
  EXPECT_ERROR(autodiff::backward(y), "primitive TestNoGrad has no gradient");
}

TEST(Gradcheck, AddMulBroadcast) {
  auto fn = [](const std::vector<Tensor>& in) { return in[0] * in[1] + in[1]; };
  EXPECT_TRUE(testing::gradcheck(fn, {random_f64({3, 4}), random_f64({4}, -1, 1, 2)}));
}

}  // namespace
}  // namespace cleave

namespace cleave {
namespace {

TEST(Backward, LeafGradientsNeverShareStorage) {
  // Add hands the same dy to both inputs; each leaf must get its own buffer so that
  // accumulating into one cannot change the other.
  Tensor a = Tensor::ones({4}).set_requires_grad(true);
  Tensor b = Tensor::ones({4}).set_requires_grad(true);
  autodiff::backward(ops::reduce_sum(a + b));
  EXPECT_FALSE(a.grad().shares_storage_with(b.grad()));
  autodiff::backward(ops::reduce_sum(a * 3.0));
  EXPECT_TRUE(testing::all_close(a.grad(), Tensor::full({4}, 4.0)));
  EXPECT_TRUE(testing::all_close(b.grad(), Tensor::ones({4})));
}

}  // namespace
}  // namespace cleave

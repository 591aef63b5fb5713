// MaxPool2D, AvgPool2D and their backward primitives: hand-computed values, tie handling, the
// Float32 kernels against the reference loops (Float64), finite-difference gradients, bad inputs.
// tests/kernels/pool_test.cc checks each Float32 path (kernels::cpu::PoolPath) on its own.
#include <gtest/gtest.h>

#include "cleave/cleave.h"
#include "testing/gradcheck.h"

namespace cleave {
namespace {

using testing::all_close;
using testing::gradcheck;
using testing::random_f64;

Tensor f64(const std::vector<double>& v, const Shape& s) { return Tensor::from_vector(v, s); }

const DType kBoth[] = {DType::kFloat64, DType::kFloat32};

TEST(Pool2D, ValidStride2MatchesHandComputed) {
  const Tensor x = Tensor::arange(0, 16, 1, DType::kFloat64);
  for (DType dt : kBoth) {
    const Tensor xi = ops::reshape(ops::cast(x, dt), {1, 1, 4, 4});
    const ops::Pool2DOptions o{.kernel_size = {2, 2}, .stride = {2, 2}};
    EXPECT_TRUE(all_close(ops::max_pool2d(xi, o), f64({5, 7, 13, 15}, {1, 1, 2, 2})));
    EXPECT_TRUE(all_close(ops::avg_pool2d(xi, o), f64({2.5, 4.5, 10.5, 12.5}, {1, 1, 2, 2})));
  }
}

TEST(Pool2D, SameAverageExcludesThePadding) {
  // 3x3 input, 2x2 kernel, stride 2: one padded row and column, both after. Edge windows average
  // only their real cells.
  const Tensor x = f64({1, 2, 3, 4, 5, 6, 7, 8, 9}, {1, 1, 3, 3});
  for (DType dt : kBoth) {
    const Tensor y = ops::avg_pool2d(ops::cast(x, dt),
                                     {.kernel_size = {2, 2}, .stride = {2, 2}, .pad_mode = "same"});
    EXPECT_TRUE(all_close(y, f64({3, 4.5, 7.5, 9}, {1, 1, 2, 2}), 1e-6)) << dtype_name(dt);
  }
}

TEST(Pool2D, SameMaxIgnoresThePadding) {
  // All values negative: a padded zero must never win.
  const Tensor x = f64({-1, -2, -3, -4, -5, -6, -7, -8, -9}, {1, 1, 3, 3});
  for (DType dt : kBoth) {
    const Tensor y = ops::max_pool2d(ops::cast(x, dt),
                                     {.kernel_size = {2, 2}, .stride = {2, 2}, .pad_mode = "SAME"});
    EXPECT_TRUE(all_close(y, f64({-1, -3, -7, -9}, {1, 1, 2, 2}))) << dtype_name(dt);
  }
}

TEST(Pool2D, MaxGradientGoesToTheFirstMaximumOfATie) {
  // NOTE [Max pooling ties]: in [[1, 3], [3, 2]] the first 3 (row-major) takes the gradient.
  for (DType dt : kBoth) {
    Tensor x = ops::cast(f64({1, 3, 3, 2}, {1, 1, 2, 2}), dt).set_requires_grad(true);
    const Tensor y = ops::max_pool2d(x, {.kernel_size = {2, 2}});
    const Tensor dx = autodiff::grad(y, {x}, Tensor::ones(y.shape(), dt))[0];
    EXPECT_TRUE(all_close(dx, f64({0, 1, 0, 0}, {1, 1, 2, 2}))) << dtype_name(dt);
  }
  // A constant input with overlapping 2x2 windows, stride 1: window (i, j) picks its top-left
  // cell (i, j), so the last row and column get nothing.
  for (DType dt : kBoth) {
    Tensor x = Tensor::zeros({1, 1, 4, 4}, dt).set_requires_grad(true);
    const Tensor y = ops::max_pool2d(x, {.kernel_size = {2, 2}});
    const Tensor dx = autodiff::grad(y, {x}, Tensor::ones(y.shape(), dt))[0];
    EXPECT_TRUE(all_close(dx, f64({1, 1, 1, 0, 1, 1, 1, 0, 1, 1, 1, 0, 0, 0, 0, 0}, {1, 1, 4, 4})))
        << dtype_name(dt);
  }
}

TEST(Pool2D, MaxTiesAgreeBetweenFloat32AndReference) {
  // Values from {0, 1, 2}: most windows hold ties.
  for (int64_t channels : {3, 8}) {
    SCOPED_TRACE(std::to_string(channels) + " channels");
    Tensor x64 = ops::cast(ops::cast(random_f64({2, channels, 7, 8}, 0, 3, 21), DType::kInt32),
                           DType::kFloat64);
    const ops::Pool2DOptions o{.kernel_size = {3, 3}, .stride = {2, 1}, .pad_mode = "same"};
    Tensor x32 = ops::cast(x64, DType::kFloat32).set_requires_grad(true);
    x64.set_requires_grad(true);
    const Tensor y64 = ops::max_pool2d(x64, o), y32 = ops::max_pool2d(x32, o);
    const Tensor dy = random_f64(y64.shape(), -1, 1, 22);
    EXPECT_TRUE(all_close(autodiff::grad(y32, {x32}, ops::cast(dy, DType::kFloat32))[0],
                          autodiff::grad(y64, {x64}, dy)[0], 1e-5, 1e-5));
  }
}

struct PoolCase {
  const char* name;
  Shape x;
  ops::Pool2DOptions options;
};

std::vector<PoolCase> pool_cases() {
  return {
      {"2x2 stride 2 valid", {2, 3, 8, 6}, {.kernel_size = {2, 2}, .stride = {2, 2}}},
      {"3x3 stride 1 valid", {2, 3, 7, 6}, {.kernel_size = {3, 3}}},
      {"3x3 stride 2 valid odd", {2, 3, 9, 7}, {.kernel_size = {3, 3}, .stride = {2, 2}}},
      {"3x2 stride (2, 1) same",
       {2, 3, 7, 6},
       {.kernel_size = {3, 2}, .stride = {2, 1}, .pad_mode = "same"}},
      {"3x3 stride 2 same",
       {1, 4, 9, 10},
       {.kernel_size = {3, 3}, .stride = {2, 2}, .pad_mode = "same"}},
      {"2x2 stride 2 same odd",
       {3, 2, 5, 7},
       {.kernel_size = {2, 2}, .stride = {2, 2}, .pad_mode = "same"}},
      {"4x4 stride 3 same",
       {1, 2, 6, 6},
       {.kernel_size = {4, 4}, .stride = {3, 3}, .pad_mode = "same"}},
      {"lenet", {32, 6, 28, 28}, {.kernel_size = {2, 2}, .stride = {2, 2}}},
      {"8 channels 3x3 stride 2 same",
       {2, 8, 9, 7},
       {.kernel_size = {3, 3}, .stride = {2, 2}, .pad_mode = "same"}},
      {"16 channels 2x2 stride 2 valid", {3, 16, 6, 6}, {.kernel_size = {2, 2}, .stride = {2, 2}}},
      {"2x2 stride 2 valid odd, 9 outputs a row",
       {2, 3, 7, 19},
       {.kernel_size = {2, 2}, .stride = {2, 2}}},
      {"global 7x7", {2, 5, 7, 7}, {.kernel_size = {7, 7}, .stride = {7, 7}}},
  };
}

TEST(Pool2D, Float32MatchesFloat64ReferenceForwardAndBackward) {
  for (const PoolCase& c : pool_cases()) {
    SCOPED_TRACE(c.name);
    const Tensor x = random_f64(c.x, -1, 1, 31);
    for (bool max : {true, false}) {
      SCOPED_TRACE(max ? "max" : "avg");
      auto pool = [&](const Tensor& t) {
        return max ? ops::max_pool2d(t, c.options) : ops::avg_pool2d(t, c.options);
      };
      Tensor x64 = x.clone().set_requires_grad(true);
      Tensor x32 = ops::cast(x, DType::kFloat32).set_requires_grad(true);
      const Tensor y64 = pool(x64), y32 = pool(x32);
      ASSERT_TRUE(all_close(y32, y64, 1e-5, 1e-5));
      const Tensor dy = random_f64(y64.shape(), -1, 1, 32);
      EXPECT_TRUE(all_close(autodiff::grad(y32, {x32}, ops::cast(dy, DType::kFloat32))[0],
                            autodiff::grad(y64, {x64}, dy)[0], 1e-5, 1e-5));
    }
  }
}

TEST(Pool2D, GradcheckMaxAndAverage) {
  const std::vector<PoolCase> cases = {
      {"2x2 stride 2 valid", {1, 2, 4, 6}, {.kernel_size = {2, 2}, .stride = {2, 2}}},
      {"3x3 stride 1 valid (overlapping)", {2, 1, 5, 4}, {.kernel_size = {3, 3}}},
      {"3x2 stride (2, 1) same",
       {1, 2, 5, 4},
       {.kernel_size = {3, 2}, .stride = {2, 1}, .pad_mode = "same"}},
      {"2x2 stride 2 same odd",
       {1, 2, 5, 5},
       {.kernel_size = {2, 2}, .stride = {2, 2}, .pad_mode = "same"}},
      {"1x1 kernel", {1, 1, 3, 3}, {.kernel_size = {1, 1}}},
  };
  for (const PoolCase& c : cases) {
    SCOPED_TRACE(c.name);
    // Random values are distinct far beyond the finite-difference step: max is differentiable.
    const Tensor x = random_f64(c.x, -1, 1, 41);
    EXPECT_TRUE(gradcheck(
        [&](const std::vector<Tensor>& in) { return ops::max_pool2d(in[0], c.options); }, {x}))
        << "max";
    EXPECT_TRUE(gradcheck(
        [&](const std::vector<Tensor>& in) { return ops::avg_pool2d(in[0], c.options); }, {x}))
        << "avg";
  }
}

TEST(Pool2D, EmptyBatch) {
  for (DType dt : kBoth) {
    SCOPED_TRACE(dtype_name(dt));
    for (bool max : {true, false}) {
      Tensor x = Tensor::zeros({0, 2, 4, 4}, dt).set_requires_grad(true);
      const ops::Pool2DOptions o{.kernel_size = {2, 2}, .stride = {2, 2}};
      const Tensor y = max ? ops::max_pool2d(x, o) : ops::avg_pool2d(x, o);
      EXPECT_EQ(y.shape(), (Shape{0, 2, 2, 2}));
      EXPECT_EQ(autodiff::grad(y, {x}, Tensor::zeros(y.shape(), dt))[0].shape(), x.shape());
    }
  }
}

TEST(Pool2D, BadInputsAreReported) {
  const Tensor x = Tensor::zeros({1, 2, 4, 4});
  const ops::Pool2DOptions k2{.kernel_size = {2, 2}};
  EXPECT_ERROR(ops::max_pool2d(Tensor::zeros({2, 4, 4}), k2), "MaxPool2D", "input 0", "(2, 4, 4)",
               "expected rank 4");
  EXPECT_ERROR(ops::avg_pool2d(x, {.kernel_size = {5, 2}}), "AvgPool2D",
               "kernel_size (5, 2) is larger than the input height and width (4, 4)",
               "pad_mode 'valid'");
  EXPECT_ERROR(ops::max_pool2d(x, {.kernel_size = {2, 2}, .pad_mode = "pad"}), "MaxPool2D",
               "pad_mode 'pad' is not supported", "expected one of \"valid\", \"same\"");
  EXPECT_ERROR(ops::max_pool2d(x, {.kernel_size = {0, 2}}), "attribute kernel_size is (0, 2)",
               "each >= 1");
  EXPECT_ERROR(ops::avg_pool2d(x, {.kernel_size = {2, 2}, .stride = {1, 0}}),
               "AvgPool2D: attribute stride is (1, 0)", "each >= 1");
  EXPECT_ERROR(ops::avg_pool2d(x, {.kernel_size = {2, 2, 2}}), "attribute kernel_size is (2, 2, 2)",
               "expected 2 values");
  EXPECT_ERROR(ops::max_pool2d(Tensor::zeros({1, 2, 4, 4}, DType::kInt64), k2),
               "input 0 has dtype Int64", "expected Float32 or Float64");
  EXPECT_ERROR(ir::call("MaxPoolGrad", {x, Tensor::zeros({1, 2, 2, 2})},
                        {{"kernel_size", std::vector<int64_t>{2, 2}}}),
               "MaxPoolGrad: input 1 has shape (1, 2, 2, 2); expected (1, 2, 3, 3)");
}

}  // namespace
}  // namespace cleave

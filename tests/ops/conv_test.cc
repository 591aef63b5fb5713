// Conv2D and its backward primitives: hand-computed values, oneDNN (Float32) against the reference
// loops (Float64), finite-difference gradients and every bad-input error.
#include <gtest/gtest.h>

#include "cleave/cleave.h"
#include "testing/gradcheck.h"

namespace cleave {
namespace {

using testing::all_close;
using testing::gradcheck;
using testing::random_f64;

Tensor f64(const std::vector<double>& v, const Shape& s) { return Tensor::from_vector(v, s); }

TEST(Conv2D, ValidMatchesHandComputed) {
  const Tensor x = f64({1, 2, 3, 4, 5, 6, 7, 8, 9}, {1, 1, 3, 3});
  const Tensor w = f64({1, 2, 3, 4}, {1, 1, 2, 2});
  const Tensor expected = f64({37, 47, 67, 77}, {1, 1, 2, 2});
  EXPECT_TRUE(all_close(ops::conv2d(x, w), expected));
  EXPECT_TRUE(all_close(ops::conv2d(ops::cast(x, DType::kFloat32), ops::cast(w, DType::kFloat32)),
                        expected, 1e-5));
}

TEST(Conv2D, SameStride2PutsTheExtraPaddingBottomRight) {
  // 4x4 ones, 3x3 ones, stride 2: out 2x2, total padding 1 per dim, all of it after.
  for (DType dt : {DType::kFloat64, DType::kFloat32}) {
    const Tensor y = ops::conv2d(Tensor::ones({1, 1, 4, 4}, dt), Tensor::ones({1, 1, 3, 3}, dt),
                                 {.stride = {2, 2}, .pad_mode = "same"});
    EXPECT_TRUE(all_close(y, f64({9, 6, 6, 4}, {1, 1, 2, 2}))) << dtype_name(dt);
  }
}

TEST(Conv2D, ExplicitAsymmetricPadding) {
  // Padded input: 1 zero row on top, 2 zero columns on the right.
  for (DType dt : {DType::kFloat64, DType::kFloat32}) {
    const Tensor y = ops::conv2d(Tensor::ones({1, 1, 2, 2}, dt), Tensor::ones({1, 1, 2, 2}, dt),
                                 {.pad_mode = "pad", .pad = {1, 0, 0, 2}});
    EXPECT_TRUE(all_close(y, f64({2, 1, 0, 4, 2, 0}, {1, 1, 2, 3}))) << dtype_name(dt);
  }
}

TEST(Conv2D, DilationSpreadsTheKernel) {
  const Tensor x = f64({1, 2, 3, 4, 5, 6, 7, 8, 9}, {1, 1, 3, 3});
  for (DType dt : {DType::kFloat64, DType::kFloat32}) {
    const Tensor y =
        ops::conv2d(ops::cast(x, dt), Tensor::ones({1, 1, 2, 2}, dt), {.dilation = {2, 2}});
    EXPECT_TRUE(all_close(y, f64({1 + 3 + 7 + 9}, {1, 1, 1, 1}))) << dtype_name(dt);
  }
}

TEST(Conv2D, GroupsDoNotMixChannels) {
  const Tensor x = f64({1, 2}, {1, 2, 1, 1});
  const Tensor w = f64({3, 4}, {2, 1, 1, 1});
  for (DType dt : {DType::kFloat64, DType::kFloat32}) {
    const Tensor y = ops::conv2d(ops::cast(x, dt), ops::cast(w, dt), {.group = 2});
    EXPECT_TRUE(all_close(y, f64({3, 8}, {1, 2, 1, 1}))) << dtype_name(dt);
  }
}

TEST(Conv2D, PadModeIsCaseInsensitive) {
  const Tensor y = ops::conv2d(Tensor::ones({1, 1, 4, 4}, DType::kFloat64),
                               Tensor::ones({1, 1, 3, 3}, DType::kFloat64), {.pad_mode = "SAME"});
  EXPECT_EQ(y.shape(), (Shape{1, 1, 4, 4}));
}

struct ConvCase {
  const char* name;
  Shape x, w;
  ops::Conv2DOptions options;
};

std::vector<ConvCase> conv_cases() {
  return {
      {"valid", {2, 3, 7, 6}, {4, 3, 3, 2}, {}},
      {"same", {2, 3, 7, 6}, {4, 3, 3, 3}, {.pad_mode = "same"}},
      {"same stride 2", {2, 3, 7, 8}, {4, 3, 3, 3}, {.stride = {2, 2}, .pad_mode = "same"}},
      {"same stride 2 even kernel",
       {1, 2, 6, 7},
       {3, 2, 2, 4},
       {.stride = {2, 2}, .pad_mode = "same"}},
      {"pad stride 2",
       {2, 3, 7, 8},
       {4, 3, 3, 3},
       {.stride = {2, 2}, .pad_mode = "pad", .pad = {1, 2, 0, 1}}},
      {"valid dilation 2", {2, 3, 9, 8}, {4, 3, 3, 3}, {.dilation = {2, 2}}},
      {"same dilation 2 stride 2",
       {2, 3, 9, 8},
       {4, 3, 3, 3},
       {.stride = {2, 2}, .dilation = {2, 2}, .pad_mode = "same"}},
      {"group 2 pad",
       {2, 4, 6, 6},
       {6, 2, 3, 3},
       {.pad_mode = "pad", .pad = {1, 1, 1, 1}, .group = 2}},
      {"depthwise", {2, 4, 5, 5}, {4, 1, 3, 3}, {.pad_mode = "same", .group = 4}},
      {"stride (2, 1) dilation (1, 2)",
       {1, 2, 7, 9},
       {3, 2, 2, 3},
       {.stride = {2, 1}, .dilation = {1, 2}}},
      {"1x1 kernel", {3, 5, 4, 4}, {2, 5, 1, 1}, {}},
      {"16 channels group 2 same stride 2",
       {2, 16, 9, 9},
       {8, 8, 3, 3},
       {.stride = {2, 2}, .pad_mode = "same", .group = 2}},
      {"depthwise dilation 2 pad",
       {2, 8, 7, 7},
       {8, 1, 3, 3},
       {.dilation = {2, 2}, .pad_mode = "pad", .pad = {2, 1, 0, 2}, .group = 8}},
      {"lenet conv1", {32, 1, 32, 32}, {6, 1, 5, 5}, {}},
      // NOTE [Filter gradient of few input channels] in src/kernels/cpu/conv.cc: one or two input
      // channels, every kernel width it takes (1-7) and one it leaves to oneDNN (8), an odd number
      // of output channels, rows shorter than a vector and not a whole number of vectors,
      // padding on each side.
      {"1 channel 1x1", {2, 1, 5, 3}, {3, 1, 1, 1}, {}},
      {"1 channel 2x2 odd outputs", {3, 1, 6, 21}, {5, 1, 2, 2}, {}},
      {"2 channels 3x3 same", {2, 2, 9, 17}, {3, 2, 3, 3}, {.pad_mode = "same"}},
      {"2 channels 4x4 asymmetric padding",
       {2, 2, 7, 9},
       {4, 2, 4, 4},
       {.pad_mode = "pad", .pad = {0, 3, 2, 1}}},
      {"1 channel 6x7 pad", {2, 1, 11, 30}, {7, 1, 6, 7}, {.pad_mode = "pad", .pad = {1, 2, 3, 0}}},
      {"1 channel 3x8", {2, 1, 5, 20}, {2, 1, 3, 8}, {}},
      {"1 channel stride 2", {2, 1, 9, 9}, {3, 1, 3, 3}, {.stride = {2, 2}}},
      {"lenet conv2", {32, 6, 14, 14}, {16, 6, 5, 5}, {}},
  };
}

TEST(Conv2D, Float32MatchesFloat64ReferenceForwardAndBackward) {
  for (const ConvCase& c : conv_cases()) {
    SCOPED_TRACE(c.name);
    const Tensor x64 = random_f64(c.x, -1, 1, 11);
    const Tensor w64 = random_f64(c.w, -1, 1, 12);
    Tensor x32 = ops::cast(x64, DType::kFloat32), w32 = ops::cast(w64, DType::kFloat32);
    Tensor x64g = x64.clone().set_requires_grad(true), w64g = w64.clone().set_requires_grad(true);
    x32.set_requires_grad(true);
    w32.set_requires_grad(true);
    const Tensor y64 = ops::conv2d(x64g, w64g, c.options);
    const Tensor y32 = ops::conv2d(x32, w32, c.options);
    ASSERT_TRUE(all_close(y32, y64, 1e-4, 1e-4));
    const Tensor dy64 = random_f64(y64.shape(), -1, 1, 13);
    const std::vector<Tensor> g64 = autodiff::grad(y64, {x64g, w64g}, dy64);
    const std::vector<Tensor> g32 =
        autodiff::grad(y32, {x32, w32}, ops::cast(dy64, DType::kFloat32));
    EXPECT_TRUE(all_close(g32[0], g64[0], 1e-4, 1e-4)) << "dx";
    EXPECT_TRUE(all_close(g32[1], g64[1], 2e-3, 1e-4)) << "dweight";
  }
}

TEST(Conv2D, GradcheckEveryPadModeStrideDilationAndGroup) {
  const std::vector<ConvCase> cases = {
      {"valid", {2, 2, 5, 4}, {3, 2, 3, 2}, {}},
      {"same", {1, 2, 5, 5}, {2, 2, 3, 3}, {.pad_mode = "same"}},
      {"same stride 2", {1, 2, 5, 6}, {2, 2, 3, 3}, {.stride = {2, 2}, .pad_mode = "same"}},
      {"pad stride 2",
       {1, 2, 5, 5},
       {2, 2, 3, 3},
       {.stride = {2, 2}, .pad_mode = "pad", .pad = {1, 0, 2, 1}}},
      {"dilation 2", {1, 2, 6, 6}, {2, 2, 2, 3}, {.dilation = {2, 2}}},
      {"group 2", {1, 4, 4, 4}, {4, 2, 2, 2}, {.pad_mode = "same", .group = 2}},
      {"stride (2, 1) dilation (1, 2)",
       {1, 1, 5, 6},
       {2, 1, 2, 2},
       {.stride = {2, 1}, .dilation = {1, 2}}},
  };
  for (const ConvCase& c : cases) {
    SCOPED_TRACE(c.name);
    EXPECT_TRUE(gradcheck(
        [&](const std::vector<Tensor>& in) { return ops::conv2d(in[0], in[1], c.options); },
        {random_f64(c.x, -1, 1, 3), random_f64(c.w, -1, 1, 4)}));
  }
}

TEST(Conv2D, GradientOfTheWeightAlone) {
  // x needs no gradient, so only Conv2DBackpropFilter runs. With dy = 1, tap (ki, kj) of a
  // "same" 3x3 kernel sums x over the positions it reaches: the centre reaches all of x, the
  // top-left corner only rows and columns 0..2.
  const Tensor x = random_f64({1, 2, 4, 4}, -1, 1, 5);
  Tensor w = random_f64({3, 2, 3, 3}, -1, 1, 6).set_requires_grad(true);
  const Tensor y = ops::conv2d(x, w, {.pad_mode = "same"});
  const Tensor dw = autodiff::grad(y, {w}, Tensor::ones(y.shape(), DType::kFloat64))[0];
  double all = 0, corner = 0;
  for (int64_t i = 0; i < 4; ++i) {
    for (int64_t j = 0; j < 4; ++j) {
      all += x.at({0, 1, i, j});
      if (i < 3 && j < 3) corner += x.at({0, 1, i, j});
    }
  }
  EXPECT_NEAR(dw.at({2, 1, 1, 1}), all, 1e-12);
  EXPECT_NEAR(dw.at({2, 1, 0, 0}), corner, 1e-12);
}

TEST(Conv2D, EmptyBatchAndNoChannels) {
  for (DType dt : {DType::kFloat64, DType::kFloat32}) {
    SCOPED_TRACE(dtype_name(dt));
    Tensor w = Tensor::ones({4, 3, 3, 3}, dt).set_requires_grad(true);
    const Tensor y = ops::conv2d(Tensor::zeros({0, 3, 5, 5}, dt), w, {.pad_mode = "same"});
    EXPECT_EQ(y.shape(), (Shape{0, 4, 5, 5}));
    const Tensor dw = autodiff::grad(y, {w}, Tensor::zeros(y.shape(), dt))[0];
    EXPECT_TRUE(all_close(dw, Tensor::zeros({4, 3, 3, 3}, DType::kFloat64)));
    // No input channels: every output is an empty sum.
    const Tensor y0 = ops::conv2d(Tensor::ones({2, 0, 4, 4}, dt), Tensor::ones({3, 0, 2, 2}, dt));
    EXPECT_TRUE(all_close(y0, Tensor::zeros({2, 3, 3, 3}, DType::kFloat64)));
  }
}

TEST(Conv2D, BadInputsAreReported) {
  const Tensor x = Tensor::zeros({1, 4, 5, 5});
  const Tensor w = Tensor::zeros({2, 4, 3, 3});
  EXPECT_ERROR(ops::conv2d(Tensor::zeros({1, 4, 5}), w), "Conv2D", "input 0 (x)", "(1, 4, 5)",
               "expected rank 4");
  EXPECT_ERROR(ops::conv2d(x, Tensor::zeros({2, 4, 3})), "Conv2D", "input 1 (weight)",
               "expected rank 4");
  EXPECT_ERROR(ops::conv2d(x, Tensor::zeros({2, 3, 3, 3})), "Conv2D", "input 1 (weight)",
               "(2, 3, 3, 3)", "3 input channels per group", "input 0 (x)", "(1, 4, 5, 5)",
               "4 channels / group 1 = 4");
  EXPECT_ERROR(ops::conv2d(Tensor::zeros({1, 3, 5, 5}), Tensor::zeros({2, 1, 3, 3}), {.group = 2}),
               "Conv2D", "group 2 does not divide the 3 input channels of input 0 (x)");
  EXPECT_ERROR(ops::conv2d(x, Tensor::zeros({3, 2, 3, 3}), {.group = 2}), "Conv2D",
               "group 2 does not divide the 3 output channels of input 1 (weight)");
  EXPECT_ERROR(ops::conv2d(x, w, {.group = 0}), "attribute group is 0", "expected >= 1");
  EXPECT_ERROR(ops::conv2d(Tensor::zeros({1, 4, 2, 5}), w), "Conv2D", "kernel height 3",
               "larger than the padded input height 2", "pad_mode 'valid'");
  EXPECT_ERROR(ops::conv2d(Tensor::zeros({1, 4, 5, 4}), w, {.dilation = {1, 2}}),
               "kernel width 3 (dilated to 5 by dilation 2)", "padded input width 4");
  EXPECT_ERROR(
      ops::conv2d(Tensor::zeros({1, 4, 2, 5}), w, {.pad_mode = "pad", .pad = {0, 0, 1, 1}}),
      "kernel height 3", "padded input height 2", "pad_mode 'pad'");
  EXPECT_ERROR(ops::conv2d(x, w, {.pad_mode = "full"}), "Conv2D", "pad_mode 'full'",
               "expected one of \"valid\", \"same\", \"pad\"");
  EXPECT_ERROR(ops::conv2d(x, w, {.stride = {0, 1}}), "Conv2D", "attribute stride is (0, 1)",
               "each >= 1");
  EXPECT_ERROR(ops::conv2d(x, w, {.stride = {2}}), "attribute stride is (2)", "2 values");
  EXPECT_ERROR(ops::conv2d(x, w, {.dilation = {1, -1}}), "attribute dilation is (1, -1)",
               "each >= 1");
  EXPECT_ERROR(ops::conv2d(x, w, {.pad_mode = "pad", .pad = {1, -1, 0, 0}}),
               "attribute pad is (1, -1, 0, 0)", "each >= 0");
  EXPECT_ERROR(ops::conv2d(x, w, {.pad_mode = "pad", .pad = {1, 1}}), "attribute pad is (1, 1)",
               "expected 4 values");
  EXPECT_ERROR(ops::conv2d(x, w, {.pad = {1, 1, 1, 1}}), "attribute pad is (1, 1, 1, 1)",
               "pad_mode is 'valid'", "needs pad_mode \"pad\"");
  EXPECT_ERROR(ops::conv2d(x, Tensor::zeros({2, 4, 3, 3}, DType::kFloat64)), "Conv2D",
               "input 1 has dtype Float64", "input 0 has dtype Float32");
  EXPECT_ERROR(ops::conv2d(Tensor::zeros({1, 4, 5, 5}, DType::kInt32),
                           Tensor::zeros({2, 4, 3, 3}, DType::kInt32)),
               "Conv2D", "input 0 has dtype Int32", "expected Float32 or Float64");
}

TEST(Conv2D, BackwardPrimitivesCheckTheGradientShape) {
  const ir::Attrs attrs{{"stride", std::vector<int64_t>{1, 1}},
                        {"input_shape", std::vector<int64_t>{1, 4, 5, 5}},
                        {"filter_shape", std::vector<int64_t>{2, 4, 3, 3}}};
  EXPECT_ERROR(ir::call("Conv2DBackpropInput",
                        {Tensor::zeros({1, 2, 4, 4}), Tensor::zeros({2, 4, 3, 3})}, attrs),
               "Conv2DBackpropInput: input 0 has shape (1, 2, 4, 4); expected (1, 2, 3, 3)");
  EXPECT_ERROR(ir::call("Conv2DBackpropFilter",
                        {Tensor::zeros({1, 2, 3, 3}), Tensor::zeros({1, 3, 5, 5})}, attrs),
               "Conv2DBackpropFilter", "input 1 (x)", "attribute filter_shape");
}

}  // namespace
}  // namespace cleave

// ResizeBilinear, ResizeNearest and their backward primitives: hand-computed values for both
// coordinate mappings (NOTE [Resize coordinate mapping]), the vectorised Float32 loops against
// the Float64 reference, finite-difference gradients and bad inputs.
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

// y[i][j] = 2·p[i] + p[j] for x = [[0, 1], [2, 3]] resized to n x n, p the source positions.
Tensor plane_from_positions(const std::vector<double>& p) {
  std::vector<double> v;
  for (double r : p) {
    for (double c : p) v.push_back(2 * r + c);
  }
  const int64_t n = static_cast<int64_t>(p.size());
  return f64(v, {1, 1, n, n});
}

TEST(ResizeBilinear, HalfPixelCentresMatchHandComputed) {
  // 2 -> 4: source positions (i + 0.5)/2 − 0.5 = −0.25 (clamped to 0), 0.25, 0.75, 1.25 (upper
  // neighbour clamped, so 1).
  const Tensor x = f64({0, 1, 2, 3}, {1, 1, 2, 2});
  for (DType dt : kBoth) {
    const Tensor y = ops::resize_bilinear(ops::cast(x, dt), {4, 4});
    EXPECT_TRUE(all_close(y, plane_from_positions({0, 0.25, 0.75, 1}), 1e-6)) << dtype_name(dt);
  }
}

TEST(ResizeBilinear, AlignCornersMatchesHandComputed) {
  const Tensor x = f64({0, 1, 2, 3}, {1, 1, 2, 2});
  for (DType dt : kBoth) {
    const Tensor y = ops::resize_bilinear(ops::cast(x, dt), {3, 3}, /*align_corners=*/true);
    EXPECT_TRUE(all_close(y, plane_from_positions({0, 0.5, 1}), 1e-6)) << dtype_name(dt);
  }
}

TEST(ResizeBilinear, DownsamplingAndSingleOutputs) {
  const Tensor row = f64({0, 1, 2, 3}, {1, 1, 1, 4});
  for (DType dt : kBoth) {
    const Tensor x = ops::cast(row, dt);
    // 4 -> 2, half pixel: positions 0.5 and 2.5.
    EXPECT_TRUE(all_close(ops::resize_bilinear(x, {1, 2}), f64({0.5, 2.5}, {1, 1, 1, 2})));
    // 4 -> 2, corners: positions 0 and 3.
    EXPECT_TRUE(all_close(ops::resize_bilinear(x, {1, 2}, true), f64({0, 3}, {1, 1, 1, 2})));
    // 4 -> 1: half pixel reads the centre (position 1.5), corners the first pixel.
    EXPECT_TRUE(all_close(ops::resize_bilinear(x, {1, 1}), f64({1.5}, {1, 1, 1, 1})));
    EXPECT_TRUE(all_close(ops::resize_bilinear(x, {1, 1}, true), f64({0}, {1, 1, 1, 1})));
  }
}

TEST(ResizeNearest, HalfPixelAndAlignCornersMatchHandComputed) {
  const Tensor three = f64({10, 20, 30}, {1, 1, 1, 3});
  const Tensor five = f64({0, 1, 2, 3, 4}, {1, 1, 1, 5});
  for (DType dt : kBoth) {
    auto c = [&](const Tensor& t) { return ops::cast(t, dt); };
    // Half pixel: floor((i + 0.5)·in/out).
    EXPECT_TRUE(
        all_close(ops::resize_nearest(c(three), {1, 5}), f64({10, 10, 20, 30, 30}, {1, 1, 1, 5})));
    EXPECT_TRUE(all_close(ops::resize_nearest(c(five), {1, 2}), f64({1, 3}, {1, 1, 1, 2})));
    // Align corners: round(i·(in − 1)/(out − 1)), halves up.
    EXPECT_TRUE(all_close(ops::resize_nearest(c(three), {1, 5}, true),
                          f64({10, 20, 20, 30, 30}, {1, 1, 1, 5})));
    EXPECT_TRUE(all_close(ops::resize_nearest(c(five), {1, 2}, true), f64({0, 4}, {1, 1, 1, 2})));
    // Both dims: 2x2 -> 4x4 repeats each pixel in a 2x2 block.
    const Tensor y = ops::resize_nearest(c(f64({1, 2, 3, 4}, {1, 1, 2, 2})), {4, 4});
    EXPECT_TRUE(all_close(y, f64({1, 1, 2, 2, 1, 1, 2, 2, 3, 3, 4, 4, 3, 3, 4, 4}, {1, 1, 4, 4})));
  }
}

TEST(ResizeNearest, GradientSumsIntoTheSourcePixels) {
  // 3 -> 5 half pixel reads [0, 0, 1, 2, 2]: pixel 0 and 2 receive two gradients each.
  for (DType dt : kBoth) {
    Tensor x = Tensor::zeros({1, 1, 1, 3}, dt).set_requires_grad(true);
    const Tensor y = ops::resize_nearest(x, {1, 5});
    const Tensor dx = autodiff::grad(y, {x}, ops::cast(f64({1, 2, 3, 4, 5}, {1, 1, 1, 5}), dt))[0];
    EXPECT_TRUE(all_close(dx, f64({3, 3, 9}, {1, 1, 1, 3})));
  }
}

struct ResizeCase {
  const char* name;
  Shape x;
  std::vector<int64_t> size;
};

const std::vector<ResizeCase>& resize_cases() {
  static const std::vector<ResizeCase> cases = {
      {"up non-integer", {2, 3, 5, 7}, {9, 4}},
      {"down", {1, 2, 8, 8}, {3, 5}},
      {"to 1x1", {2, 1, 4, 4}, {1, 1}},
      {"from 1x1", {1, 1, 1, 1}, {3, 2}},
      {"identity", {2, 2, 5, 6}, {5, 6}},
      {"double", {4, 3, 16, 16}, {32, 32}},
      {"wide rows", {1, 2, 3, 40}, {7, 67}},
      // 38400 outputs: above the kernels' parallel grain, rows split across the threads.
      {"above the grain", {2, 3, 40, 40}, {80, 80}},
  };
  return cases;
}

TEST(Resize, Float32MatchesFloat64ReferenceForwardAndBackward) {
  for (const ResizeCase& c : resize_cases()) {
    for (bool bilinear : {true, false}) {
      for (bool align : {false, true}) {
        SCOPED_TRACE(std::string(c.name) + (bilinear ? " bilinear" : " nearest") +
                     (align ? " align_corners" : " half pixel"));
        auto resize = [&](const Tensor& t) {
          return bilinear ? ops::resize_bilinear(t, c.size, align)
                          : ops::resize_nearest(t, c.size, align);
        };
        const Tensor x = random_f64(c.x, -1, 1, 111);
        Tensor x64 = x.clone().set_requires_grad(true);
        Tensor x32 = ops::cast(x, DType::kFloat32).set_requires_grad(true);
        const Tensor y64 = resize(x64), y32 = resize(x32);
        ASSERT_TRUE(all_close(y32, y64, 1e-5, 1e-5));
        const Tensor dy = random_f64(y64.shape(), -1, 1, 112);
        EXPECT_TRUE(all_close(autodiff::grad(y32, {x32}, ops::cast(dy, DType::kFloat32))[0],
                              autodiff::grad(y64, {x64}, dy)[0], 1e-4, 1e-5));
      }
    }
  }
}

TEST(Resize, GradcheckBothResizesAndBothCornerModes) {
  const std::vector<ResizeCase> cases = {
      {"up", {2, 2, 3, 3}, {5, 4}},
      {"down", {1, 2, 5, 6}, {3, 2}},
      {"from one row", {1, 1, 1, 3}, {3, 7}},
      {"to 1x1", {1, 1, 3, 2}, {1, 1}},
  };
  for (const ResizeCase& c : cases) {
    for (bool align : {false, true}) {
      SCOPED_TRACE(std::string(c.name) + (align ? " align_corners" : " half pixel"));
      const Tensor x = random_f64(c.x, -1, 1, 121);
      EXPECT_TRUE(gradcheck(
          [&](const std::vector<Tensor>& in) { return ops::resize_bilinear(in[0], c.size, align); },
          {x}))
          << "bilinear";
      EXPECT_TRUE(gradcheck(
          [&](const std::vector<Tensor>& in) { return ops::resize_nearest(in[0], c.size, align); },
          {x}))
          << "nearest";
    }
  }
}

TEST(Resize, EmptyBatch) {
  for (DType dt : kBoth) {
    SCOPED_TRACE(dtype_name(dt));
    Tensor x = Tensor::zeros({0, 2, 3, 3}, dt).set_requires_grad(true);
    for (const Tensor& y : {ops::resize_bilinear(x, {5, 5}), ops::resize_nearest(x, {5, 5})}) {
      EXPECT_EQ(y.shape(), (Shape{0, 2, 5, 5}));
      EXPECT_EQ(autodiff::grad(y, {x}, Tensor::zeros(y.shape(), dt))[0].shape(), x.shape());
    }
  }
}

TEST(Resize, BadInputsAreReported) {
  const Tensor x = Tensor::zeros({1, 2, 4, 4});
  EXPECT_ERROR(ops::resize_bilinear(Tensor::zeros({2, 4, 4}), {8, 8}), "ResizeBilinear",
               "input 0 has shape (2, 4, 4) (rank 3)", "expected rank 4 (N, C, H, W)");
  EXPECT_ERROR(ops::resize_bilinear(x, {0, 4}), "ResizeBilinear: attribute size is (0, 4)",
               "expected 2 values (height, width), each >= 1");
  EXPECT_ERROR(ops::resize_nearest(x, {4, -2}), "ResizeNearest: attribute size is (4, -2)");
  EXPECT_ERROR(ops::resize_nearest(x, {4, 4, 4}), "attribute size is (4, 4, 4)",
               "expected 2 values");
  EXPECT_ERROR(ops::resize_nearest(Tensor::zeros({1, 2, 0, 4}), {4, 4}), "ResizeNearest",
               "input 0 has shape (1, 2, 0, 4)", "expected height and width >= 1");
  EXPECT_ERROR(ops::resize_bilinear(Tensor::zeros({1, 2, 4, 4}, DType::kInt32), {8, 8}),
               "input 0 has dtype Int32", "expected Float32 or Float64");
  EXPECT_ERROR(ir::call("ResizeBilinearGrad", {Tensor::zeros({1, 3, 8, 8})},
                        {{"input_shape", std::vector<int64_t>{1, 2, 4, 4}}}),
               "ResizeBilinearGrad: input 0 (dy) has shape (1, 3, 8, 8)",
               "expected N and C of attribute input_shape (1, 2, 4, 4)");
}

}  // namespace
}  // namespace cleave

// Softmax and LogSoftmax: values, stability, both f32 paths, gradients and errors.
#include "kernels/cpu/softmax.h"

#include <gtest/gtest.h>

#include <cmath>

#include "cleave/ops/nn.h"
#include "testing/gradcheck.h"

namespace cleave {
namespace {

using testing::all_close;
using testing::gradcheck;
using testing::random_f64;

Tensor f32(const Tensor& t) { return ops::cast(t, DType::kFloat32); }

// Naive f64 softmax / log-softmax over `axis`, from the definition.
Tensor reference(const Tensor& x, int64_t axis, bool log) {
  const Shape& s = x.shape();
  if (axis < 0) axis += s.rank();
  int64_t outer = 1, inner = 1;
  for (int64_t d = 0; d < axis; ++d) outer *= s[d];
  for (int64_t d = axis + 1; d < s.rank(); ++d) inner *= s[d];
  const int64_t size = s[axis];
  const std::vector<double> v = x.to_double_vector();
  std::vector<double> out(v.size());
  for (int64_t o = 0; o < outer; ++o) {
    for (int64_t i = 0; i < inner; ++i) {
      auto at = [&](int64_t c) { return static_cast<size_t>((o * size + c) * inner + i); };
      double m = -INFINITY;
      for (int64_t c = 0; c < size; ++c) m = std::max(m, v[at(c)]);
      double sum = 0;
      for (int64_t c = 0; c < size; ++c) sum += std::exp(v[at(c)] - m);
      for (int64_t c = 0; c < size; ++c) {
        out[at(c)] = log ? v[at(c)] - m - std::log(sum) : std::exp(v[at(c)] - m) / sum;
      }
    }
  }
  return Tensor::from_vector(out, s);
}

TEST(Softmax, HandComputedValues) {
  const Tensor x = Tensor::from_vector<double>({1, 2, 3});
  const Tensor sm =
      Tensor::from_vector<double>({0.09003057317038046, 0.24472847105479764, 0.6652409557748219});
  const Tensor lsm =
      Tensor::from_vector<double>({-2.4076059644443806, -1.4076059644443806, -0.4076059644443806});
  EXPECT_TRUE(all_close(ops::softmax(x), sm, 1e-15, 1e-14));
  EXPECT_TRUE(all_close(ops::log_softmax(x), lsm, 1e-15, 1e-14));
  EXPECT_TRUE(all_close(ops::softmax(f32(x)), sm, 1e-7, 1e-6));
  EXPECT_TRUE(all_close(ops::log_softmax(f32(x)), lsm, 1e-7, 1e-6));
}

TEST(Softmax, LargeLogitsStayFinite) {
  // exp(1000) overflows in both dtypes; the max is subtracted first.
  const Tensor x = Tensor::from_vector<double>({1000, 1001, 1002, -1000, -1001, -1002}, {2, 3});
  const Tensor sm =
      Tensor::from_vector<double>({0.09003057317038046, 0.24472847105479764, 0.6652409557748219,
                                   0.6652409557748219, 0.24472847105479764, 0.09003057317038046},
                                  {2, 3});
  EXPECT_TRUE(all_close(ops::softmax(x), sm, 1e-15, 1e-14));
  EXPECT_TRUE(all_close(ops::softmax(f32(x)), sm, 1e-7, 1e-6));
  EXPECT_TRUE(all_close(ops::log_softmax(f32(x)), reference(x, -1, true), 1e-6, 1e-6));
  // The same on the strided (non-last axis) path.
  const Tensor xt = Tensor::from_vector<double>({1000, -1000, 1001, -1001, 1002, -1002}, {3, 2});
  EXPECT_TRUE(all_close(ops::log_softmax(f32(xt), 0), reference(xt, 0, true), 1e-6, 1e-6));
}

TEST(Softmax, MatchesReferenceOnAnyAxisInBothDtypes) {
  struct AxisCase {
    Shape shape;
    int64_t axis;
  };
  // Includes a size-1 axis, rows of 10 classes (chunked exp across rows), a non-last axis, and
  // inputs large enough for the oneDNN path.
  const std::vector<AxisCase> cases = {
      {{1}, 0},          {{4, 1}, 1},  {{32, 10}, -1},   {{3, 7, 5}, 0},   {{2, 3, 4}, 1},
      {{2, 9, 3, 3}, 1}, {{5, 17}, 1}, {{64, 1000}, -1}, {{8, 300, 2}, 1}, {{3, 4099}, 1}};
  for (const AxisCase& c : cases) {
    const Tensor x = random_f64(c.shape, -8, 8, 3);
    for (bool log : {false, true}) {
      const Tensor expected = reference(x, c.axis, log);
      const Tensor y64 = log ? ops::log_softmax(x, c.axis) : ops::softmax(x, c.axis);
      const Tensor y32 = log ? ops::log_softmax(f32(x), c.axis) : ops::softmax(f32(x), c.axis);
      EXPECT_TRUE(all_close(y64, expected, 1e-14, 1e-12))
          << c.shape.to_string() << " axis " << c.axis << " log " << log;
      EXPECT_TRUE(all_close(y32, expected, 1e-6, 1e-5))
          << c.shape.to_string() << " axis " << c.axis << " log " << log << " f32";
    }
  }
}

TEST(Softmax, LoopsAndOneDnnAgree) {
  using kernels::cpu::SoftmaxKind;
  const Tensor x = f32(random_f64({128, 100}, -20, 20, 5));
  const kernels::cpu::SoftmaxShape s{.outer = 128, .axis = 100, .inner = 1};
  for (SoftmaxKind kind : {SoftmaxKind::kSoftmax, SoftmaxKind::kLogSoftmax}) {
    Tensor loops = Tensor::empty(x.shape()), chosen = Tensor::empty(x.shape());
    kernels::cpu::softmax_forward_loops(x.data<float>(), loops.data<float>(), s, kind);
    kernels::cpu::softmax_forward(x.data<float>(), chosen.data<float>(), s, kind);
    EXPECT_TRUE(all_close(loops, chosen, 1e-6, 1e-5));
  }
}

TEST(Softmax, VeryNegativeLogitsGiveZeroProbability) {
  const Tensor x = Tensor::from_vector<double>({0, -200, -1e30, 5}, {1, 4});
  const Tensor y = ops::softmax(f32(x));
  EXPECT_EQ(y.at({0, 1}), 0.0);
  EXPECT_EQ(y.at({0, 2}), 0.0);
  EXPECT_TRUE(all_close(y, reference(x, -1, false), 1e-7, 1e-6));
}

TEST(Softmax, Gradients) {
  struct AxisCase {
    Shape shape;
    int64_t axis;
  };
  for (const AxisCase& c : std::vector<AxisCase>{
           {{3}, 0}, {{2, 1}, 1}, {{4, 5}, -1}, {{4, 5}, 0}, {{2, 3, 4}, 1}, {{1, 3, 1}, 1}}) {
    const int64_t axis = c.axis;
    EXPECT_TRUE(gradcheck([&](const std::vector<Tensor>& in) { return ops::softmax(in[0], axis); },
                          {random_f64(c.shape, -2, 2, 9)}))
        << "softmax " << c.shape.to_string() << " axis " << axis;
    EXPECT_TRUE(
        gradcheck([&](const std::vector<Tensor>& in) { return ops::log_softmax(in[0], axis); },
                  {random_f64(c.shape, -2, 2, 10)}))
        << "log_softmax " << c.shape.to_string() << " axis " << axis;
  }
}

TEST(Softmax, Float32GradientsMatchFloat64) {
  for (int64_t axis : {int64_t{1}, int64_t{-1}}) {
    const Tensor x = random_f64({6, 11, 3}, -3, 3, 12);
    const Tensor dy = random_f64({6, 11, 3}, -1, 1, 13);
    for (bool log : {false, true}) {
      auto grad = [&](DType dtype) {
        Tensor in = ops::cast(x, dtype).set_requires_grad(true);
        const Tensor y = log ? ops::log_softmax(in, axis) : ops::softmax(in, axis);
        return autodiff::grad(y, {in}, ops::cast(dy, dtype))[0];
      };
      EXPECT_TRUE(all_close(grad(DType::kFloat32), grad(DType::kFloat64), 1e-6, 1e-5))
          << "axis " << axis << " log " << log;
    }
  }
}

TEST(Softmax, RejectsBadInputs) {
  EXPECT_ERROR(ops::softmax(Tensor::zeros({2, 3}), 2), "Softmax", "axis 2 is out of range",
               "input 0 of shape (2, 3)", "[-2, 1]");
  EXPECT_ERROR(ops::log_softmax(Tensor::zeros({2, 3}), -3), "LogSoftmax", "axis -3");
  EXPECT_ERROR(ops::softmax(Tensor::zeros({2, 3}, DType::kInt32)), "Softmax",
               "input 0 has dtype Int32", "expected Float32 or Float64");
  EXPECT_ERROR(ir::call("SoftmaxGrad", {Tensor::zeros({2, 3}), Tensor::zeros({3, 2})},
                        {{"axis", int64_t{-1}}}),
               "SoftmaxGrad", "input 0 (y) has shape (2, 3) but input 1 (dy) has shape (3, 2)");
}

}  // namespace
}  // namespace cleave

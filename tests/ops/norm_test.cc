// BatchNorm, LayerNorm and their backward primitives: hand-computed values, oneDNN (Float32)
// against the reference loops (Float64), finite-difference gradients (including gradients that
// reach the statistics outputs) and every bad-input error.
#include <gtest/gtest.h>

#include <cmath>

#include "cleave/cleave.h"
#include "testing/gradcheck.h"

namespace cleave {
namespace {

using testing::all_close;
using testing::gradcheck;
using testing::random_f64;

Tensor f64(const std::vector<double>& v, const Shape& s) { return Tensor::from_vector(v, s); }

const DType kBoth[] = {DType::kFloat64, DType::kFloat32};
constexpr double kEps = 1e-5;

// ---- BatchNorm ----

TEST(BatchNorm, TrainingUsesAndReturnsBatchStatistics) {
  // Channel 0 holds {1, 3}: mean 2, biased var 1. Channel 1 holds {2, 6}: mean 4, var 4.
  const Tensor x = f64({1, 2, 3, 6}, {2, 2});
  const Tensor gamma = f64({1, 2}, {2}), beta = f64({0, 1}, {2});
  const Tensor running = f64({100, 100}, {2});  // ignored in training
  const double s0 = 1 / std::sqrt(1 + kEps), s1 = 2 / std::sqrt(4 + kEps);
  for (DType dt : kBoth) {
    auto c = [&](const Tensor& t) { return ops::cast(t, dt); };
    const ops::BatchNormResult r =
        ops::batch_norm(c(x), c(gamma), c(beta), c(running), c(running), {.is_training = true});
    EXPECT_TRUE(all_close(r.y, f64({-s0, -2 * s1 + 1, s0, 2 * s1 + 1}, {2, 2}), 1e-6, 1e-6))
        << dtype_name(dt);
    EXPECT_TRUE(all_close(r.batch_mean, f64({2, 4}, {2}), 1e-6)) << dtype_name(dt);
    EXPECT_TRUE(all_close(r.batch_var, f64({1, 4}, {2}), 1e-6)) << dtype_name(dt);
  }
}

TEST(BatchNorm, TrainingAveragesOverBatchAndSpatialDims) {
  // One channel, values 1..4 over a 2x2 image: mean 2.5, var 1.25.
  const Tensor x = f64({1, 2, 3, 4}, {1, 1, 2, 2});
  const Tensor one = Tensor::ones({1}, DType::kFloat64), zero = Tensor::zeros({1}, DType::kFloat64);
  const double s = 1 / std::sqrt(1.25 + kEps);
  for (DType dt : kBoth) {
    auto c = [&](const Tensor& t) { return ops::cast(t, dt); };
    const ops::BatchNormResult r =
        ops::batch_norm(c(x), c(one), c(zero), c(zero), c(one), {.is_training = true});
    EXPECT_TRUE(all_close(r.y, f64({-1.5 * s, -0.5 * s, 0.5 * s, 1.5 * s}, {1, 1, 2, 2}), 1e-6))
        << dtype_name(dt);
    EXPECT_NEAR(r.batch_var.item(), 1.25, 1e-6);
  }
}

TEST(BatchNorm, InferenceUsesAndReturnsRunningStatistics) {
  const Tensor x = f64({1, 2, 3, 6}, {2, 2});
  const Tensor gamma = f64({1, 1}, {2}), beta = f64({0, 0}, {2});
  const Tensor mean = f64({0, 1}, {2}), var = f64({4, 9}, {2});
  const double s0 = 1 / std::sqrt(4 + kEps), s1 = 1 / std::sqrt(9 + kEps);
  for (DType dt : kBoth) {
    auto c = [&](const Tensor& t) { return ops::cast(t, dt); };
    const ops::BatchNormResult r =
        ops::batch_norm(c(x), c(gamma), c(beta), c(mean), c(var), {.is_training = false});
    EXPECT_TRUE(all_close(r.y, f64({1 * s0, 1 * s1, 3 * s0, 5 * s1}, {2, 2}), 1e-6))
        << dtype_name(dt);
    EXPECT_TRUE(all_close(r.batch_mean, mean));
    EXPECT_TRUE(all_close(r.batch_var, var));
  }
}

struct BnCase {
  const char* name;
  Shape x;
  bool training;
};

// The five inputs of a batch norm of x's shape: x, gamma, beta, running mean, running var (> 0).
std::vector<Tensor> bn_inputs(const Shape& x, uint64_t seed) {
  const Shape c{x[1]};
  return {random_f64(x, -2, 2, seed), random_f64(c, 0.5, 1.5, seed + 1),
          random_f64(c, -1, 1, seed + 2), random_f64(c, -0.5, 0.5, seed + 3),
          random_f64(c, 0.5, 2, seed + 4)};
}

ops::BatchNormResult bn(const std::vector<Tensor>& in, bool training) {
  return ops::batch_norm(in[0], in[1], in[2], in[3], in[4], {.is_training = training});
}

TEST(BatchNorm, Float32MatchesFloat64ReferenceForwardAndBackward) {
  const std::vector<BnCase> cases = {
      {"4-D training", {4, 3, 5, 5}, true},
      {"4-D inference", {4, 3, 5, 5}, false},
      {"2-D training", {8, 5}, true},
      {"3-D inference", {2, 3, 4}, false},
      {"large training", {16, 8, 12, 12}, true},
  };
  for (const BnCase& c : cases) {
    SCOPED_TRACE(c.name);
    std::vector<Tensor> in64 = bn_inputs(c.x, 51), in32;
    for (Tensor& t : in64) {
      in32.push_back(ops::cast(t, DType::kFloat32).set_requires_grad(true));
      t.set_requires_grad(true);
    }
    const ops::BatchNormResult r64 = bn(in64, c.training), r32 = bn(in32, c.training);
    ASSERT_TRUE(all_close(r32.y, r64.y, 1e-4, 1e-4));
    EXPECT_TRUE(all_close(r32.batch_mean, r64.batch_mean, 1e-5, 1e-5));
    EXPECT_TRUE(all_close(r32.batch_var, r64.batch_var, 1e-5, 1e-5));
    const Tensor dy = random_f64(c.x, -1, 1, 52);
    const std::vector<Tensor> g64 = autodiff::grad(r64.y, in64, dy);
    const std::vector<Tensor> g32 = autodiff::grad(r32.y, in32, ops::cast(dy, DType::kFloat32));
    for (size_t i = 0; i < g64.size(); ++i) {
      EXPECT_TRUE(all_close(g32[i], g64[i], 1e-3, 1e-4)) << "input " << i;
    }
  }
}

TEST(BatchNorm, GradcheckTrainingAndInference) {
  const std::vector<Shape> shapes = {{3, 2, 2, 3}, {4, 3}, {2, 3, 5}, {2, 2, 1, 1}, {1, 2, 3, 1}};
  for (const Shape& s : shapes) {
    for (bool training : {true, false}) {
      SCOPED_TRACE(s.to_string() + (training ? " training" : " inference"));
      EXPECT_TRUE(gradcheck([&](const std::vector<Tensor>& in) { return bn(in, training).y; },
                            bn_inputs(s, 61)));
    }
  }
}

TEST(BatchNorm, GradcheckThroughTheStatisticsOutputs) {
  // A loss using y and both statistics: their gradients must reach x (training) or the running
  // statistics (inference).
  for (bool training : {true, false}) {
    SCOPED_TRACE(training ? "training" : "inference");
    EXPECT_TRUE(gradcheck(
        [&](const std::vector<Tensor>& in) {
          const ops::BatchNormResult r = bn(in, training);
          return ops::add(ops::reduce_sum(ops::mul(r.y, r.y)),
                          ops::reduce_sum(ops::mul(ops::mul(r.batch_mean, r.batch_mean),
                                                   ops::add(r.batch_var, 1.0))));
        },
        bn_inputs({3, 2, 2, 2}, 71)));
  }
}

TEST(BatchNorm, EmptyBatchInInference) {
  for (DType dt : kBoth) {
    const Tensor c = Tensor::ones({3}, dt);
    const ops::BatchNormResult r =
        ops::batch_norm(Tensor::zeros({0, 3, 2, 2}, dt), c, c, c, c, {.is_training = false});
    EXPECT_EQ(r.y.shape(), (Shape{0, 3, 2, 2}));
    EXPECT_TRUE(all_close(r.batch_var, Tensor::ones({3}, DType::kFloat64)));
  }
}

TEST(BatchNorm, BadInputsAreReported) {
  const Tensor x = Tensor::zeros({2, 3, 4, 4});
  const Tensor c3 = Tensor::ones({3});
  EXPECT_ERROR(ops::batch_norm(Tensor::zeros({3}), c3, c3, c3, c3, {}), "BatchNorm", "input 0",
               "(3)", "expected rank >= 2");
  EXPECT_ERROR(ops::batch_norm(x, Tensor::ones({4}), c3, c3, c3, {}),
               "BatchNorm: input 1 (gamma) has shape (4); expected (3)",
               "channel dim 1 of input 0 (x), shape (2, 3, 4, 4)");
  EXPECT_ERROR(ops::batch_norm(x, c3, Tensor::ones({1, 3}), c3, c3, {}), "input 2 (beta)",
               "(1, 3)");
  EXPECT_ERROR(ops::batch_norm(x, c3, c3, Tensor::ones({2}), c3, {}), "input 3 (running_mean)");
  EXPECT_ERROR(ops::batch_norm(x, c3, c3, c3, Tensor::ones({5}), {}), "input 4 (running_var)");
  EXPECT_ERROR(ops::batch_norm(x, c3, c3, c3, c3, {.epsilon = 0}),
               "BatchNorm: attribute epsilon is 0; expected > 0");
  EXPECT_ERROR(ops::batch_norm(x, c3, c3, c3, c3, {.epsilon = -1e-3}), "epsilon is -0.001");
  EXPECT_ERROR(ops::batch_norm(x, c3, Tensor::ones({3}, DType::kFloat64), c3, c3, {}),
               "input 2 has dtype Float64", "input 0 has dtype Float32");
}

// ---- LayerNorm ----

TEST(LayerNorm, NormalisesTheLastDims) {
  // Rows {1, 2, 3} (mean 2, var 2/3) and {2, 4, 6} (mean 4, var 8/3).
  const Tensor x = f64({1, 2, 3, 2, 4, 6}, {2, 3});
  const Tensor gamma = f64({1, 1, 2}, {3}), beta = f64({0, 0, 1}, {3});
  const double s0 = 1 / std::sqrt(2.0 / 3 + kEps), s1 = 1 / std::sqrt(8.0 / 3 + kEps);
  for (DType dt : kBoth) {
    auto c = [&](const Tensor& t) { return ops::cast(t, dt); };
    const Tensor y = ops::layer_norm(c(x), c(gamma), c(beta), -1);
    EXPECT_TRUE(all_close(y, f64({-s0, 0, 2 * s0 + 1, -2 * s1, 0, 4 * s1 + 1}, {2, 3}), 1e-5))
        << dtype_name(dt);
    // The statistics outputs keep the normalised dims as 1 (MindSpore's layout).
    const std::vector<Tensor> out = ir::call("LayerNorm", {c(x), c(gamma), c(beta)},
                                             {{"begin_norm_axis", int64_t{1}}, {"epsilon", kEps}});
    EXPECT_TRUE(all_close(out[1], f64({2, 4}, {2, 1}), 1e-6));
    EXPECT_TRUE(all_close(out[2], f64({2.0 / 3, 8.0 / 3}, {2, 1}), 1e-6));
  }
}

TEST(LayerNorm, AxisZeroNormalisesEverything) {
  const Tensor x = f64({1, 2, 3, 4}, {2, 2});
  const double s = 1 / std::sqrt(1.25 + kEps);
  for (DType dt : kBoth) {
    const Tensor y =
        ops::layer_norm(ops::cast(x, dt), Tensor::ones({2, 2}, dt), Tensor::zeros({2, 2}, dt), 0);
    EXPECT_TRUE(all_close(y, f64({-1.5 * s, -0.5 * s, 0.5 * s, 1.5 * s}, {2, 2}), 1e-5));
  }
}

std::vector<Tensor> ln_inputs(const Shape& x, int64_t axis, uint64_t seed) {
  const int64_t a = axis < 0 ? axis + x.rank() : axis;
  const Shape p(std::vector<int64_t>(x.dims().begin() + a, x.dims().end()));
  return {random_f64(x, -2, 2, seed), random_f64(p, 0.5, 1.5, seed + 1),
          random_f64(p, -1, 1, seed + 2)};
}

TEST(LayerNorm, Float32MatchesFloat64ReferenceForwardAndBackward) {
  const Shape x{2, 3, 4, 5};
  for (int64_t axis : {1, 2, 3, -1, -3, 0}) {
    SCOPED_TRACE("begin_norm_axis " + std::to_string(axis));
    std::vector<Tensor> in64 = ln_inputs(x, axis, 81), in32;
    for (Tensor& t : in64) {
      in32.push_back(ops::cast(t, DType::kFloat32).set_requires_grad(true));
      t.set_requires_grad(true);
    }
    const ir::Attrs attrs{{"begin_norm_axis", axis}, {"epsilon", kEps}};
    const std::vector<Tensor> o64 = ir::call("LayerNorm", in64, attrs);
    const std::vector<Tensor> o32 = ir::call("LayerNorm", in32, attrs);
    for (int i = 0; i < 3; ++i) ASSERT_TRUE(all_close(o32[i], o64[i], 1e-4, 1e-4)) << i;
    const Tensor dy = random_f64(x, -1, 1, 82);
    const std::vector<Tensor> g64 = autodiff::grad(o64[0], in64, dy);
    const std::vector<Tensor> g32 = autodiff::grad(o32[0], in32, ops::cast(dy, DType::kFloat32));
    for (size_t i = 0; i < g64.size(); ++i) {
      EXPECT_TRUE(all_close(g32[i], g64[i], 1e-3, 1e-4)) << "input " << i;
    }
  }
}

TEST(LayerNorm, GradcheckBeginNormAxisVariants) {
  const std::vector<std::pair<Shape, int64_t>> cases = {
      {{2, 3, 4}, -1}, {{2, 3, 4}, 1}, {{2, 3, 4}, 0}, {{2, 3, 4}, -2},
      {{5}, 0},        {{3, 1}, -1},   {{1, 4}, 1},
  };
  for (const auto& [shape, axis] : cases) {
    SCOPED_TRACE(shape.to_string() + " begin_norm_axis " + std::to_string(axis));
    EXPECT_TRUE(gradcheck(
        [&, axis = axis](const std::vector<Tensor>& in) {
          return ops::layer_norm(in[0], in[1], in[2], axis);
        },
        ln_inputs(shape, axis, 91)));
  }
}

TEST(LayerNorm, GradcheckThroughTheStatisticsOutputs) {
  EXPECT_TRUE(gradcheck(
      [&](const std::vector<Tensor>& in) {
        const std::vector<Tensor> o =
            ir::call("LayerNorm", in, {{"begin_norm_axis", int64_t{1}}, {"epsilon", kEps}});
        return ops::add(ops::reduce_sum(ops::mul(o[0], o[0])),
                        ops::reduce_sum(ops::mul(ops::mul(o[1], o[1]), o[2])));
      },
      ln_inputs({3, 2, 3}, 1, 101)));
}

TEST(LayerNorm, NoRows) {
  for (DType dt : kBoth) {
    Tensor gamma = Tensor::ones({4}, dt).set_requires_grad(true);
    const Tensor y = ops::layer_norm(Tensor::zeros({0, 4}, dt), gamma, Tensor::zeros({4}, dt));
    EXPECT_EQ(y.shape(), (Shape{0, 4}));
    const Tensor dgamma = autodiff::grad(y, {gamma}, Tensor::zeros(y.shape(), dt))[0];
    EXPECT_TRUE(all_close(dgamma, Tensor::zeros({4}, DType::kFloat64)));
  }
}

TEST(LayerNorm, BadInputsAreReported) {
  const Tensor x = Tensor::zeros({2, 3, 4});
  const Tensor p = Tensor::ones({4});
  EXPECT_ERROR(ops::layer_norm(x, Tensor::ones({3, 4}), p, -1),
               "LayerNorm: input 1 (gamma) has shape (3, 4); expected (4)",
               "dims of input 0 (x), shape (2, 3, 4), from begin_norm_axis 2 on");
  EXPECT_ERROR(ops::layer_norm(x, Tensor::ones({3, 4}), p, 1), "input 2 (beta) has shape (4)",
               "expected (3, 4)");
  EXPECT_ERROR(ops::layer_norm(x, p, p, 3), "LayerNorm: begin_norm_axis 3 is out of range",
               "shape (2, 3, 4) (rank 3)", "expected a value in [-3, 2]");
  EXPECT_ERROR(ops::layer_norm(x, p, p, -4), "begin_norm_axis -4 is out of range");
  EXPECT_ERROR(ops::layer_norm(x, p, p, -1, 0.0), "LayerNorm: attribute epsilon is 0",
               "expected > 0");
  EXPECT_ERROR(ops::layer_norm(x, p, p, -1, -1.0), "attribute epsilon is -1");
  EXPECT_ERROR(ops::layer_norm(Tensor::scalar(1), Tensor::ones({}), Tensor::ones({})),
               "LayerNorm: input 0 (x) is a scalar", "expected rank >= 1");
  EXPECT_ERROR(ops::layer_norm(x, Tensor::ones({4}, DType::kFloat64), p),
               "input 1 has dtype Float64");
}

}  // namespace
}  // namespace cleave

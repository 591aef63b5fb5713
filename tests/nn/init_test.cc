#include "cleave/nn/init.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "testing/gradcheck.h"

namespace cleave::nn {
namespace {

struct Stats {
  double mean = 0, std = 0, min = 0, max = 0;
};

Stats stats_of(const Tensor& t) {
  const std::vector<double> v = t.to_double_vector();
  Stats s;
  s.min = *std::min_element(v.begin(), v.end());
  s.max = *std::max_element(v.begin(), v.end());
  for (double x : v) s.mean += x;
  s.mean /= static_cast<double>(v.size());
  for (double x : v) s.std += (x - s.mean) * (x - s.mean);
  s.std = std::sqrt(s.std / static_cast<double>(v.size()));
  return s;
}

TEST(Init, NormalHasTheRequestedMoments) {
  set_seed(1);
  const Tensor t = Normal(0.5, 2.0)({400, 250});
  EXPECT_EQ(t.dtype(), DType::kFloat32);
  const Stats s = stats_of(t);
  EXPECT_NEAR(s.mean, 2.0, 0.01);
  EXPECT_NEAR(s.std, 0.5, 0.01);
}

TEST(Init, TruncatedNormalStaysWithinTwoSigma) {
  set_seed(2);
  const Stats s = stats_of(TruncatedNormal(0.1, -1.0)({100000}, DType::kFloat64));
  EXPECT_GE(s.min, -1.2);
  EXPECT_LE(s.max, -0.8);
  EXPECT_NEAR(s.mean, -1.0, 0.002);
  // The standard deviation of N(0, 1) truncated to [-2, 2] is 0.8796.
  EXPECT_NEAR(s.std, 0.1 * 0.8796, 0.002);
}

TEST(Init, UniformFillsTheInterval) {
  set_seed(3);
  const Stats s = stats_of(Uniform(0.3)({100000}));
  EXPECT_GE(s.min, -0.3);
  EXPECT_LE(s.max, 0.3);
  EXPECT_LT(s.min, -0.299);
  EXPECT_GT(s.max, 0.299);
  EXPECT_NEAR(s.std, 0.3 / std::sqrt(3.0), 0.002);
}

// Dense weight (out=200, in=500): fan_in = 500, fan_out = 200.
TEST(Init, HeUniformUsesFanInOfADenseWeight) {
  set_seed(4);
  const double bound = std::sqrt(2.0) * std::sqrt(3.0 / 500.0);  // gain sqrt(2) (slope 0)
  const Stats s = stats_of(HeUniform()({200, 500}));
  EXPECT_LE(s.max, bound);
  EXPECT_GT(s.max, 0.99 * bound);
  EXPECT_GE(s.min, -bound);
  EXPECT_NEAR(s.std, bound / std::sqrt(3.0), 0.01 * bound);

  const double bound_out = std::sqrt(2.0 / (1 + 0.2 * 0.2)) * std::sqrt(3.0 / 200.0);
  const Stats o = stats_of(HeUniform(0.2, "fan_out")({200, 500}));
  EXPECT_LE(o.max, bound_out);
  EXPECT_GT(o.max, 0.99 * bound_out);
}

// Conv weight (out=64, in=16, 3, 3): fan_in = 16·9 = 144, fan_out = 64·9 = 576.
TEST(Init, HeNormalUsesTheReceptiveFieldOfAConvWeight) {
  set_seed(5);
  const Stats in = stats_of(HeNormal(0.0, "fan_in", "relu")({64, 16, 3, 3}, DType::kFloat64));
  EXPECT_NEAR(in.mean, 0.0, 0.005);
  EXPECT_NEAR(in.std, std::sqrt(2.0 / 144.0), 0.02 * std::sqrt(2.0 / 144.0));
  const Stats out = stats_of(HeNormal(0.0, "fan_out", "relu")({64, 16, 3, 3}, DType::kFloat64));
  EXPECT_NEAR(out.std, std::sqrt(2.0 / 576.0), 0.02 * std::sqrt(2.0 / 576.0));
  const Stats tanh = stats_of(HeNormal(0.0, "fan_in", "tanh")({64, 16, 3, 3}, DType::kFloat64));
  EXPECT_NEAR(tanh.std, 5.0 / 3.0 / 12.0, 0.02 * 5.0 / 3.0 / 12.0);
}

TEST(Init, XavierUniformUsesBothFans) {
  set_seed(6);
  const double bound = 2.0 * std::sqrt(6.0 / (300.0 + 100.0));
  const Stats s = stats_of(XavierUniform(2.0)({300, 100}));
  EXPECT_LE(s.max, bound);
  EXPECT_GT(s.max, 0.99 * bound);
  EXPECT_GE(s.min, -bound);
}

TEST(Init, ConstantsAndDtypes) {
  const Tensor z = Zero()({2, 3}, DType::kFloat64);
  EXPECT_EQ(z.dtype(), DType::kFloat64);
  EXPECT_EQ(z.to_vector<double>(), std::vector<double>(6, 0.0));
  EXPECT_EQ(One()({4}).to_vector<float>(), std::vector<float>(4, 1.0f));
}

TEST(Init, ByMindSporeName) {
  set_seed(7);
  const Initializer normal = "normal";
  EXPECT_EQ(normal.name(), "Normal(sigma=0.01, mean=0)");
  EXPECT_NEAR(stats_of(normal({100000})).std, 0.01, 0.0002);
  EXPECT_EQ(Initializer("zeros")({3}).to_vector<float>(), std::vector<float>(3, 0.0f));
  EXPECT_EQ(Initializer("ones")({3}).to_vector<float>(), std::vector<float>(3, 1.0f));
  EXPECT_EQ(Initializer("TruncatedNormal").name(), "TruncatedNormal(sigma=0.01, mean=0)");
  EXPECT_EQ(Initializer(std::string("he_uniform")).name(),
            "HeUniform(negative_slope=0, mode=fan_in, nonlinearity=leaky_relu)");
  EXPECT_EQ(Initializer("he_normal").name().substr(0, 8), "HeNormal");
  EXPECT_EQ(Initializer("xavier_uniform").name(), "XavierUniform(gain=1)");
  EXPECT_EQ(Initializer("uniform").name(), "Uniform(scale=0.07)");
}

TEST(Init, SameSeedSameDraws) {
  set_seed(42);
  const Tensor a = HeUniform()({8, 8});
  set_seed(42);
  const Tensor b = HeUniform()({8, 8});
  EXPECT_EQ(a.to_vector<float>(), b.to_vector<float>());
}

TEST(Init, BadArgumentsAreReported) {
  EXPECT_ERROR(Normal(0.0), "Normal: sigma is 0; expected sigma > 0");
  EXPECT_ERROR(TruncatedNormal(-1.0), "TruncatedNormal: sigma is -1");
  EXPECT_ERROR(Uniform(0.0), "Uniform: scale is 0; expected scale > 0");
  EXPECT_ERROR(XavierUniform(0.0), "XavierUniform: gain is 0");
  EXPECT_ERROR(HeUniform(0.0, "fan_avg"), "HeUniform: mode 'fan_avg' is not supported",
               "\"fan_in\" or \"fan_out\"");
  EXPECT_ERROR(HeNormal(0.0, "fan_in", "swish"), "HeNormal: nonlinearity 'swish' is not supported",
               "\"leaky_relu\", \"relu\"");
  EXPECT_ERROR(Initializer("glorot"), "unknown initializer 'glorot'", "\"normal\"",
               "\"truncatednormal\"", "\"he_uniform\"", "\"xavier_uniform\"", "\"zeros\"",
               "\"ones\"");
  EXPECT_ERROR(HeUniform()({5}),
               "HeUniform: cannot compute fan_in and fan_out of shape (5) (rank 1)", "rank >= 2");
  EXPECT_ERROR(HeNormal()({}), "HeNormal: cannot compute", "shape () (rank 0)");
  EXPECT_ERROR(XavierUniform()({7}), "XavierUniform: cannot compute", "shape (7)");
  EXPECT_ERROR(HeUniform()({4, 0}), "HeUniform: fan_in of shape (4, 0) is 0");
  EXPECT_ERROR(Normal()({2}, DType::kInt32), "Normal(sigma=0.01, mean=0): dtype Int32",
               "Float32 or Float64");
}

}  // namespace
}  // namespace cleave::nn

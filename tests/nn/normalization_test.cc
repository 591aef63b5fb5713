// BatchNorm2d and LayerNorm cells: forward against hand computation, moving statistics,
// gradients through the whole layer in Float64, and bad input.
#include <gtest/gtest.h>

#include <cmath>
#include <string>

#include "cleave/nn/layers.h"
#include "testing/gradcheck.h"

namespace cleave::nn {
namespace {

using testing::all_close;
using testing::random_f64;

struct ChannelStats {
  std::vector<double> mean, biased_var;
};

// Per-channel mean and biased variance of an (N, C, H, W) tensor.
ChannelStats channel_stats(const Tensor& x) {
  const int64_t n = x.dim(0), c = x.dim(1), hw = x.dim(2) * x.dim(3);
  const std::vector<double> v = x.to_double_vector();
  ChannelStats s{std::vector<double>(c, 0.0), std::vector<double>(c, 0.0)};
  const double count = static_cast<double>(n * hw);
  for (int64_t b = 0; b < n; ++b)
    for (int64_t ch = 0; ch < c; ++ch)
      for (int64_t i = 0; i < hw; ++i) s.mean[ch] += v[(b * c + ch) * hw + i] / count;
  for (int64_t b = 0; b < n; ++b)
    for (int64_t ch = 0; ch < c; ++ch)
      for (int64_t i = 0; i < hw; ++i) {
        const double d = v[(b * c + ch) * hw + i] - s.mean[ch];
        s.biased_var[ch] += d * d / count;
      }
  return s;
}

// (x - mean) / sqrt(var + eps) * gamma + beta per channel, in Float64.
Tensor normalize_by_hand(const Tensor& x, const std::vector<double>& mean,
                         const std::vector<double>& var, const std::vector<double>& gamma,
                         const std::vector<double>& beta, double eps) {
  const int64_t n = x.dim(0), c = x.dim(1), hw = x.dim(2) * x.dim(3);
  std::vector<double> v = x.to_double_vector();
  for (int64_t b = 0; b < n; ++b)
    for (int64_t ch = 0; ch < c; ++ch)
      for (int64_t i = 0; i < hw; ++i) {
        double& e = v[(b * c + ch) * hw + i];
        e = (e - mean[ch]) / std::sqrt(var[ch] + eps) * gamma[ch] + beta[ch];
      }
  return Tensor::from_vector<double>(v, x.shape());
}

Tensor f64(const std::vector<double>& v) { return Tensor::from_vector<double>(v); }

// Makes every tensor of a BatchNorm2d Float64 through its public members.
void to_f64(BatchNorm2d& bn) {
  NoGradGuard no_grad;
  bn.gamma = ops::cast(bn.gamma, DType::kFloat64);
  bn.beta = ops::cast(bn.beta, DType::kFloat64);
  bn.moving_mean = ops::cast(bn.moving_mean, DType::kFloat64);
  bn.moving_variance = ops::cast(bn.moving_variance, DType::kFloat64);
}

TEST(BatchNorm2d, ParametersFollowMindSpore) {
  BatchNorm2d bn(3);
  std::vector<std::string> names;
  for (const auto& [name, value] : bn.parameters_and_names()) names.push_back(name);
  EXPECT_EQ(names, (std::vector<std::string>{"gamma", "beta", "moving_mean", "moving_variance"}));
  EXPECT_EQ(bn.trainable_params().size(), 2u);
  EXPECT_EQ(bn.moving_variance.to_vector<float>(), std::vector<float>(3, 1.0f));
  EXPECT_EQ(bn.moving_mean.to_vector<float>(), std::vector<float>(3, 0.0f));
}

TEST(BatchNorm2d, TrainingNormalizesWithBatchStatisticsAndUpdatesMovingOnes) {
  BatchNorm2d bn(3, {.eps = 1e-3, .momentum = 0.8});
  to_f64(bn);
  bn.gamma = f64({1.0, 2.0, 0.5});
  bn.beta = f64({0.0, -1.0, 3.0});
  bn.set_train();
  const Tensor moving_mean = bn.moving_mean, moving_var = bn.moving_variance;

  const Tensor x = random_f64({4, 3, 2, 5}, -2, 3, 11);
  const ChannelStats s = channel_stats(x);
  const Tensor y = bn(x);
  EXPECT_TRUE(all_close(
      y, normalize_by_hand(x, s.mean, s.biased_var, {1, 2, 0.5}, {0, -1, 3}, 1e-3), 1e-10, 1e-10));

  // moving = 0.8 · moving + 0.2 · batch, with the unbiased batch variance (n = 4·2·5 = 40).
  std::vector<double> mm(3), mv(3);
  for (int c = 0; c < 3; ++c) {
    mm[c] = 0.2 * s.mean[c];
    mv[c] = 0.8 + 0.2 * s.biased_var[c] * 40.0 / 39.0;
  }
  EXPECT_TRUE(all_close(bn.moving_mean, f64(mm), 1e-12));
  EXPECT_TRUE(all_close(bn.moving_variance, f64(mv), 1e-12));
  EXPECT_TRUE(bn.moving_mean.shares_storage_with(moving_mean));  // updated in place
  EXPECT_TRUE(bn.moving_variance.shares_storage_with(moving_var));
  EXPECT_FALSE(bn.moving_mean.requires_grad());

  // A second batch moves them again from the updated values.
  const Tensor x2 = random_f64({4, 3, 2, 5}, 0, 1, 12);
  const ChannelStats s2 = channel_stats(x2);
  bn(x2);
  for (int c = 0; c < 3; ++c) {
    mm[c] = 0.8 * mm[c] + 0.2 * s2.mean[c];
    mv[c] = 0.8 * mv[c] + 0.2 * s2.biased_var[c] * 40.0 / 39.0;
  }
  EXPECT_TRUE(all_close(bn.moving_mean, f64(mm), 1e-12));
  EXPECT_TRUE(all_close(bn.moving_variance, f64(mv), 1e-12));
}

TEST(BatchNorm2d, EvaluationUsesMovingStatisticsAndLeavesThemAlone) {
  BatchNorm2d bn(2);
  to_f64(bn);
  bn.moving_mean.copy_from(f64({0.5, -1.0}));
  bn.moving_variance.copy_from(f64({4.0, 0.25}));
  bn.set_train(false);
  const Tensor x = random_f64({3, 2, 4, 4}, -1, 1, 13);
  const Tensor y = bn(x);
  EXPECT_TRUE(
      all_close(y, normalize_by_hand(x, {0.5, -1.0}, {4.0, 0.25}, {1, 1}, {0, 0}, 1e-5), 1e-12));
  EXPECT_EQ(bn.moving_mean.to_vector<double>(), (std::vector<double>{0.5, -1.0}));
  EXPECT_EQ(bn.moving_variance.to_vector<double>(), (std::vector<double>{4.0, 0.25}));
}

TEST(BatchNorm2d, Float32MovingStatisticsFollowFloat32Input) {
  BatchNorm2d bn(2);
  bn.set_train();
  const Tensor x = ops::cast(random_f64({2, 2, 3, 3}, 0, 2, 14), DType::kFloat32);
  bn(x);
  const ChannelStats s = channel_stats(x);
  EXPECT_NEAR(bn.moving_mean.at({1}), 0.1 * s.mean[1], 1e-6);
  EXPECT_NEAR(bn.moving_variance.at({1}), 0.9 + 0.1 * s.biased_var[1] * 18.0 / 17.0, 1e-6);
}

TEST(BatchNorm2d, GradientsThroughTheLayer) {
  for (const bool training : {true, false}) {
    BatchNorm2d bn(3);
    to_f64(bn);
    bn.moving_variance.copy_from(f64({0.5, 1.5, 2.0}));
    bn.set_train(training);
    const auto fn = [&](const std::vector<Tensor>& in) {
      bn.gamma = in[1];
      bn.beta = in[2];
      return bn(in[0]);
    };
    EXPECT_TRUE(testing::gradcheck(fn, {random_f64({2, 3, 3, 2}, -1, 1, 15),
                                        random_f64({3}, 0.5, 1.5, 16), random_f64({3}, -1, 1, 17)}))
        << (training ? "training" : "evaluation");
  }
}

TEST(BatchNorm2d, BadInputIsReported) {
  BatchNorm2d bn(3);
  EXPECT_ERROR(bn(Tensor::zeros({2, 4, 5, 5})),
               "BatchNorm2d(num_features=3): expected a 4-D input (N, 3, H, W); got shape "
               "(2, 4, 5, 5), whose dim 1 (4) is not num_features");
  EXPECT_ERROR(bn(Tensor::zeros({2, 3})),
               "BatchNorm2d(num_features=3): expected a 4-D input (N, 3, H, W); got shape (2, 3) "
               "(rank 2)");
  EXPECT_ERROR(BatchNorm2d(0), "BatchNorm2d: num_features is 0");
  EXPECT_ERROR(BatchNorm2d(3, {.momentum = 1.5}), "BatchNorm2d: momentum is 1.5",
               "0 <= momentum <= 1");
  EXPECT_ERROR(BatchNorm2d(3, {.eps = 0.0}), "BatchNorm2d: eps is 0");
}

size_t count(const std::string& text, const std::string& fragment) {
  size_t n = 0;
  for (size_t at = text.find(fragment); at != std::string::npos; at = text.find(fragment, at + 1)) {
    ++n;
  }
  return n;
}

// PyTorch's momentum 0.1 is MindSpore's 0.9: accepted (it is a valid value) but said once, naming
// both conventions. (Once per process: ctest runs every test in a process of its own, and no other
// test here makes a BatchNorm2d with a momentum below 0.5.)
TEST(BatchNorm2d, MomentumBelowHalfWarnsOnceNamingBothConventions) {
  ::testing::internal::CaptureStderr();
  BatchNorm2d mindspore_default(3);
  BatchNorm2d half(3, {.momentum = 0.5});
  EXPECT_EQ(::testing::internal::GetCapturedStderr(), "");

  ::testing::internal::CaptureStderr();
  BatchNorm2d pytorch_style(3, {.momentum = 0.1});
  BatchNorm2d another(3, {.momentum = 0.2});
  const std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(count(err, "warning: BatchNorm2d"), 1u) << err;
  for (const char* fragment :
       {"BatchNorm2d: momentum is 0.1", "MindSpore's convention",
        "moving = momentum * moving + (1 - momentum) * batch", "keeps only 10%",
        "PyTorch's 0.1 is MindSpore's 0.9", "pass momentum = 0.9"}) {
    EXPECT_NE(err.find(fragment), std::string::npos) << "missing '" << fragment << "' in: " << err;
  }
}

// ---- LayerNorm ----

TEST(LayerNorm, NormalizesTrailingDims) {
  LayerNorm ln({2, 3}, 1e-4);
  ln.gamma = Tensor::from_vector<double>({1, 2, 3, 4, 5, 6}, {2, 3});
  ln.beta = Tensor::from_vector<double>({0, 0, 0, 1, 1, 1}, {2, 3});
  const Tensor x = random_f64({4, 2, 3}, -1, 2, 18);
  const std::vector<double> v = x.to_vector<double>();
  std::vector<double> expected(v.size());
  for (int r = 0; r < 4; ++r) {
    double mean = 0, var = 0;
    for (int i = 0; i < 6; ++i) mean += v[r * 6 + i] / 6;
    for (int i = 0; i < 6; ++i) var += (v[r * 6 + i] - mean) * (v[r * 6 + i] - mean) / 6;
    for (int i = 0; i < 6; ++i) {
      expected[r * 6 + i] =
          (v[r * 6 + i] - mean) / std::sqrt(var + 1e-4) * (i + 1) + (i >= 3 ? 1.0 : 0.0);
    }
  }
  EXPECT_TRUE(all_close(ln(x), Tensor::from_vector<double>(expected, {4, 2, 3}), 1e-10, 1e-10));
}

TEST(LayerNorm, GradientsThroughTheLayer) {
  LayerNorm ln({4});
  const auto fn = [&](const std::vector<Tensor>& in) {
    ln.gamma = in[1];
    ln.beta = in[2];
    return ln(in[0]);
  };
  EXPECT_TRUE(testing::gradcheck(
      fn, {random_f64({3, 2, 4}, -1, 1, 19), random_f64({4}, 0.5, 1.5, 20), random_f64({4})}));
}

TEST(LayerNorm, BadInputIsReported) {
  LayerNorm ln({4, 5});
  EXPECT_ERROR(ln(Tensor::zeros({2, 5, 4})),
               "LayerNorm(normalized_shape=(4, 5)): expected an input of rank >= 2 whose last 2 "
               "dim(s) are (4, 5); got shape (2, 5, 4) (rank 3)");
  EXPECT_ERROR(ln(Tensor::zeros({5})), "expected an input of rank >= 2", "got shape (5) (rank 1)");
  EXPECT_ERROR(LayerNorm({}), "LayerNorm: normalized_shape is empty");
  EXPECT_ERROR(LayerNorm({3, 0}), "LayerNorm: normalized_shape (3, 0) has a dim 0");
  EXPECT_ERROR(LayerNorm({3}, 0.0), "LayerNorm: epsilon is 0");
}

}  // namespace
}  // namespace cleave::nn

// BatchNorm2d and LayerNorm.
#include <atomic>
#include <cstdio>

#include "cleave/core/error.h"
#include "cleave/ir/dispatch.h"
#include "cleave/ir/registry.h"
#include "cleave/nn/layers.h"
#include "cleave/ops/elementwise.h"
#include "cleave/ops/nn.h"
#include "cleave/ops/reduce.h"
#include "cleave/ops/shape.h"

namespace cleave::nn {

// ---- BatchNorm2d ----

namespace {

// A momentum below 0.5 is most likely PyTorch's convention (NOTE [BatchNorm moving statistics]):
// accepted, since it is a valid value, but said once per process on stderr, because the training
// losses never show moving statistics that follow the batch too closely.
void warn_if_pytorch_momentum(double momentum) {
  static std::atomic<bool> warned{false};
  if (momentum >= 0.5 || warned.exchange(true)) return;
  const std::string text = fmt::format(
      "cleave: warning: BatchNorm2d: momentum is {}. cleave follows MindSpore's convention, "
      "moving = momentum * moving + (1 - momentum) * batch: momentum 0.9 keeps 90% of the old "
      "statistic at each step, and {} keeps only {:.0f}%. PyTorch's momentum is the weight of the "
      "new batch instead (PyTorch's 0.1 is MindSpore's 0.9); if you meant PyTorch's {}, pass "
      "momentum = {}. (This warning is printed once.)\n",
      momentum, momentum, momentum * 100, momentum, 1 - momentum);
  std::fputs(text.c_str(), stderr);
}

}  // namespace

BatchNorm2d::BatchNorm2d(int64_t num_features, BatchNorm2dOptions options)
    : Cell("BatchNorm2d"),
      num_features_(num_features),
      eps_(options.eps),
      momentum_(options.momentum) {
  CLEAVE_CHECK_ARG(num_features > 0, "BatchNorm2d: num_features is {}; expected > 0", num_features);
  CLEAVE_CHECK_ARG(options.eps > 0, "BatchNorm2d: eps is {}; expected eps > 0", options.eps);
  CLEAVE_CHECK_ARG(options.momentum >= 0 && options.momentum <= 1,
                   "BatchNorm2d: momentum is {}; expected 0 <= momentum <= 1", options.momentum);
  warn_if_pytorch_momentum(options.momentum);
  gamma = register_parameter("gamma", options.gamma_init({num_features}));
  beta = register_parameter("beta", options.beta_init({num_features}));
  moving_mean = register_parameter("moving_mean", Tensor::zeros({num_features}),
                                   /*requires_grad=*/false);
  moving_variance = register_parameter("moving_variance", Tensor::ones({num_features}),
                                       /*requires_grad=*/false);
}

Tensor BatchNorm2d::construct(const Tensor& x) {
  CLEAVE_CHECK_ARG(
      x.rank() == 4 && x.dim(1) == num_features_,
      "BatchNorm2d(num_features={}): expected a 4-D input (N, {}, H, W); got shape {}{}",
      num_features_, num_features_, x.shape().to_string(),
      x.rank() == 4 ? fmt::format(", whose dim 1 ({}) is not num_features", x.dim(1))
                    : fmt::format(" (rank {})", x.rank()));
  if (!training()) {
    return with_annotations(batch_norm, [&] {
      return ops::batch_norm(x, gamma, beta, moving_mean, moving_variance,
                             {.is_training = false, .epsilon = eps_})
          .y;
    });
  }
  ops::BatchNormResult r = with_annotations(batch_norm, [&] {
    return ops::batch_norm(x, gamma, beta, moving_mean, moving_variance,
                           {.is_training = true, .epsilon = eps_});
  });
  // NOTE [BatchNorm moving statistics]
  // moving = momentum * moving + (1 - momentum) * batch, MindSpore's convention (PyTorch's
  // momentum is 1 - ours). The batch variance used for moving_variance is the unbiased one,
  // var * n / (n - 1) with n = N·H·W, as PyTorch does (the normalisation itself uses the biased
  // variance); with n = 1 the biased variance (0) is used.
  NoGradGuard no_grad;
  const int64_t n = x.numel() / num_features_;
  const double unbias = n > 1 ? static_cast<double>(n) / static_cast<double>(n - 1) : 1.0;
  const auto update = [&](const Tensor& moving, const Tensor& batch, double scale) {
    const Tensor b = ops::cast(batch.detach(), moving.dtype());
    // In place through a primitive, so that GRAPH_MODE records the write as a side effect.
    static const ir::OpDef& assign = ir::Registry::global().get("Assign");
    // One statement each: the order of a call's arguments is unspecified (g++ and clang trace
    // the two products in opposite orders), and the traced graph must not depend on it. This is
    // the order g++ traced, which seed 001's golden graphs hold.
    const Tensor fresh = ops::mul(b, (1.0 - momentum_) * scale);
    const Tensor kept = ops::mul(moving, momentum_);
    ir::call(assign, {moving, ops::add(kept, fresh)});
  };
  update(moving_mean, r.batch_mean, 1.0);
  update(moving_variance, r.batch_var, unbias);
  return r.y;
}

// ---- LayerNorm ----

LayerNorm::LayerNorm(std::vector<int64_t> normalized_shape, double epsilon)
    : Cell("LayerNorm"), normalized_shape_(std::move(normalized_shape)), epsilon_(epsilon) {
  const Shape shape(normalized_shape_);
  CLEAVE_CHECK_ARG(!normalized_shape_.empty(),
                   "LayerNorm: normalized_shape is empty; expected at least one dim");
  for (int64_t d : normalized_shape_) {
    CLEAVE_CHECK_ARG(d > 0, "LayerNorm: normalized_shape {} has a dim {}; expected dims > 0",
                     shape.to_string(), d);
  }
  CLEAVE_CHECK_ARG(epsilon > 0, "LayerNorm: epsilon is {}; expected epsilon > 0", epsilon);
  gamma = register_parameter("gamma", Tensor::ones(shape));
  beta = register_parameter("beta", Tensor::zeros(shape));
}

Tensor LayerNorm::construct(const Tensor& x) {
  const int64_t k = static_cast<int64_t>(normalized_shape_.size());
  bool matches = x.rank() >= k;
  for (int64_t i = 0; matches && i < k; ++i) {
    matches = x.dim(x.rank() - k + i) == normalized_shape_[static_cast<size_t>(i)];
  }
  CLEAVE_CHECK_ARG(matches,
                   "LayerNorm(normalized_shape={}): expected an input of rank >= {} whose last {} "
                   "dim(s) are {}; got shape {} (rank {})",
                   Shape(normalized_shape_).to_string(), k, k, Shape(normalized_shape_).to_string(),
                   x.shape().to_string(), x.rank());
  return with_annotations(layer_norm,
                          [&] { return ops::layer_norm(x, gamma, beta, x.rank() - k, epsilon_); });
}

}  // namespace cleave::nn

// Optimizers against hand-written reference updates (PyTorch's torch.optim formulas, which
// MindSpore's Momentum/SGD/Adam match), over several steps and both floating dtypes.
#include "cleave/optim/optimizer.h"

#include <gtest/gtest.h>

#include <cmath>

#include "testing/gradcheck.h"

namespace cleave::optim {
namespace {

using Vec = std::vector<double>;

// ---- reference updates on plain vectors ----

void ref_momentum(Vec& p, Vec& acc, const Vec& g, double lr, double momentum, double wd,
                  bool nesterov) {
  for (size_t i = 0; i < p.size(); ++i) {
    const double d = g[i] + wd * p[i];
    acc[i] = momentum * acc[i] + d;
    p[i] -= lr * (nesterov ? d + momentum * acc[i] : acc[i]);
  }
}

void ref_sgd(Vec& p, Vec& buf, bool& started, const Vec& g, double lr, const SGDOptions& o) {
  for (size_t i = 0; i < p.size(); ++i) {
    double d = g[i] + o.weight_decay * p[i];
    if (o.momentum != 0) {
      buf[i] = started ? o.momentum * buf[i] + (1 - o.dampening) * d : d;
      d = o.nesterov ? d + o.momentum * buf[i] : buf[i];
    }
    p[i] -= lr * d;
  }
  started = true;
}

void ref_adam(Vec& p, Vec& m, Vec& v, const Vec& g, double lr, const AdamOptions& o, int64_t t,
              bool decoupled) {
  const double bc1 = 1 - std::pow(o.beta1, static_cast<double>(t));
  const double bc2 = 1 - std::pow(o.beta2, static_cast<double>(t));
  for (size_t i = 0; i < p.size(); ++i) {
    double d = g[i];
    if (decoupled) {
      p[i] *= 1 - lr * o.weight_decay;
    } else {
      d += o.weight_decay * p[i];
    }
    m[i] = o.beta1 * m[i] + (1 - o.beta1) * d;
    v[i] = o.beta2 * v[i] + (1 - o.beta2) * d * d;
    p[i] -= lr / bc1 * m[i] / (std::sqrt(v[i]) / std::sqrt(bc2) + o.eps);
  }
}

// ---- fixtures ----

// A gradient that depends on the step and on the current parameter value, so that the
// trajectories of different update rules diverge.
Vec gradient_at(int64_t step, const Vec& p) {
  Vec g(p.size());
  for (size_t i = 0; i < p.size(); ++i) {
    g[i] = std::sin(static_cast<double>(step) + 0.7 * static_cast<double>(i)) + 0.5 * p[i];
  }
  return g;
}

Tensor tensor_of(const Vec& v, const Shape& shape, DType dtype) {
  const Tensor t = Tensor::from_vector<double>(v, shape);
  return dtype == DType::kFloat64 ? t : ops::cast(t, dtype);
}

const Vec kInit0 = {0.5, -1.0, 2.0, 0.25, -0.75, 1.5};  // shape (2, 3)
const Vec kInit1 = {1.0, -2.0, 0.1, 3.0};               // shape (4)
// More elements than the kernels' parallel grain (src/kernels/cpu/loops.h), and an odd count: the
// update split across the OpenMP team (range_for in src/kernels/cpu/parallel.h).
const Vec kInit2 = [] {
  Vec v(40003);
  for (size_t i = 0; i < v.size(); ++i) v[i] = std::cos(0.3 * static_cast<double>(i));
  return v;
}();
// The state of each parameter, zeros.
std::vector<Vec> zero_state() { return {Vec(6, 0.0), Vec(4, 0.0), Vec(kInit2.size(), 0.0)}; }

// Runs `steps` updates of `opt` on params made from kInit0/1/2 and of `reference` on
// vectors, then compares. `reference(k, p_index, p, g, lr)` updates one parameter.
template <typename MakeOpt, typename Ref>
void expect_matches_reference(DType dtype, int64_t steps, MakeOpt make_opt, Ref reference) {
  std::vector<Tensor> params = {tensor_of(kInit0, {2, 3}, dtype), tensor_of(kInit1, {4}, dtype),
                                tensor_of(kInit2, {static_cast<int64_t>(kInit2.size())}, dtype)};
  for (Tensor& p : params) p.set_requires_grad(true);
  std::unique_ptr<Optimizer> opt = make_opt(params);
  std::vector<Vec> ref = {kInit0, kInit1, kInit2};
  const double tol = dtype == DType::kFloat64 ? 1e-12 : 2e-5;
  for (int64_t k = 0; k < steps; ++k) {
    std::vector<Tensor> grads;
    for (size_t i = 0; i < params.size(); ++i) {
      // The optimizer sees the gradient at its own (possibly rounded) parameters.
      grads.push_back(
          tensor_of(gradient_at(k, params[i].to_double_vector()), params[i].shape(), dtype));
      reference(k, i, ref[i], gradient_at(k, ref[i]), opt->current_lr());
    }
    opt->apply(grads);
    EXPECT_EQ(opt->step_count(), k + 1);
    for (size_t i = 0; i < params.size(); ++i) {
      const Tensor expected = tensor_of(ref[i], params[i].shape(), DType::kFloat64);
      ASSERT_TRUE(
          testing::all_close(ops::cast(params[i].detach(), DType::kFloat64), expected, tol, tol))
          << opt->name() << " step " << k << " parameter " << i;
    }
  }
}

class Optimizers : public ::testing::TestWithParam<DType> {};

TEST_P(Optimizers, MomentumMatchesReference) {
  for (const bool nesterov : {false, true}) {
    std::vector<Vec> acc = zero_state();
    expect_matches_reference(
        GetParam(), 6,
        [&](std::vector<Tensor> params) {
          return std::make_unique<Momentum>(params, 0.05, 0.9, 0.01, nesterov);
        },
        [&](int64_t, size_t i, Vec& p, const Vec& g, double lr) {
          ref_momentum(p, acc[i], g, lr, 0.9, 0.01, nesterov);
        });
  }
}

TEST_P(Optimizers, SgdMatchesReference) {
  const std::vector<SGDOptions> variants = {
      {},
      {.momentum = 0.9, .dampening = 0.1, .weight_decay = 0.01},
      {.momentum = 0.8, .weight_decay = 0.05, .nesterov = true},
  };
  for (const SGDOptions& o : variants) {
    std::vector<Vec> buf = zero_state();
    std::vector<bool> started(buf.size(), false);
    expect_matches_reference(
        GetParam(), 6,
        [&](std::vector<Tensor> params) { return std::make_unique<SGD>(params, 0.1, o); },
        [&](int64_t, size_t i, Vec& p, const Vec& g, double lr) {
          bool s = started[i];
          ref_sgd(p, buf[i], s, g, lr, o);
          started[i] = s;
        });
  }
}

TEST_P(Optimizers, AdamAndAdamWMatchReference) {
  for (const bool decoupled : {false, true}) {
    const AdamOptions o{.beta1 = 0.8, .beta2 = 0.95, .eps = 1e-6, .weight_decay = 0.1};
    std::vector<Vec> m = zero_state(), v = m;
    expect_matches_reference(
        GetParam(), 6,
        [&](std::vector<Tensor> params) -> std::unique_ptr<Optimizer> {
          if (decoupled) return std::make_unique<AdamW>(params, 0.02, o);
          return std::make_unique<Adam>(params, 0.02, o);
        },
        [&](int64_t k, size_t i, Vec& p, const Vec& g, double lr) {
          ref_adam(p, m[i], v[i], g, lr, o, k + 1, decoupled);
        });
  }
}

INSTANTIATE_TEST_SUITE_P(Dtypes, Optimizers, ::testing::Values(DType::kFloat32, DType::kFloat64),
                         [](const auto& info) { return std::string(dtype_name(info.param)); });

// ---- hand-computed values ----

TEST(Momentum, HandComputedSteps) {
  Tensor p = Tensor::from_vector<float>({1.0f});
  Momentum opt({p}, 0.1, 0.9);
  const Tensor g = Tensor::from_vector<float>({0.5f});
  opt.apply({g});  // accum 0.5, p 0.95
  EXPECT_FLOAT_EQ(p.item(), 0.95f);
  opt.apply({g});  // accum 0.95, p 0.855
  EXPECT_FLOAT_EQ(p.item(), 0.855f);
  opt.apply({g});  // accum 1.355, p 0.7195
  EXPECT_FLOAT_EQ(p.item(), 0.7195f);
  ASSERT_EQ(opt.state().size(), 1u);
  EXPECT_EQ(opt.state()[0].first, "moments.0");
  EXPECT_FLOAT_EQ(opt.state()[0].second.item(), 1.355f);
}

TEST(Adam, FirstStepMovesEachElementByTheLearningRate) {
  Tensor p = Tensor::from_vector<double>({1.0, 1.0, 1.0});
  Adam opt({p}, 0.01);
  opt.apply({Tensor::from_vector<double>({100.0, -0.001, 3.0})});
  EXPECT_TRUE(testing::all_close(p, Tensor::from_vector<double>({0.99, 1.01, 0.99}), 1e-6, 0));
  const auto state = opt.state();
  ASSERT_EQ(state.size(), 2u);
  EXPECT_EQ(state[0].first, "moment1.0");
  EXPECT_EQ(state[1].first, "moment2.0");
}

// A parameter that had no gradient for a while starts its bias correction at t = 1 when its
// first gradient arrives (PyTorch counts steps per parameter).
TEST(Adam, BiasCorrectionCountsStepsPerParameter) {
  Tensor a = Tensor::from_vector<double>({0.0});
  Tensor b = Tensor::from_vector<double>({0.0});
  Adam opt({a, b}, 0.1);
  opt.apply({Tensor::from_vector<double>({1.0}), Tensor()});
  opt.apply({Tensor::from_vector<double>({1.0}), Tensor()});
  EXPECT_EQ(b.item(), 0.0);  // skipped
  opt.apply({Tensor(), Tensor::from_vector<double>({-2.0})});
  EXPECT_NEAR(b.item(), 0.1, 1e-7);
  EXPECT_NEAR(a.item(), -0.2, 1e-7);
  EXPECT_EQ(opt.step_count(), 3);
}

TEST(AdamW, DecaysTheParameterNotTheGradient) {
  Tensor p = Tensor::from_vector<double>({2.0});
  AdamW opt({p}, 0.1, {.weight_decay = 0.5});
  opt.apply({Tensor::from_vector<double>({0.0})});
  // Zero gradient: Adam's step is 0, only the decay p *= 1 - lr * wd acts.
  EXPECT_NEAR(p.item(), 2.0 * 0.95, 1e-12);
  Tensor q = Tensor::from_vector<double>({2.0});
  Adam l2({q}, 0.1, {.weight_decay = 0.5});
  l2.apply({Tensor::from_vector<double>({0.0})});
  // Adam's L2 turns the zero gradient into 0.5 * 2 = 1, a full lr step.
  EXPECT_NEAR(q.item(), 1.9, 1e-7);
}

TEST(Optimizer, LearningRateScheduleAdvancesWithSteps) {
  Tensor p = Tensor::from_vector<double>({0.0});
  SGD opt({p}, step_lr(0.1, 1, 0.5));
  const Tensor g = Tensor::from_vector<double>({1.0});
  EXPECT_DOUBLE_EQ(opt.current_lr(), 0.1);
  opt.apply({g});
  EXPECT_DOUBLE_EQ(p.item(), -0.1);
  EXPECT_DOUBLE_EQ(opt.current_lr(), 0.05);
  opt.apply({g});
  EXPECT_DOUBLE_EQ(p.item(), -0.15);
  opt.apply({g});
  EXPECT_DOUBLE_EQ(p.item(), -0.175);
}

// ---- gradients from autograd ----

TEST(Optimizer, StepUsesAccumulatedGradientsAndSkipsParametersWithout) {
  Tensor used = Tensor::from_vector<double>({1.0, -2.0}).set_requires_grad(true);
  Tensor unused = Tensor::from_vector<double>({5.0}).set_requires_grad(true);
  Momentum opt({used, unused}, 0.1, 0.0);
  autodiff::backward(ops::reduce_sum(used * used));  // grad 2·used
  opt.step();
  EXPECT_TRUE(testing::all_close(used, Tensor::from_vector<double>({0.8, -1.6}), 1e-15));
  EXPECT_EQ(unused.item(), 5.0);
  EXPECT_TRUE(used.is_leaf());
  EXPECT_TRUE(used.requires_grad());
  opt.zero_grad();
  EXPECT_FALSE(used.grad().defined());
  opt.step();  // no gradients: nothing changes, the step still counts
  EXPECT_TRUE(testing::all_close(used, Tensor::from_vector<double>({0.8, -1.6}), 1e-15));
  EXPECT_EQ(opt.step_count(), 2);
}

// ---- bad input ----

TEST(Optimizer, ApplyChecksGradientsBeforeUpdatingAnything) {
  Tensor a = Tensor::zeros({2, 2});
  Tensor b = Tensor::zeros({3});
  Momentum opt({a, b}, 0.1, 0.9);
  EXPECT_ERROR(opt.apply({Tensor::ones({2, 2})}), "Momentum: 1 gradients given for 2 parameters",
               "one per parameter");
  EXPECT_ERROR(opt.apply({Tensor::ones({2, 2}), Tensor::ones({4})}),
               "Momentum: gradient 1 is Float32 (4) but parameter 1 is Float32 (3)");
  EXPECT_ERROR(opt.apply({Tensor::ones({2, 2}, DType::kFloat64), Tensor()}),
               "Momentum: gradient 0 is Float64 (2, 2) but parameter 0 is Float32 (2, 2)");
  EXPECT_EQ(a.to_vector<float>(), std::vector<float>(4, 0.0f));  // untouched
  EXPECT_EQ(opt.step_count(), 0);
}

TEST(Optimizer, ConstructorArgumentsAreChecked) {
  const Tensor p = Tensor::zeros({2});
  EXPECT_ERROR(Momentum({}, 0.1, 0.9), "Momentum: no parameters given");
  EXPECT_ERROR(Momentum({p, Tensor::zeros({2}, DType::kInt64)}, 0.1, 0.9),
               "Momentum: parameter 1 has dtype Int64");
  EXPECT_ERROR(Momentum({p, p}, 0.1, 0.9),
               "Momentum: parameter 1 is the same tensor as parameter 0");
  EXPECT_ERROR(Momentum({p}, 0.1, -0.5), "Momentum: momentum is -0.5");
  EXPECT_ERROR(Momentum({p}, 0.1, 0.9, -1.0), "Momentum: weight_decay is -1");
  EXPECT_ERROR(SGD({p}, 0.1, {.momentum = 0.9, .dampening = 0.1, .nesterov = true}),
               "SGD: nesterov needs momentum > 0 and dampening 0");
  EXPECT_ERROR(SGD({p}, 0.1, {.nesterov = true}), "SGD: nesterov needs momentum > 0");
  EXPECT_ERROR(Adam({p}, 0.1, {.beta1 = 1.0}), "Adam: beta1 is 1; expected 0 <= beta1 < 1");
  EXPECT_ERROR(AdamW({p}, 0.1, {.beta2 = -0.1}), "AdamW: beta2 is -0.1");
  EXPECT_ERROR(Adam({p}, 0.1, {.eps = 0.0}), "Adam: eps is 0");
  EXPECT_ERROR(SGD({p}, -0.1), "learning rate is -0.1");
}

}  // namespace
}  // namespace cleave::optim

// End to end: a small MLP trained on a fixed problem with each optimizer, through
// WithLossCell, autodiff::backward and Optimizer::step.
#include <gtest/gtest.h>

#include <cmath>
#include <memory>

#include "cleave/nn/layers.h"
#include "cleave/nn/loss.h"
#include "cleave/optim/optimizer.h"
#include "testing/gradcheck.h"

namespace cleave::optim {
namespace {

// 64 points in 4-D, labelled by which of three fixed directions they align with best.
struct Problem {
  Tensor data, labels;
};

Problem make_problem() {
  const Tensor x = ops::cast(testing::random_f64({64, 4}, -1, 1, 51), DType::kFloat32);
  const double directions[3][4] = {{1, 1, 0, 0}, {0, -1, 1, 0.5}, {-1, 0, -0.5, 1}};
  std::vector<int32_t> labels;
  for (int64_t n = 0; n < 64; ++n) {
    int best = 0;
    double best_score = -1e9;
    for (int c = 0; c < 3; ++c) {
      double score = 0;
      for (int64_t k = 0; k < 4; ++k) score += directions[c][k] * x.at({n, k});
      if (score > best_score) {
        best_score = score;
        best = c;
      }
    }
    labels.push_back(best);
  }
  return {x, Tensor::from_vector<int32_t>(labels)};
}

std::shared_ptr<nn::WithLossCell> make_mlp() {
  set_seed(3);
  auto mlp = std::make_shared<nn::SequentialCell>(std::vector<nn::CellPtr>{
      std::make_shared<nn::Dense>(4, 16, nn::DenseOptions{.weight_init = "he_uniform"}),
      std::make_shared<nn::ReLU>(),
      std::make_shared<nn::Dense>(16, 3, nn::DenseOptions{.weight_init = "he_uniform"}),
  });
  return std::make_shared<nn::WithLossCell>(mlp, std::make_shared<nn::CrossEntropyLoss>());
}

// Trains for `steps` steps and returns the losses before and after.
std::pair<double, double> train(nn::WithLossCell& net, Optimizer& opt, int steps) {
  const Problem p = make_problem();
  net.set_train();
  double first = 0, last = 0;
  for (int step = 0; step <= steps; ++step) {
    opt.zero_grad();
    const Tensor loss = net(p.data, p.labels);
    if (step == 0) first = loss.item();
    last = loss.item();
    if (step == steps) break;
    autodiff::backward(loss);
    opt.step();
  }
  return {first, last};
}

TEST(Training, MomentumReducesTheLossOfAnMlp) {
  auto net = make_mlp();
  Momentum opt(net->trainable_params(), 0.1, 0.9);
  const auto [first, last] = train(*net, opt, 50);
  EXPECT_GT(first, 0.5);
  EXPECT_LT(last, first / 4) << "loss went from " << first << " to " << last;
  EXPECT_EQ(opt.step_count(), 50);
}

TEST(Training, SgdAndAdamReduceTheLossToo) {
  {
    auto net = make_mlp();
    SGD opt(net->trainable_params(), 0.1, {.momentum = 0.9, .nesterov = true});
    const auto [first, last] = train(*net, opt, 50);
    EXPECT_LT(last, first / 4) << "SGD: loss went from " << first << " to " << last;
  }
  {
    auto net = make_mlp();
    AdamW opt(net->trainable_params(), 0.02);
    const auto [first, last] = train(*net, opt, 50);
    EXPECT_LT(last, first / 4) << "AdamW: loss went from " << first << " to " << last;
  }
}

}  // namespace
}  // namespace cleave::optim

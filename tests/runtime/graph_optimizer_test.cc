// Every optimizer's update inside the compiled training step: GRAPH_MODE against PYNATIVE_MODE
// over many steps, with a learning-rate schedule that changes the rate, on one compiled graph.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <memory>

#include "cleave/cleave.h"
#include "testing/gradcheck.h"
#include "testing/graph_mode.h"
#include "testing/models.h"

namespace cleave::runtime {
namespace {

using testing::ModeGuard;

using MakeOptimizer = std::function<std::unique_ptr<optim::Optimizer>(std::vector<Tensor>)>;

struct Run {
  std::vector<double> losses;
  std::vector<std::vector<double>> params;
  size_t compiled = 0;
  int update_ops = 0;  // GRAPH_MODE: side-effecting update nodes in the compiled graph
};

Run train(Mode mode, const MakeOptimizer& make, const std::string& update_op, int steps) {
  ModeGuard guard(mode);
  set_seed(2);
  auto net = std::make_shared<testing::TwoMatMul>();
  auto with_loss = std::make_shared<nn::WithLossCell>(net, std::make_shared<nn::MSELoss>());
  const std::shared_ptr<optim::Optimizer> opt = make(net->trainable_params());
  optim::TrainOneStep step(with_loss, opt);
  const Tensor x = ops::cast(testing::random_f64({16, 32}, -1, 1, 9), DType::kFloat32);
  const Tensor y = ops::cast(testing::random_f64({16, 16}, -1, 1, 10), DType::kFloat32);
  Run run;
  for (int i = 0; i < steps; ++i) run.losses.push_back(step(x, y).item());
  for (const Tensor& p : net->trainable_params()) run.params.push_back(p.to_double_vector());
  run.compiled = step.num_compiled();
  if (step.last_executor() != nullptr) {
    for (const ir::Node& n : step.last_executor()->graph().nodes) {
      if (n.is_op() && n.op->name == update_op) ++run.update_ops;
    }
  }
  EXPECT_EQ(opt->step_count(), steps);
  return run;
}

void expect_graph_equals_pynative(const MakeOptimizer& make, const std::string& update_op) {
  const int steps = 30;
  const Run graph = train(GRAPH_MODE, make, update_op, steps);
  const Run eager = train(PYNATIVE_MODE, make, update_op, steps);
  // One compile across the learning-rate changes, with one update node per parameter in it.
  EXPECT_EQ(graph.compiled, 1u);
  EXPECT_EQ(graph.update_ops, static_cast<int>(graph.params.size()));
  testing::expect_same_training(graph.losses, eager.losses, graph.params, eager.params);
}

// The rate changes at steps 10 and 20 of 30.
optim::LearningRate schedule(double lr) { return optim::step_lr(lr, 10, 0.5); }

TEST(GraphOptimizer, MomentumWithStepLrCompilesOnce) {
  expect_graph_equals_pynative(
      [](std::vector<Tensor> p) {
        return std::make_unique<optim::Momentum>(std::move(p), schedule(0.02), 0.9);
      },
      "ApplyMomentum");
}

TEST(GraphOptimizer, SgdNesterovWeightDecayWithStepLrCompilesOnce) {
  expect_graph_equals_pynative(
      [](std::vector<Tensor> p) {
        return std::make_unique<optim::SGD>(
            std::move(p), schedule(0.02),
            optim::SGDOptions{.momentum = 0.9, .weight_decay = 1e-3, .nesterov = true});
      },
      "SGD");
}

TEST(GraphOptimizer, AdamWithStepLrCompilesOnce) {
  expect_graph_equals_pynative(
      [](std::vector<Tensor> p) {
        return std::make_unique<optim::Adam>(std::move(p), schedule(0.01),
                                             optim::AdamOptions{.weight_decay = 1e-3});
      },
      "Adam");
}

TEST(GraphOptimizer, AdamWWithStepLrCompilesOnce) {
  expect_graph_equals_pynative(
      [](std::vector<Tensor> p) {
        return std::make_unique<optim::AdamW>(std::move(p), schedule(0.01));
      },
      "Adam");
}

// The counters that checkpoints save follow the updates the graph ran.
TEST(GraphOptimizer, CountersFollowTheGraphUpdates) {
  ModeGuard guard(GRAPH_MODE);
  set_seed(3);
  auto net = std::make_shared<testing::TwoMatMul>();
  auto with_loss = std::make_shared<nn::WithLossCell>(net, std::make_shared<nn::MSELoss>());
  auto adam = std::make_shared<optim::Adam>(net->trainable_params(), 0.01);
  optim::TrainOneStep step(with_loss, adam);
  const Tensor x = Tensor::ones({4, 32}), y = Tensor::zeros({4, 16});
  for (int i = 0; i < 3; ++i) step(x, y);
  const Tensor steps = adam->counters()[0].second;
  EXPECT_EQ(steps.to_vector<int64_t>(), std::vector<int64_t>(adam->parameters().size(), 3));
  EXPECT_EQ(adam->lr_input().item(), 0.01);
}

}  // namespace
}  // namespace cleave::runtime

namespace cleave::runtime {
namespace {

TEST(ExecutorProfiling, SumsKernelTimePerOpNodeOnlyWhileOn) {
  ModeGuard guard(GRAPH_MODE);
  set_seed(4);
  auto net = std::make_shared<testing::TwoMatMul>();
  auto with_loss = std::make_shared<nn::WithLossCell>(net, std::make_shared<nn::MSELoss>());
  auto opt = std::make_shared<optim::Momentum>(net->trainable_params(), 0.01, 0.9);
  optim::TrainOneStep step(with_loss, opt);
  const Tensor x = Tensor::ones({8, 32}), y = Tensor::zeros({8, 16});
  step(x, y);
  Executor& exec = *step.last_executor();
  EXPECT_TRUE(exec.node_seconds().empty());  // off by default
  exec.set_profiling(true);
  for (int i = 0; i < 3; ++i) step(x, y);
  const std::vector<double> on = exec.node_seconds();
  ASSERT_EQ(on.size(), exec.graph().nodes.size());
  double total = 0;
  for (size_t i = 0; i < on.size(); ++i) {
    if (!exec.graph().nodes[i].is_op()) {
      EXPECT_EQ(on[i], 0.0) << i;
    }
    EXPECT_GE(on[i], 0.0);
    total += on[i];
  }
  EXPECT_GT(total, 0.0);
  exec.set_profiling(false);
  step(x, y);
  EXPECT_EQ(exec.node_seconds(), on);  // not accumulating while off
}

}  // namespace
}  // namespace cleave::runtime

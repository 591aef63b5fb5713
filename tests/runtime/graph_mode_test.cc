// GRAPH_MODE against PYNATIVE_MODE: the same losses and parameters over 100 training steps, the
// compile cache and the error for reading a traced value (the memory plan: memory_plan_test.cc).
#include "testing/graph_mode.h"

#include <gtest/gtest.h>

#include <cmath>
#include <memory>

#include "cleave/cleave.h"
#include "testing/gradcheck.h"
#include "testing/models.h"

namespace cleave::runtime {
namespace {

using testing::ModeGuard;
using testing::rel_diff;

struct TrainRun {
  std::vector<double> losses;
  std::vector<std::vector<double>> params;
  size_t compiled = 0;
};

template <typename Net>
TrainRun train(Mode mode, const Tensor& data, const Tensor& labels, int steps, double lr) {
  ModeGuard guard(mode);
  // The compiler against eager execution op for op (1e-6 over 100 steps): the batch stays whole
  // (a batch split over the threads sums in another order: thread_split_test.cc).
  Context context = get_context();
  context.split_batch_over_threads = false;
  set_context(context);
  set_seed(7);
  auto net = std::make_shared<Net>();
  auto with_loss =
      std::make_shared<nn::WithLossCell>(net, std::make_shared<nn::CrossEntropyLoss>());
  auto opt = std::make_shared<optim::Momentum>(net->trainable_params(), lr, 0.9);
  optim::TrainOneStep step(with_loss, opt);
  TrainRun run;
  for (int i = 0; i < steps; ++i) run.losses.push_back(step(data, labels).item());
  for (const Tensor& p : net->trainable_params()) run.params.push_back(p.to_double_vector());
  run.compiled = step.num_compiled();
  EXPECT_EQ(opt->step_count(), steps);
  return run;
}

void expect_same(const TrainRun& graph, const TrainRun& eager) {
  testing::expect_same_training(graph.losses, eager.losses, graph.params, eager.params);
}

Tensor random_labels(int64_t n, int64_t classes, uint64_t seed) {
  const Tensor u = testing::random_f64({n}, 0, static_cast<double>(classes) - 1e-6, seed);
  std::vector<int32_t> v;
  for (double x : u.to_double_vector()) v.push_back(static_cast<int32_t>(x));
  return Tensor::from_vector<int32_t>(v);
}

TEST(GraphMode, LeNetMatchesPyNativeOver100Steps) {
  const Tensor data = ops::cast(testing::random_f64({2, 1, 32, 32}, -1, 1, 3), DType::kFloat32);
  const Tensor labels = random_labels(2, 10, 4);
  const TrainRun graph = train<testing::LeNet5>(GRAPH_MODE, data, labels, 100, 0.05);
  const TrainRun eager = train<testing::LeNet5>(PYNATIVE_MODE, data, labels, 100, 0.05);
  EXPECT_EQ(graph.compiled, 1u);
  expect_same(graph, eager);
}

TEST(GraphMode, MlpMatchesPyNativeOver100Steps) {
  const Tensor data = ops::cast(testing::random_f64({8, 1, 28, 28}, 0, 1, 5), DType::kFloat32);
  const Tensor labels = random_labels(8, 10, 6);
  const TrainRun graph = train<testing::Mlp>(GRAPH_MODE, data, labels, 100, 0.01);
  const TrainRun eager = train<testing::Mlp>(PYNATIVE_MODE, data, labels, 100, 0.01);
  expect_same(graph, eager);
}

// Conv -> BatchNorm (training: moving statistics updated in place) -> ReLU -> Dense.
class ConvBn : public nn::Cell {
 public:
  ConvBn() : Cell("ConvBn") {
    conv = register_module(
        "conv", std::make_shared<nn::Conv2d>(1, 4, 3, nn::Conv2dOptions{.pad_mode = "valid"}));
    bn = register_module("bn", std::make_shared<nn::BatchNorm2d>(4));
    fc = register_module("fc", std::make_shared<nn::Dense>(4 * 6 * 6, 3));
  }
  Tensor construct(const Tensor& x) override {
    return (*fc)(ops::flatten(ops::relu((*bn)((*conv)(x)))));
  }
  std::shared_ptr<nn::Conv2d> conv;
  std::shared_ptr<nn::BatchNorm2d> bn;
  std::shared_ptr<nn::Dense> fc;
};

TEST(GraphMode, BatchNormMovingStatisticsMatchPyNative) {
  const Tensor data = ops::cast(testing::random_f64({4, 1, 8, 8}, -1, 1, 21), DType::kFloat32);
  const Tensor labels = random_labels(4, 3, 22);
  TrainRun runs[2];
  std::vector<double> moving[2];
  for (int m = 0; m < 2; ++m) {
    ModeGuard guard(m == 0 ? GRAPH_MODE : PYNATIVE_MODE);
    set_seed(5);
    auto net = std::make_shared<ConvBn>();
    net->set_train(true);
    auto with_loss =
        std::make_shared<nn::WithLossCell>(net, std::make_shared<nn::CrossEntropyLoss>());
    auto opt = std::make_shared<optim::Momentum>(net->trainable_params(), 0.05, 0.9);
    optim::TrainOneStep step(with_loss, opt);
    for (int i = 0; i < 10; ++i) runs[m].losses.push_back(step(data, labels).item());
    for (const Tensor& p : net->trainable_params()) runs[m].params.push_back(p.to_double_vector());
    moving[m] = net->bn->moving_mean.to_double_vector();
    for (double v : net->bn->moving_variance.to_double_vector()) moving[m].push_back(v);
  }
  expect_same(runs[0], runs[1]);
  ASSERT_EQ(moving[0].size(), 8u);
  for (size_t i = 0; i < moving[0].size(); ++i) {
    EXPECT_LE(rel_diff(moving[0][i], moving[1][i]), 1e-6) << i;
  }
  EXPECT_NE(moving[0][0], 0.0);  // the statistics moved
}

TEST(GraphMode, CompilesOncePerInputSignature) {
  ModeGuard guard(GRAPH_MODE);
  set_seed(1);
  auto net = std::make_shared<testing::TwoMatMul>();
  auto with_loss = std::make_shared<nn::WithLossCell>(net, std::make_shared<nn::MSELoss>());
  auto opt = std::make_shared<optim::Momentum>(net->trainable_params(), 0.01, 0.9);
  optim::TrainOneStep step(with_loss, opt);
  const Tensor x16 = Tensor::ones({16, 32}), y16 = Tensor::zeros({16, 16});
  const Tensor x8 = Tensor::ones({8, 32}), y8 = Tensor::zeros({8, 16});
  step(x16, y16);
  step(x16, y16);
  EXPECT_EQ(step.num_compiled(), 1u);
  step(x8, y8);
  EXPECT_EQ(step.num_compiled(), 2u);
  step(x16, y16);
  EXPECT_EQ(step.num_compiled(), 2u);
  EXPECT_EQ(opt->step_count(), 4);
}

TEST(GraphMode, ForwardMatchesPyNative) {
  set_seed(3);
  auto net = std::make_shared<testing::LeNet5>();
  const Tensor x = ops::cast(testing::random_f64({2, 1, 32, 32}, -1, 1, 11), DType::kFloat32);
  optim::Forward forward(net);
  std::vector<double> graph_out, eager_out;
  {
    ModeGuard guard(GRAPH_MODE);
    graph_out = forward(x).to_double_vector();
    EXPECT_EQ(forward.num_compiled(), 1u);
  }
  {
    ModeGuard guard(PYNATIVE_MODE);
    eager_out = forward(x).to_double_vector();
  }
  ASSERT_EQ(graph_out.size(), eager_out.size());
  for (size_t i = 0; i < graph_out.size(); ++i)
    EXPECT_LE(rel_diff(graph_out[i], eager_out[i]), 1e-6);
}

class ReadsItsInput : public nn::Cell {
 public:
  ReadsItsInput() : Cell("ReadsItsInput") { w = register_parameter("w", Tensor::ones({4, 4})); }
  Tensor construct(const Tensor& x) override {
    const Tensor h = ops::matmul(x, w);
    if (h.at({0, 0}) > 0) return ops::relu(h);  // data-dependent control flow
    return h;
  }
  Tensor w;
};

TEST(GraphMode, ReadingATracedValueSaysWhyAndWhatToDo) {
  ModeGuard guard(GRAPH_MODE);
  optim::Forward forward(std::make_shared<ReadsItsInput>());
  EXPECT_ERROR(forward(Tensor::ones({2, 4})), "is not known while a graph is being traced",
               "Move the read out of construct", "PYNATIVE_MODE");
  // The same cell runs in PyNative mode.
  ModeGuard eager(PYNATIVE_MODE);
  EXPECT_EQ(forward(Tensor::ones({2, 4})).shape(), Shape({2, 4}));
}

TEST(GraphMode, InputOfAnotherSignatureIsRejectedByTheExecutor) {
  ir::Graph g;
  {
    ir::Tracer tracer(g);
    const Tensor x = tracer.add_input({Shape{2, 3}, DType::kFloat32}, "x");
    g.outputs = {tracer.value_of(ops::relu(x))};
  }
  Executor exec(std::move(g));
  EXPECT_ERROR(exec.run({Tensor::ones({3, 3})}), "input 0 ('x')", "(2, 3)", "(3, 3)");
  EXPECT_ERROR(exec.run({}), "0 inputs given", "compiled for 1");
  const Tensor y = exec.run({Tensor::full({2, 3}, -1.0)})[0];
  EXPECT_EQ(y.to_double_vector(), std::vector<double>(6, 0.0));
}

}  // namespace
}  // namespace cleave::runtime

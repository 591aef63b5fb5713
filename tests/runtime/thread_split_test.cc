// NOTE [Threads split the batch]: a GRAPH_MODE training step on two threads, its batch cut into
// blocks computed apart, against the same step on one thread (losses and parameters within 1e-5
// relative over 20 steps); the steps that must not split (batch statistics, random numbers, a sum
// loss, a batch the threads do not divide) and the switch that turns it off.
#include <gtest/gtest.h>

#include <memory>

#include "cleave/cleave.h"
#include "cleave/core/random.h"
#include "cleave/core/threads.h"
#include "cleave/parallel/batch_split.h"
#include "testing/gradcheck.h"
#include "testing/graph_mode.h"
#include "testing/models.h"

namespace cleave::runtime {
namespace {

// Restores the intra-op thread count and the context.
struct ThreadsGuard {
  ThreadsGuard() : threads(threads::intra_op_threads()), context(get_context()) {}
  ~ThreadsGuard() {
    threads::set_intra_op_threads(threads);
    set_context(context);
  }
  int threads;
  Context context;
};

class ConvBn : public nn::Cell {
 public:
  ConvBn() : Cell("ConvBn") {
    conv = register_module("conv", std::make_shared<nn::Conv2d>(1, 4, 3));
    bn = register_module("bn", std::make_shared<nn::BatchNorm2d>(4));
    fc = register_module("fc", std::make_shared<nn::Dense>(4 * 8 * 8, 10));
  }
  Tensor construct(const Tensor& x) override {
    return (*fc)(ops::flatten(ops::relu((*bn)((*conv)(x)))));
  }
  std::shared_ptr<nn::Conv2d> conv;
  std::shared_ptr<nn::BatchNorm2d> bn;
  std::shared_ptr<nn::Dense> fc;
};

class DropoutNet : public nn::Cell {
 public:
  DropoutNet() : Cell("DropoutNet") {
    fc = register_module("fc", std::make_shared<nn::Dense>(64, 10));
    drop = register_module("drop", std::make_shared<nn::Dropout>(0.5));
  }
  Tensor construct(const Tensor& x) override { return (*drop)((*fc)(ops::flatten(x))); }
  std::shared_ptr<nn::Dense> fc;
  std::shared_ptr<nn::Dropout> drop;
};

// A forward written for batch 16: one block's 8 rows cannot be reshaped to (16, -1).
class FixedBatch : public nn::Cell {
 public:
  FixedBatch() : Cell("FixedBatch") {
    fc = register_module("fc", std::make_shared<nn::Dense>(64, 10));
  }
  Tensor construct(const Tensor& x) override { return (*fc)(ops::reshape(x, Shape{16, -1})); }
  std::shared_ptr<nn::Dense> fc;
};

// A network whose MatMul contracts the batch: x^T x mixes every row.
class Gram : public nn::Cell {
 public:
  Gram() : Cell("Gram") { fc = register_module("fc", std::make_shared<nn::Dense>(64, 10)); }
  Tensor construct(const Tensor& x) override {
    const Tensor flat = ops::flatten(x);
    const Tensor gram = ops::matmul(flat, flat, {.transpose_a = true});  // (64, 64)
    return (*fc)(ops::matmul(flat, gram));
  }
  std::shared_ptr<nn::Dense> fc;
};

struct StepRun {
  std::vector<double> losses;
  std::vector<std::vector<double>> params;
  int split = 0;
};

template <typename Net>
StepRun train(int threads, int64_t batch, const std::string& reduction = "mean", int steps = 20,
              int64_t side = 8) {
  ThreadsGuard guard;
  set_context({.mode = GRAPH_MODE});
  // The data and the network are made on the process's threads (one under TSan, whose OpenMP
  // loops stay on one: docs/reliability.md); only the steps run on `threads`.
  const Tensor x =
      ops::cast(testing::random_f64({batch, 1, side, side}, -1, 1, 5), DType::kFloat32);
  std::vector<int32_t> y;
  for (int64_t i = 0; i < batch; ++i) y.push_back(static_cast<int32_t>((i * 7) % 10));
  const Tensor labels = Tensor::from_vector<int32_t>(y);
  std::shared_ptr<Net> net;
  {
    const SeededScope seeded(11);
    net = std::make_shared<Net>();
  }
  auto loss = std::make_shared<nn::SoftmaxCrossEntropyWithLogits>(true, reduction);
  auto with_loss = std::make_shared<nn::WithLossCell>(net, loss);
  auto opt = std::make_shared<optim::Momentum>(net->trainable_params(), 0.02, 0.9);
  optim::TrainOneStep step(with_loss, opt);
  threads::set_intra_op_threads(threads);
  StepRun run;
  for (int i = 0; i < steps; ++i) run.losses.push_back(step(x, labels).item());
  for (const Tensor& p : net->trainable_params()) run.params.push_back(p.to_double_vector());
  run.split = step.thread_split();
  // The blocks ran on one intra-op thread each; the caller keeps its own count.
  EXPECT_EQ(threads::intra_op_threads(), threads);
  return run;
}

TEST(ThreadSplit, LeNetOnTwoThreadsEqualsOneThread) {
  const StepRun one = train<testing::LeNet5>(1, 32, "mean", 20, 32);
  const StepRun two = train<testing::LeNet5>(2, 32, "mean", 20, 32);
  EXPECT_EQ(one.split, 1);
  EXPECT_EQ(two.split, 2);
  testing::expect_same_training(two.losses, one.losses, two.params, one.params, 1e-5);
}

TEST(ThreadSplit, MlpOnFourBlocksEqualsOneThread) {
  // Four threads on any machine: the blocks are the same whichever thread runs them.
  const StepRun one = train<testing::Mlp>(1, 64, "mean", 20, 28);
  const StepRun four = train<testing::Mlp>(4, 64, "mean", 20, 28);
  EXPECT_EQ(four.split, 4);
  testing::expect_same_training(four.losses, one.losses, four.params, one.params, 1e-5);
}

TEST(ThreadSplit, ThreadsLeftAfterCompilingStillGiveTheSameStep) {
  ThreadsGuard guard;
  set_context({.mode = GRAPH_MODE});
  threads::set_intra_op_threads(2);
  std::shared_ptr<testing::Mlp> net;
  {
    const SeededScope seeded(3);
    net = std::make_shared<testing::Mlp>();
  }
  auto with_loss = std::make_shared<nn::WithLossCell>(
      net, std::make_shared<nn::SoftmaxCrossEntropyWithLogits>(true, "mean"));
  optim::TrainOneStep step(with_loss, std::make_shared<optim::SGD>(net->trainable_params(), 0.1));
  const Tensor x = ops::cast(testing::random_f64({8, 1, 28, 28}, -1, 1, 2), DType::kFloat32);
  const Tensor y = Tensor::from_vector<int32_t>({1, 2, 3, 4, 5, 6, 7, 8});
  const double first = step(x, y).item();
  EXPECT_EQ(step.thread_split(), 2);
  threads::set_intra_op_threads(1);  // the compiled step now runs both blocks on one thread
  const double second = step(x, y).item();
  EXPECT_EQ(step.thread_split(), 2);
  EXPECT_LT(second, first);
}

// The blocker the compile of `net`'s step reports on two threads.
template <typename Net>
std::string blocker(int64_t batch, const std::string& reduction = "mean", int64_t side = 8) {
  ThreadsGuard guard;
  set_context({.mode = GRAPH_MODE});
  threads::set_intra_op_threads(2);
  auto net = std::make_shared<Net>();
  auto with_loss = std::make_shared<nn::WithLossCell>(
      net, std::make_shared<nn::SoftmaxCrossEntropyWithLogits>(true, reduction));
  optim::TrainOneStep step(with_loss, std::make_shared<optim::SGD>(net->trainable_params(), 0.1));
  const StepProgram program =
      step.program({Shape{batch, 1, side, side}, DType::kFloat32}, {Shape{batch}, DType::kInt32});
  const CompileOptions options = compile_options(program);
  EXPECT_EQ(options.thread_split, 2);
  const CompiledPlan plan = compile(program, options);
  EXPECT_EQ(plan.options.micro_batches, plan.thread_split_blocker.empty() ? 2 : 1);
  return plan.thread_split_blocker;
}

TEST(ThreadSplit, StepsThatWouldChangeDoNotSplit) {
  EXPECT_EQ(blocker<testing::LeNet5>(32, "mean", 32), "");
  const std::string bn = blocker<ConvBn>(16);
  EXPECT_NE(bn.find("BatchNorm"), std::string::npos) << bn;
  EXPECT_NE(bn.find("computed from the whole batch"), std::string::npos) << bn;
  const std::string drop = blocker<DropoutNet>(16);
  EXPECT_NE(drop.find("random numbers"), std::string::npos) << drop;
  const std::string gram = blocker<Gram>(16);
  EXPECT_NE(gram.find("MatMul"), std::string::npos) << gram;
  const std::string sum = blocker<testing::LeNet5>(32, "sum", 32);
  EXPECT_NE(sum.find("ReduceSum"), std::string::npos) << sum;
  EXPECT_NE(sum.find("a reduction over the blocks"), std::string::npos) << sum;
  const std::string fixed = blocker<FixedBatch>(16);
  EXPECT_NE(fixed.find("traced for 1/2 of the batch failed"), std::string::npos) << fixed;
  const std::string odd = blocker<testing::LeNet5>(30, "mean", 32);
  EXPECT_NE(odd.find("(30, 1, 32, 32)"), std::string::npos) << odd;
}

TEST(ThreadSplit, StepsThatDoNotSplitStillTrainAsOneThread) {
  const StepRun one = train<ConvBn>(1, 16);
  const StepRun two = train<ConvBn>(2, 16);
  EXPECT_EQ(two.split, 1);
  testing::expect_same_training(two.losses, one.losses, two.params, one.params, 1e-5);
  const StepRun fixed_one = train<FixedBatch>(1, 16);
  const StepRun fixed_two = train<FixedBatch>(2, 16);
  EXPECT_EQ(fixed_two.split, 1);
  testing::expect_same_training(fixed_two.losses, fixed_one.losses, fixed_two.params,
                                fixed_one.params, 1e-5);
}

TEST(ThreadSplit, TheContextTurnsItOff) {
  ThreadsGuard guard;
  set_context({.mode = GRAPH_MODE, .split_batch_over_threads = false});
  auto net = std::make_shared<testing::Mlp>();
  auto with_loss = std::make_shared<nn::WithLossCell>(
      net, std::make_shared<nn::SoftmaxCrossEntropyWithLogits>(true, "mean"));
  optim::TrainOneStep step(with_loss, std::make_shared<optim::SGD>(net->trainable_params(), 0.1));
  threads::set_intra_op_threads(2);
  const StepProgram program =
      step.program({Shape{8, 1, 28, 28}, DType::kFloat32}, {Shape{8}, DType::kInt32});
  const CompileOptions options = compile_options(program);
  EXPECT_EQ(options.thread_split, 1);
  EXPECT_EQ(compile(program, options).options.micro_batches, 1);
  set_context({.mode = GRAPH_MODE});
  EXPECT_EQ(compile_options(program).thread_split, 2);
}

}  // namespace
}  // namespace cleave::runtime

// TrainOneStep's contract: it runs the network in training mode (whatever mode it was left in), it
// shares ownership of the network and the optimizer, and it refuses null ones; Forward likewise.
#include "cleave/optim/train_one_step.h"

#include <gtest/gtest.h>

#include <memory>
#include <vector>

#include "cleave/cleave.h"
#include "testing/gradcheck.h"
#include "testing/graph_mode.h"

namespace cleave::optim {
namespace {

using runtime::GRAPH_MODE;
using runtime::PYNATIVE_MODE;
using testing::ModeGuard;

// conv -> BatchNorm -> flatten -> dense: a network whose result depends on its mode.
class ConvBn : public nn::Cell {
 public:
  ConvBn() : Cell("ConvBn") {
    conv = register_module("conv", std::make_shared<nn::Conv2d>(1, 2, 3));
    bn = register_module("bn", std::make_shared<nn::BatchNorm2d>(2));
    fc = register_module("fc", std::make_shared<nn::Dense>(2 * 4 * 4, 3));
  }
  Tensor construct(const Tensor& x) override {
    return (*fc)(ops::flatten(ops::relu((*bn)((*conv)(x)))));
  }
  std::shared_ptr<nn::Conv2d> conv;
  std::shared_ptr<nn::BatchNorm2d> bn;
  std::shared_ptr<nn::Dense> fc;
};

struct Training {
  std::shared_ptr<ConvBn> net;
  std::shared_ptr<nn::WithLossCell> with_loss;
  std::shared_ptr<Momentum> optimizer;
};

Training make_training() {
  set_seed(11);
  Training s;
  s.net = std::make_shared<ConvBn>();
  s.with_loss = std::make_shared<nn::WithLossCell>(s.net, std::make_shared<nn::CrossEntropyLoss>());
  s.optimizer = std::make_shared<Momentum>(s.net->trainable_params(), 0.05, 0.9);
  return s;
}

const Tensor& images() {
  static const Tensor x = ops::cast(testing::random_f64({4, 1, 4, 4}, -1, 1, 5), DType::kFloat32);
  return x;
}
const Tensor& labels() {
  static const Tensor y = Tensor::from_vector<int32_t>({0, 1, 2, 1});
  return y;
}

bool all_zero(const Tensor& t) {
  for (double v : t.to_double_vector()) {
    if (v != 0.0) return false;
  }
  return true;
}

// A new Cell is in inference mode; before, TrainOneStep silently normalised with BatchNorm's
// moving statistics (zeros and ones) and never updated them.
TEST(TrainOneStep, PutsTheNetworkInTrainingMode) {
  for (const runtime::Mode mode : {GRAPH_MODE, PYNATIVE_MODE}) {
    ModeGuard guard(mode);
    Training s = make_training();
    ASSERT_FALSE(s.net->training());
    TrainOneStep step(s.with_loss, s.optimizer);
    step(images(), labels());
    EXPECT_TRUE(s.with_loss->training()) << "mode " << static_cast<int>(mode);
    EXPECT_TRUE(s.net->bn->training()) << "mode " << static_cast<int>(mode);
    EXPECT_FALSE(all_zero(s.net->bn->moving_mean)) << "the moving statistics were not updated";
  }
}

// Left in inference mode after an evaluation, the network trains in training mode again: the
// same loss as a step that never left it.
TEST(TrainOneStep, TrainsInTrainingModeAfterAnEvaluation) {
  ModeGuard guard(GRAPH_MODE);
  Training a = make_training();
  TrainOneStep step_a(a.with_loss, a.optimizer);
  step_a(images(), labels());
  const double expected = step_a(images(), labels()).item();

  Training b = make_training();
  TrainOneStep step_b(b.with_loss, b.optimizer);
  step_b(images(), labels());
  b.net->set_train(false);
  Forward(b.net)(images());  // an evaluation in inference mode
  EXPECT_NEAR(step_b(images(), labels()).item(), expected, 1e-6);
  EXPECT_TRUE(b.net->bn->training());
}

// NOTE [Ownership of networks and optimizers]: the step keeps what it was given alive.
TEST(TrainOneStep, SharesOwnershipOfTheNetworkAndTheOptimizer) {
  ModeGuard guard(GRAPH_MODE);
  Training s = make_training();
  const std::weak_ptr<nn::Cell> net = s.with_loss;
  const std::weak_ptr<Optimizer> optimizer = s.optimizer;
  TrainOneStep step(std::move(s.with_loss), std::move(s.optimizer));
  s = Training{};
  ASSERT_FALSE(net.expired());
  ASSERT_FALSE(optimizer.expired());
  const double first = step(images(), labels()).item();
  double last = first;
  for (int i = 0; i < 10; ++i) last = step(images(), labels()).item();
  EXPECT_LT(last, first);
  EXPECT_EQ(optimizer.lock()->step_count(), 11);
}

TEST(TrainOneStep, NullNetworkOrOptimizerIsReported) {
  Training s = make_training();
  EXPECT_ERROR(TrainOneStep(nullptr, s.optimizer), "TrainOneStep: the network is null",
               "std::make_shared<nn::WithLossCell>(net, loss_fn)");
  EXPECT_ERROR(TrainOneStep(s.with_loss, nullptr), "TrainOneStep: the optimizer is null",
               "expected an Optimizer");
  EXPECT_ERROR(Forward(nullptr), "Forward: the network is null; expected a Cell");
}

// Forward runs the network in its current mode and keeps it alive.
TEST(Forward, RunsInTheCurrentModeAndSharesOwnership) {
  ModeGuard guard(GRAPH_MODE);
  Training s = make_training();
  Forward forward(s.net);
  const std::weak_ptr<ConvBn> net = s.net;
  s.net->set_train(true);
  s = Training{};
  ASSERT_FALSE(net.expired());
  forward(images());
  EXPECT_TRUE(net.lock()->training());
  EXPECT_FALSE(all_zero(net.lock()->bn->moving_mean));  // training mode updated the statistics
}

}  // namespace
}  // namespace cleave::optim

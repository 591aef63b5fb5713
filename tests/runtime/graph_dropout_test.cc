// Dropout in GRAPH_MODE: the compiled step draws its masks from the same global generator as the
// eager step, so under one set_seed both modes train the same; evaluation is the identity.
#include <gtest/gtest.h>

#include <cmath>
#include <memory>

#include "cleave/cleave.h"
#include "testing/gradcheck.h"
#include "testing/graph_mode.h"

namespace cleave::runtime {
namespace {

class DropoutNet : public nn::Cell {
 public:
  DropoutNet() : Cell("DropoutNet") {
    fc1 = register_module("fc1", std::make_shared<nn::Dense>(8, 16));
    drop = register_module("drop", std::make_shared<nn::Dropout>(0.5));
    fc2 = register_module("fc2", std::make_shared<nn::Dense>(16, 4));
  }
  Tensor construct(const Tensor& x) override { return (*fc2)((*drop)(ops::relu((*fc1)(x)))); }
  std::shared_ptr<nn::Dense> fc1, fc2;
  std::shared_ptr<nn::Dropout> drop;
};

struct Result {
  std::vector<double> losses;
  std::vector<double> params;
};

Result train(Mode mode) {
  testing::ModeGuard guard(mode);
  set_seed(5);
  auto net = std::make_shared<DropoutNet>();
  net->set_train(true);
  auto with_loss = std::make_shared<nn::WithLossCell>(net, std::make_shared<nn::MSELoss>());
  auto opt = std::make_shared<optim::Momentum>(net->trainable_params(), 0.05, 0.9);
  optim::TrainOneStep step(with_loss, opt);
  const Tensor x = ops::cast(testing::random_f64({6, 8}, -1, 1, 3), DType::kFloat32);
  const Tensor y = ops::cast(testing::random_f64({6, 4}, -1, 1, 4), DType::kFloat32);
  Result r;
  for (int i = 0; i < 12; ++i) r.losses.push_back(step(x, y).item());
  for (const Tensor& p : net->trainable_params()) {
    for (double v : p.to_double_vector()) r.params.push_back(v);
  }
  return r;
}

TEST(GraphDropout, TrainsLikePyNativeUnderOneSeed) {
  const Result graph = train(GRAPH_MODE);
  const Result eager = train(PYNATIVE_MODE);
  ASSERT_EQ(graph.losses.size(), eager.losses.size());
  for (size_t i = 0; i < graph.losses.size(); ++i) {
    EXPECT_NEAR(graph.losses[i], eager.losses[i], 1e-6 * std::max(1.0, std::abs(eager.losses[i])))
        << "step " << i;
  }
  ASSERT_EQ(graph.params.size(), eager.params.size());
  for (size_t k = 0; k < graph.params.size(); ++k) {
    EXPECT_NEAR(graph.params[k], eager.params[k], 1e-6) << "parameter element " << k;
  }
}

TEST(GraphDropout, MasksChangeFromStepToStepAndEvalIsIdentity) {
  testing::ModeGuard guard(GRAPH_MODE);
  set_seed(9);
  auto drop = std::make_shared<nn::Dropout>(0.5);
  drop->set_train(true);
  optim::Forward forward(drop);
  const Tensor x = Tensor::ones({64});
  const std::vector<float> a = forward(x).to_vector<float>();
  const std::vector<float> b = forward(x).to_vector<float>();
  EXPECT_NE(a, b);  // a fresh mask per run of the compiled graph
  for (float v : a) EXPECT_TRUE(v == 0.0f || std::abs(v - 2.0f) < 1e-6f);
  drop->set_train(false);
  EXPECT_EQ(forward(x).to_vector<float>(), x.to_vector<float>());
}

}  // namespace
}  // namespace cleave::runtime

// Parity with PyTorch: the seed's LeNet-5 and the MLP 784-512-512-10, on the same weights and
// inputs, must give the same logits, loss, parameter gradients and, after 10 Momentum steps, the
// same parameters (max abs difference <= 1e-4 in float32). The reference is written by
// torch_reference.py into $CLEAVE_PARITY_DIR (run_parity.sh does both).
#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <map>
#include <sstream>

#include "testing/gradcheck.h"
#include "testing/models.h"

namespace cleave {
namespace {

constexpr double kTolerance = 1e-4;

std::map<std::string, Tensor> read_reference(const std::string& dir) {
  std::ifstream manifest(dir + "/manifest.txt");
  EXPECT_TRUE(manifest.good()) << "no manifest in " << dir;
  std::map<std::string, Tensor> out;
  std::string line;
  while (std::getline(manifest, line)) {
    std::istringstream fields(line);
    std::string name, dtype, dims;
    fields >> name >> dtype >> dims;
    std::vector<int64_t> shape;
    if (dims != "scalar") {
      std::istringstream ds(dims);
      for (std::string d; std::getline(ds, d, ',');) shape.push_back(std::stoll(d));
    }
    Tensor t = Tensor::empty(Shape(shape), dtype == "Int32" ? DType::kInt32 : DType::kFloat32);
    std::ifstream bin(dir + "/" + name + ".bin", std::ios::binary);
    bin.read(static_cast<char*>(t.raw_data()), static_cast<std::streamsize>(t.nbytes()));
    EXPECT_EQ(static_cast<size_t>(bin.gcount()), t.nbytes()) << name;
    out.emplace(name, t);
  }
  return out;
}

double max_abs_diff(const Tensor& a, const Tensor& b) {
  EXPECT_EQ(a.shape(), b.shape());
  const std::vector<double> x = a.to_double_vector(), y = b.to_double_vector();
  double worst = 0;
  for (size_t i = 0; i < x.size(); ++i) worst = std::max(worst, std::abs(x[i] - y[i]));
  return worst;
}

void check_model(nn::Cell& net, const std::string& model) {
  const char* root = std::getenv("CLEAVE_PARITY_DIR");
  if (root == nullptr)
    GTEST_SKIP() << "CLEAVE_PARITY_DIR is not set: run tests/parity/run_parity.sh";
  std::map<std::string, Tensor> ref = read_reference(std::string(root) + "/" + model);
  ASSERT_FALSE(ref.empty());

  for (auto& [name, param] : net.parameters_and_names()) {
    ASSERT_TRUE(ref.count("init." + name)) << "PyTorch has no parameter " << name;
    param.copy_from(ref.at("init." + name));
  }
  nn::SoftmaxCrossEntropyWithLogits loss_fn(/*sparse=*/true, "mean");
  net.set_train(true);

  const Tensor logits = net(ref.at("x.0"));
  const Tensor loss = loss_fn(logits, ref.at("y.0"));
  EXPECT_LE(max_abs_diff(logits, ref.at("logits")), kTolerance) << model << " logits";
  EXPECT_LE(max_abs_diff(loss, ref.at("loss")), kTolerance) << model << " loss";
  autodiff::backward(loss);
  for (auto& [name, param] : net.parameters_and_names()) {
    EXPECT_LE(max_abs_diff(param.grad(), ref.at("grad." + name)), kTolerance)
        << model << " gradient of " << name;
  }

  optim::Momentum opt(net.trainable_params(), 0.01, 0.9);
  const std::vector<float> ref_losses = ref.at("losses").to_vector<float>();
  for (int step = 0; step < 10; ++step) {
    opt.zero_grad();
    const Tensor step_loss =
        loss_fn(net(ref.at("x." + std::to_string(step))), ref.at("y." + std::to_string(step)));
    EXPECT_NEAR(step_loss.item(), ref_losses[step], kTolerance) << model << " step " << step;
    autodiff::backward(step_loss);
    opt.step();
  }
  for (auto& [name, param] : net.parameters_and_names()) {
    EXPECT_LE(max_abs_diff(param, ref.at("final." + name)), kTolerance)
        << model << " parameter " << name << " after 10 Momentum steps";
  }
}

TEST(TorchParity, LeNet5ForwardBackwardAndTenMomentumSteps) {
  testing::LeNet5 net;
  check_model(net, "lenet");
}

TEST(TorchParity, MlpForwardBackwardAndTenMomentumSteps) {
  testing::Mlp net;
  check_model(net, "mlp");
}

}  // namespace
}  // namespace cleave

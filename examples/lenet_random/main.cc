// LeNet-5 of the graph-partition scenario (seed 000, MindSpore's "Distributed Graph Partition"
// tutorial), trained eagerly on one process with random data: the main job of ./run.sh until the
// MNIST pipeline exists.
//
// The network, loss, optimizer and printed lines follow the seed: conv(1->6, k5, valid, no bias)
// -> ReLU -> MaxPool(2, 2) -> conv(6->16, k5) -> ReLU -> MaxPool -> Flatten -> Dense
// 400->120->84->10 with TruncatedNormal(0.02) weights and biases; Momentum(lr 0.01, momentum 0.9);
// SoftmaxCrossEntropyWithLogits(sparse, mean); "epoch: 1 step: 20, loss is 2.24..." every 20 steps.
// The data set is `steps_per_epoch` fixed batches of 32 random 1x32x32 images with random labels,
// drawn from --seed, so the same seed prints the same losses.
#include <fmt/core.h>

#include <CLI/CLI.hpp>
#include <chrono>
#include <cstdio>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "cleave/cleave.h"
#include "cleave/flags.h"

namespace {

using namespace cleave;

nn::Conv2dOptions conv_options() {
  return {.pad_mode = "valid", .has_bias = false, .weight_init = nn::TruncatedNormal(0.02)};
}

nn::DenseOptions dense_options() {
  return {.weight_init = nn::TruncatedNormal(0.02), .bias_init = nn::TruncatedNormal(0.02)};
}

class LeNet : public nn::Cell {
 public:
  explicit LeNet(int64_t num_class = 10, int64_t channel = 1) : Cell("LeNet") {
    conv1_ = register_module("conv1", std::make_shared<nn::Conv2d>(channel, 6, 5, conv_options()));
    conv2_ = register_module("conv2", std::make_shared<nn::Conv2d>(6, 16, 5, conv_options()));
    fc1_ = register_module("fc1", std::make_shared<nn::Dense>(16 * 5 * 5, 120, dense_options()));
    fc2_ = register_module("fc2", std::make_shared<nn::Dense>(120, 84, dense_options()));
    fc3_ = register_module("fc3", std::make_shared<nn::Dense>(84, num_class, dense_options()));
    relu_ = register_module("relu", std::make_shared<nn::ReLU>());
    max_pool2d_ = register_module("max_pool2d", std::make_shared<nn::MaxPool2d>(2, 2));
    flatten_ = register_module("flatten", std::make_shared<nn::Flatten>());
  }

  Tensor construct(const Tensor& input) override {
    Tensor x = (*conv1_)(input);
    x = (*max_pool2d_)((*relu_)(x));
    x = (*conv2_)(x);
    x = (*max_pool2d_)((*relu_)(x));
    x = (*flatten_)(x);
    x = (*relu_)((*fc1_)(x));
    x = (*relu_)((*fc2_)(x));
    return (*fc3_)(x);
  }

 private:
  std::shared_ptr<nn::Conv2d> conv1_, conv2_;
  std::shared_ptr<nn::Dense> fc1_, fc2_, fc3_;
  std::shared_ptr<nn::ReLU> relu_;
  std::shared_ptr<nn::MaxPool2d> max_pool2d_;
  std::shared_ptr<nn::Flatten> flatten_;
};

struct Batch {
  Tensor images;  // (batch, 1, 32, 32) Float32
  Tensor labels;  // (batch) Int32 in [0, 10)
};

std::vector<Batch> random_batches(int64_t count, int64_t batch_size, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<int32_t> label(0, 9);
  std::vector<Batch> batches;
  for (int64_t b = 0; b < count; ++b) {
    std::vector<int32_t> labels(static_cast<size_t>(batch_size));
    for (int32_t& l : labels) l = label(rng);
    batches.push_back(
        {Tensor::normal({batch_size, 1, 32, 32}), Tensor::from_vector(labels, {batch_size})});
  }
  return batches;
}

// A float as Python's repr(float) writes it: the shortest text that reads back the same value,
// with ".0" on integral values ("2.0", "2.241283893585205").
std::string python_float(double v) {
  std::string s = fmt::format("{}", v);
  if (s.find_first_of(".en") == std::string::npos) s += ".0";  // not 1e-05, inf, nan
  return s;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Trains the seed's LeNet-5 on random data, printing the loss like LossMonitor."};
  cleave::flags::setup(app);
  int64_t epochs = 3;
  int64_t steps_per_epoch = 60;
  int64_t batch_size = 32;
  int64_t print_every = 20;
  uint64_t seed = 1;
  app.add_option("--epochs", epochs, "passes over the data set")->check(cleave::flags::positive());
  app.add_option("--steps-per-epoch", steps_per_epoch, "batches in the data set")
      ->check(cleave::flags::positive());
  app.add_option("--batch-size", batch_size, "images per batch")->check(cleave::flags::positive());
  app.add_option("--print-every", print_every, "print the loss every this many steps")
      ->check(cleave::flags::positive());
  app.add_option("--seed", seed, "seed of the weights and the data");
  if (auto status = cleave::flags::parse(app, argc, argv)) return *status;

  try {
    set_seed(seed);
    auto net = std::make_shared<LeNet>();
    net->set_train(true);
    nn::SoftmaxCrossEntropyWithLogits loss_fn(/*sparse=*/true, /*reduction=*/"mean");
    optim::Momentum opt(net->trainable_params(), /*lr=*/0.01, /*momentum=*/0.9);
    const std::vector<Batch> data = random_batches(steps_per_epoch, batch_size, seed + 1);

    std::printf("================= Start training =================\n");
    std::fflush(stdout);
    const auto start = std::chrono::steady_clock::now();
    for (int64_t epoch = 1; epoch <= epochs; ++epoch) {
      for (int64_t step = 1; step <= steps_per_epoch; ++step) {
        const Batch& batch = data[static_cast<size_t>(step - 1)];
        Tensor loss = loss_fn((*net)(batch.images), batch.labels);
        autodiff::backward(loss);
        opt.step();
        opt.zero_grad();
        if (step % print_every == 0) {
          fmt::print("epoch: {} step: {}, loss is {}\n", epoch, step, python_float(loss.item()));
          std::fflush(stdout);
        }
      }
    }
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    const int64_t steps = epochs * steps_per_epoch;
    fmt::print("trained {} steps of batch {} in {:.2f} s: {:.1f} steps/s, {:.0f} images/s\n", steps,
               batch_size, seconds, static_cast<double>(steps) / seconds,
               static_cast<double>(steps * batch_size) / seconds);
  } catch (const Error& e) {
    std::fprintf(stderr, "lenet_random: %s\n", e.what());
    return 1;
  }
  return 0;
}

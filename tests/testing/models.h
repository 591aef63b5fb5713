// The reference networks of the tests and benchmarks: the seed's LeNet-5 and the
// 784-512-512-10 MLP of seed 002.
#pragma once

#include <memory>

#include "cleave/cleave.h"

namespace cleave::testing {

// Seed 000's LeNet-5: conv 1->6 k5 valid (no bias), ReLU, maxpool 2/2, conv 6->16 k5 valid,
// ReLU, maxpool, flatten, Dense 400->120->84->10, weights and biases TruncatedNormal(0.02).
class LeNet5 : public nn::Cell {
 public:
  explicit LeNet5(int64_t num_class = 10, int64_t channel = 1) : Cell("LeNet5") {
    const nn::Conv2dOptions conv{
        .pad_mode = "valid", .has_bias = false, .weight_init = nn::TruncatedNormal(0.02)};
    const nn::DenseOptions dense{.weight_init = nn::TruncatedNormal(0.02),
                                 .bias_init = nn::TruncatedNormal(0.02)};
    conv1 = register_module("conv1", std::make_shared<nn::Conv2d>(channel, 6, 5, conv));
    conv2 = register_module("conv2", std::make_shared<nn::Conv2d>(6, 16, 5, conv));
    fc1 = register_module("fc1", std::make_shared<nn::Dense>(16 * 5 * 5, 120, dense));
    fc2 = register_module("fc2", std::make_shared<nn::Dense>(120, 84, dense));
    fc3 = register_module("fc3", std::make_shared<nn::Dense>(84, num_class, dense));
    relu = register_module("relu", std::make_shared<nn::ReLU>());
    max_pool2d = register_module("max_pool2d", std::make_shared<nn::MaxPool2d>(2, 2));
    flatten = register_module("flatten", std::make_shared<nn::Flatten>());
  }

  Tensor construct(const Tensor& x) override {
    Tensor h = (*max_pool2d)((*relu)((*conv1)(x)));
    h = (*max_pool2d)((*relu)((*conv2)(h)));
    h = (*flatten)(h);
    h = (*relu)((*fc1)(h));
    h = (*relu)((*fc2)(h));
    return (*fc3)(h);
  }

  std::shared_ptr<nn::Conv2d> conv1, conv2;
  std::shared_ptr<nn::Dense> fc1, fc2, fc3;
  std::shared_ptr<nn::ReLU> relu;
  std::shared_ptr<nn::MaxPool2d> max_pool2d;
  std::shared_ptr<nn::Flatten> flatten;
};

// Seed 002's MLP: Dense 784->512->512->10 with ReLU between ("normal" initialisation).
class Mlp : public nn::Cell {
 public:
  Mlp() : Cell("Mlp") {
    fc1 = register_module("fc1", std::make_shared<nn::Dense>(28 * 28, 512));
    fc2 = register_module("fc2", std::make_shared<nn::Dense>(512, 512));
    fc3 = register_module("fc3", std::make_shared<nn::Dense>(512, 10));
    relu = register_module("relu", std::make_shared<nn::ReLU>());
  }
  Tensor construct(const Tensor& x) override {
    Tensor h = (*relu)((*fc1)(ops::flatten(x)));
    h = (*relu)((*fc2)(h));
    return (*fc3)(h);
  }
  std::shared_ptr<nn::Dense> fc1, fc2, fc3;
  std::shared_ptr<nn::ReLU> relu;
};

// x[16,32]·w1[32,16] -> ReLU -> ·w2[16,16]; the framework-overhead benchmark row.
class TwoMatMul : public nn::Cell {
 public:
  TwoMatMul() : Cell("TwoMatMul") {
    w1 = register_parameter("w1", nn::Normal(0.1)(Shape{32, 16}));
    w2 = register_parameter("w2", nn::Normal(0.1)(Shape{16, 16}));
  }
  Tensor construct(const Tensor& x) override {
    return ops::matmul(ops::relu(ops::matmul(x, w1)), w2);
  }
  Tensor w1, w2;
};

}  // namespace cleave::testing

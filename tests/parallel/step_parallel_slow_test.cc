// SEMI_AUTO_PARALLEL training of seed 002's MLP and seed 000's LeNet-5 with a strategy on every
// operator, 20 steps on 8 thread ranks, equals one device: losses on every rank and the gathered
// parameters (the slow label, NOTE [Test labels] in tests/CMakeLists.txt; the plan's structure is
// tested from text in step_parallel_test.cc).
#include <fmt/format.h>
#include <gtest/gtest.h>

#include "cleave/cleave.h"
#include "cleave/core/random.h"
#include "cleave/runtime/sharded_parameters.h"
#include "testing/gradcheck.h"
#include "testing/ranks.h"

namespace cleave {
namespace {

struct TrainResult {
  std::vector<double> losses;
  std::vector<Tensor> params;  // gathered
};

// The global generator is not thread-safe: thread ranks make their networks one at a time.
// Seed 002's MLP with a strategy on every operator for 8 devices (examples/semi_auto_parallel's
// NOTE [The model-parallel strategies]): column- and row-split MatMuls, data-parallel tail.
class ShardedMlp : public nn::Cell {
 public:
  explicit ShardedMlp(bool shard) : Cell("Mlp") {
    flatten = register_module("flatten", std::make_shared<nn::Flatten>());
    fc1 = register_module("fc1", std::make_shared<nn::Dense>(28 * 28, 64));
    relu1 = register_module("relu1", std::make_shared<nn::ReLU>());
    fc2 = register_module("fc2", std::make_shared<nn::Dense>(64, 64));
    relu2 = register_module("relu2", std::make_shared<nn::ReLU>());
    fc3 = register_module("fc3", std::make_shared<nn::Dense>(64, 10));
    if (!shard) return;
    flatten->flatten.shard({{8, 1, 1, 1}});
    fc1->matmul.shard({{2, 1}, {4, 1}});
    fc1->bias_add.shard({{2, 4}, {4}});
    relu1->relu.shard({{2, 4}});
    fc2->matmul.shard({{2, 4}, {1, 4}});
    fc2->bias_add.shard({{8, 1}, {1}});
    relu2->relu.shard({{8, 1}});
    fc3->matmul.shard({{8, 1}, {1, 1}});
    fc3->bias_add.shard({{8, 1}, {1}});
  }
  Tensor construct(const Tensor& x) override {
    return (*fc3)((*relu2)((*fc2)((*relu1)((*fc1)((*flatten)(x))))));
  }
  std::shared_ptr<nn::Flatten> flatten;
  std::shared_ptr<nn::Dense> fc1, fc2, fc3;
  std::shared_ptr<nn::ReLU> relu1, relu2;
};

// Seed 000's LeNet-5 (32x32 images) with a strategy on every operator for 8 devices: each ReLU and
// pooling its own instance so that each has one strategy. conv1 splits the batch 4 ways and its
// output channels 2 ways; conv2 its input channels 2 ways (a reduction: a pending sum,
// AllReduce'd); the dense layers as ShardedMlp's.
class ShardedLeNet : public nn::Cell {
 public:
  explicit ShardedLeNet(bool shard) : Cell("LeNet5") {
    const nn::Conv2dOptions conv{
        .pad_mode = "valid", .has_bias = false, .weight_init = nn::TruncatedNormal(0.02)};
    const nn::DenseOptions dense{.weight_init = nn::TruncatedNormal(0.02),
                                 .bias_init = nn::TruncatedNormal(0.02)};
    conv1 = register_module("conv1", std::make_shared<nn::Conv2d>(1, 6, 5, conv));
    conv2 = register_module("conv2", std::make_shared<nn::Conv2d>(6, 16, 5, conv));
    fc1 = register_module("fc1", std::make_shared<nn::Dense>(16 * 5 * 5, 120, dense));
    fc2 = register_module("fc2", std::make_shared<nn::Dense>(120, 84, dense));
    fc3 = register_module("fc3", std::make_shared<nn::Dense>(84, 10, dense));
    for (int i = 0; i < 4; ++i) {
      relu[i] = register_module(fmt::format("relu{}", i + 1), std::make_shared<nn::ReLU>());
    }
    for (int i = 0; i < 2; ++i) {
      pool[i] =
          register_module(fmt::format("pool{}", i + 1), std::make_shared<nn::MaxPool2d>(2, 2));
    }
    flatten = register_module("flatten", std::make_shared<nn::Flatten>());
    if (!shard) return;
    conv1->conv2d.shard({{4, 1, 1, 1}, {2, 1, 1, 1}});
    relu[0]->relu.shard({{4, 2, 1, 1}});
    pool[0]->max_pool.shard({{4, 2, 1, 1}});
    conv2->conv2d.shard({{4, 2, 1, 1}, {1, 2, 1, 1}});
    relu[1]->relu.shard({{8, 1, 1, 1}});
    pool[1]->max_pool.shard({{8, 1, 1, 1}});
    flatten->flatten.shard({{8, 1, 1, 1}});
    fc1->matmul.shard({{2, 1}, {4, 1}});
    fc1->bias_add.shard({{2, 4}, {4}});
    relu[2]->relu.shard({{2, 4}});
    fc2->matmul.shard({{2, 4}, {1, 4}});
    fc2->bias_add.shard({{8, 1}, {1}});
    relu[3]->relu.shard({{8, 1}});
    fc3->matmul.shard({{8, 1}, {1, 1}});
    fc3->bias_add.shard({{8, 1}, {1}});
  }
  Tensor construct(const Tensor& x) override {
    Tensor h = (*pool[0])((*relu[0])((*conv1)(x)));
    h = (*flatten)((*pool[1])((*relu[1])((*conv2)(h))));
    h = (*relu[2])((*fc1)(h));
    return (*fc3)((*relu[3])((*fc2)(h)));
  }
  std::shared_ptr<nn::Conv2d> conv1, conv2;
  std::shared_ptr<nn::Dense> fc1, fc2, fc3;
  std::shared_ptr<nn::ReLU> relu[4];
  std::shared_ptr<nn::MaxPool2d> pool[2];
  std::shared_ptr<nn::Flatten> flatten;
};

// Trains `make(sharded)` with Momentum on `batches` (global); returns losses and the gathered
// parameters. Each thread rank feeds its slice of every batch (dataset_strategy data_parallel).
TrainResult train_batches(const std::function<std::shared_ptr<nn::Cell>()>& make,
                          const std::vector<std::pair<Tensor, Tensor>>& batches, int rank,
                          int world) {
  std::shared_ptr<nn::Cell> net;
  {
    const SeededScope seeded(11);  // NOTE [Global generator]
    net = make();
  }
  auto loss = std::make_shared<nn::WithLossCell>(
      net, std::make_shared<nn::SoftmaxCrossEntropyWithLogits>(/*sparse=*/true, "mean"));
  auto opt = std::make_shared<optim::Momentum>(net->trainable_params(), 0.05, 0.9);
  optim::TrainOneStep step(loss, opt);
  TrainResult run;
  for (const auto& [x, y] : batches) {
    const int64_t rows = x.dim(0) / world;
    run.losses.push_back(
        step(x.narrow_rows(rank * rows, rows).clone(), y.narrow_rows(rank * rows, rows).clone())
            .item());
  }
  for (const Tensor& p : net->trainable_params())
    run.params.push_back(runtime::gather_parameter(p));
  return run;
}

void expect_equal_to_one_device(const std::function<std::shared_ptr<nn::Cell>(bool)>& make,
                                const Shape& image, int steps) {
  // Four fixed batches, cycled: the loss must fall.
  std::vector<std::pair<Tensor, Tensor>> batches;
  set_seed(3);
  for (int s = 0; s < steps; ++s) {
    if (s < 4) {
      batches.emplace_back(Tensor::normal(image),
                           ops::cast(Tensor::uniform({image[0]}, 0, 10), DType::kInt32));
    } else {
      batches.push_back(batches[static_cast<size_t>(s % 4)]);
    }
  }
  runtime::reset_auto_parallel_context();
  const TrainResult single = train_batches([&] { return make(false); }, batches, 0, 1);
  const int world = 8;
  runtime::set_auto_parallel_context({.parallel_mode = runtime::SEMI_AUTO_PARALLEL});
  std::vector<TrainResult> runs(world);
  testing::run_thread_job(world, [&](int rank) {
    runs[rank] = train_batches([&] { return make(true); }, batches, rank, world);
  });
  runtime::reset_auto_parallel_context();
  for (int r = 0; r < world; ++r) {
    ASSERT_EQ(runs[r].losses.size(), single.losses.size());
    for (size_t s = 0; s < single.losses.size(); ++s) {
      EXPECT_NEAR(runs[r].losses[s], single.losses[s], 1e-5 * std::abs(single.losses[s]))
          << "rank " << r << " step " << s;
    }
    for (size_t p = 0; p < single.params.size(); ++p) {
      EXPECT_TRUE(testing::all_close(runs[r].params[p], single.params[p], 1e-6, 1e-5))
          << "rank " << r << " parameter " << p;
    }
  }
  EXPECT_LT(single.losses.back(), single.losses.front());
}

TEST(SemiAutoParallel, MlpWithAStrategyOnEveryOpTrains20StepsOnEightThreadRanks) {
  expect_equal_to_one_device([](bool shard) { return std::make_shared<ShardedMlp>(shard); },
                             Shape{32, 1, 28, 28}, 20);
}

TEST(SemiAutoParallel, LeNetWithAStrategyOnEveryOpTrains20StepsOnEightThreadRanks) {
  expect_equal_to_one_device([](bool shard) { return std::make_shared<ShardedLeNet>(shard); },
                             Shape{16, 1, 32, 32}, 20);
}

}  // namespace
}  // namespace cleave

// AUTO_PARALLEL with search_mode "recursive_programming" (NOTE [Recursive programming search] in
// cleave/parallel/search.h) on thread ranks: an MLP on 2, 3, 4, 6 and 8 ranks and LeNet (seed
// 000's network, examples/common/lenet.h) on 2 and 4, each rank reading its slice of the batch,
// give one process's losses; and the algorithm parameters and the cost-model context reach the
// search (set_algo_parameters, set_cost_model_context).
#include <gtest/gtest.h>

#include <cmath>

#include "cleave/cleave.h"
#include "cleave/core/random.h"
#include "common/lenet.h"
#include "testing/ranks.h"

namespace cleave {
namespace {

class Mlp : public nn::Cell {
 public:
  Mlp() : Cell("Mlp") {
    fc1 = register_module("fc1", std::make_shared<nn::Dense>(16, 48));
    fc2 = register_module("fc2", std::make_shared<nn::Dense>(48, 48));
    fc3 = register_module("fc3", std::make_shared<nn::Dense>(48, 8));
    relu = register_module("relu", std::make_shared<nn::ReLU>());
  }
  Tensor construct(const Tensor& x) override { return (*fc3)((*relu)((*fc2)((*relu)((*fc1)(x))))); }
  std::shared_ptr<nn::Dense> fc1, fc2, fc3;
  std::shared_ptr<nn::ReLU> relu;
};

std::vector<double> train_mlp(const Tensor& x, const Tensor& y, int steps) {
  std::shared_ptr<Mlp> net;
  {
    const SeededScope seeded(1);  // NOTE [Global generator]
    net = std::make_shared<Mlp>();
  }
  auto with_loss = std::make_shared<nn::WithLossCell>(net, std::make_shared<nn::MSELoss>());
  optim::TrainOneStep step(with_loss,
                           std::make_shared<optim::Momentum>(net->trainable_params(), 0.1, 0.9));
  std::vector<double> losses;
  for (int s = 0; s < steps; ++s) losses.push_back(step(x, y).item());
  return losses;
}

std::vector<double> train_lenet(const Tensor& x, const Tensor& y, int steps) {
  std::shared_ptr<examples::LeNet> net;
  {
    const SeededScope seeded(1);  // NOTE [Global generator]
    net = std::make_shared<examples::LeNet>(10, 1);
  }
  auto loss = std::make_shared<nn::SoftmaxCrossEntropyWithLogits>(/*sparse=*/true, "mean");
  auto with_loss = std::make_shared<nn::WithLossCell>(net, loss);
  optim::TrainOneStep step(with_loss,
                           std::make_shared<optim::Momentum>(net->trainable_params(), 0.01, 0.9));
  std::vector<double> losses;
  for (int s = 0; s < steps; ++s) losses.push_back(step(x, y).item());
  return losses;
}

using Train = std::vector<double> (*)(const Tensor&, const Tensor&, int);

// Trains with `train` in one process, then on `world` thread ranks in AUTO_PARALLEL with the
// recursive search, and compares every rank's losses; returns what rank 0 printed.
std::string expect_one_process_losses(Train train, const Tensor& x, const Tensor& y, int world,
                                      int steps) {
  runtime::reset_auto_parallel_context();
  const std::vector<double> single = train(x, y, steps);
  runtime::set_auto_parallel_context({.parallel_mode = runtime::AUTO_PARALLEL,
                                      .search_mode = "recursive_programming",
                                      .mirror_mean = true});
  std::vector<std::vector<double>> runs(static_cast<size_t>(world));
  ::testing::internal::CaptureStderr();
  testing::run_thread_job(world, [&](int rank) {
    const int64_t rows = x.shape()[0] / world;
    runs[static_cast<size_t>(rank)] = train(x.narrow_rows(rank * rows, rows).clone(),
                                            y.narrow_rows(rank * rows, rows).clone(), steps);
  });
  runtime::reset_auto_parallel_context();
  const std::string said = ::testing::internal::GetCapturedStderr();
  EXPECT_NE(said.find("recursive programming: "), std::string::npos) << said;
  for (int rank = 0; rank < world; ++rank) {
    const std::vector<double>& run = runs[static_cast<size_t>(rank)];
    EXPECT_EQ(run.size(), single.size());
    for (size_t s = 0; s < single.size() && s < run.size(); ++s) {
      EXPECT_NEAR(run[s], single[s], 1e-5 * std::abs(single[s]))
          << "world " << world << " rank " << rank << " step " << s;
    }
  }
  return said;
}

TEST(AutoParallelRecursive, MlpOnTwoThreeFourSixAndEightRanksTrainsAsOneProcess) {
  set_seed(3);
  const Tensor x = Tensor::uniform({24, 16});
  const Tensor y = Tensor::uniform({24, 8});
  for (int world : {2, 3, 4, 6, 8}) expect_one_process_losses(train_mlp, x, y, world, 3);
}

TEST(AutoParallelRecursive, LeNetOnTwoAndFourRanksTrainsAsOneProcess) {
  set_seed(5);
  const Tensor x = Tensor::uniform({8, 1, 32, 32});
  const Tensor y = Tensor::from_vector<int32_t>({3, 7, 1, 3, 0, 9, 2, 5}, Shape{8});
  for (int world : {2, 4}) expect_one_process_losses(train_lenet, x, y, world, 3);
}

// The algorithm parameters reach both searches, and what they admit trains as one process:
// strategies on fewer devices than the job's (fully_use_devices off) repeat their computation.
TEST(AutoParallelRecursive, AlgoParametersTrainAsOneProcessInBothSearches) {
  set_seed(3);
  const Tensor x = Tensor::uniform({24, 16});
  const Tensor y = Tensor::uniform({24, 8});
  for (const runtime::AlgoParameters& algo :
       {runtime::AlgoParameters{.fully_use_devices = false},
        runtime::AlgoParameters{.elementwise_op_strategy_follow = true},
        runtime::AlgoParameters{.enable_algo_approxi = true, .algo_approxi_epsilon = 0.5},
        runtime::AlgoParameters{.tensor_slice_align_enable = true, .tensor_slice_align_size = 4}}) {
    runtime::set_algo_parameters(algo);
    expect_one_process_losses(train_mlp, x, y, 4, 2);
  }
  runtime::reset_algo_parameters();
}

// costmodel_beta reaches the search: with communication free the predicted step costs less.
TEST(AutoParallelRecursive, CostModelBetaReachesTheSearch) {
  set_seed(3);
  const Tensor x = Tensor::uniform({24, 16});
  const Tensor y = Tensor::uniform({24, 8});
  auto predicted_ms = [&](double beta) {
    runtime::set_cost_model_context({.costmodel_beta = beta});
    const std::string said = expect_one_process_losses(train_mlp, x, y, 2, 1);
    runtime::reset_cost_model_context();
    const size_t at = said.find("predicted step cost ");
    EXPECT_NE(at, std::string::npos) << said;
    return at == std::string::npos ? 0.0 : std::stod(said.substr(at + 20));
  };
  const double free = predicted_ms(0), paid = predicted_ms(1);
  EXPECT_GT(free, 0);
  EXPECT_LT(free, paid);
}

// The cost-model context reaches the search: a capacity no plan fits is the search's error,
// naming the least memory any plan needs, for both searches.
TEST(AutoParallelRecursive, AnInfeasibleDeviceMemoryCapacityReachesBothSearches) {
  set_seed(3);
  const Tensor x = Tensor::uniform({8, 16});
  const Tensor y = Tensor::uniform({8, 8});
  for (const char* mode : {"dynamic_programming", "recursive_programming"}) {
    runtime::set_auto_parallel_context(
        {.parallel_mode = runtime::AUTO_PARALLEL, .search_mode = mode});
    runtime::set_cost_model_context({.device_memory_capacity = 16});
    std::vector<std::string> errors(2);
    testing::run_thread_job(2, [&](int rank) {
      try {
        train_mlp(x.narrow_rows(rank * 4, 4).clone(), y.narrow_rows(rank * 4, 4).clone(), 1);
      } catch (const Error& e) {
        errors[static_cast<size_t>(rank)] = e.what();
      }
    });
    runtime::reset_cost_model_context();
    runtime::reset_auto_parallel_context();
    for (const std::string& e : errors) {
      EXPECT_NE(e.find("no plan fits the memory capacity of 16 bytes per rank; the smallest "
                       "memory any plan needs is"),
                std::string::npos)
          << mode << ": " << e;
    }
  }
}

TEST(AutoParallelRecursive, AlgoParametersAndCostModelContextCheckTheirValues) {
  runtime::reset_algo_parameters();
  EXPECT_TRUE(runtime::get_algo_parameters().fully_use_devices);
  EXPECT_FALSE(runtime::get_algo_parameters().elementwise_op_strategy_follow);
  EXPECT_FALSE(runtime::get_algo_parameters().enable_algo_approxi);
  EXPECT_EQ(runtime::get_algo_parameters().algo_approxi_epsilon, 0.1);
  EXPECT_FALSE(runtime::get_algo_parameters().tensor_slice_align_enable);
  EXPECT_EQ(runtime::get_algo_parameters().tensor_slice_align_size, 16);
  auto message = [](const std::function<void()>& f) {
    try {
      f();
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(message([] {
              runtime::set_algo_parameters({.algo_approxi_epsilon = 0});
            }).find("set_algo_parameters: algo_approxi_epsilon is 0; expected a finite value > 0"),
            std::string::npos);
  EXPECT_NE(message([] { runtime::set_algo_parameters({.tensor_slice_align_size = 2048}); })
                .find("set_algo_parameters: tensor_slice_align_size is 2048; expected an element "
                      "count in [1, 1024]"),
            std::string::npos);
  EXPECT_NE(message([] { runtime::set_cost_model_context({.device_memory_capacity = -1}); })
                .find("set_cost_model_context: device_memory_capacity is -1; expected bytes per "
                      "rank >= 0"),
            std::string::npos);
  EXPECT_NE(message([] {
              runtime::set_cost_model_context({.costmodel_beta = -2});
            }).find("set_cost_model_context: costmodel_beta is -2; expected a finite weight >= 0"),
            std::string::npos);
  // A failed call keeps the previous values.
  runtime::set_algo_parameters({.fully_use_devices = false});
  message([] { runtime::set_algo_parameters({.tensor_slice_align_size = 0}); });
  EXPECT_FALSE(runtime::get_algo_parameters().fully_use_devices);
  runtime::reset_algo_parameters();
  EXPECT_TRUE(runtime::get_algo_parameters().fully_use_devices);
  EXPECT_EQ(runtime::get_cost_model_context().device_memory_capacity, 0);
  EXPECT_EQ(runtime::get_cost_model_context().costmodel_beta, 1);
  // recursive_programming is accepted in AUTO_PARALLEL ("not built yet" before).
  EXPECT_EQ(message([] {
              runtime::set_auto_parallel_context({.parallel_mode = runtime::AUTO_PARALLEL,
                                                  .search_mode = "recursive_programming"});
            }),
            "no error");
  runtime::reset_auto_parallel_context();
}

}  // namespace
}  // namespace cleave

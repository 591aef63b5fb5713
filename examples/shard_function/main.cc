// Seed 004's shard_function_example: functional operator sharding in PYNATIVE_MODE. One part of
// eager code runs as a compiled, sharded graph (cleave::shard, Cell::shard), the rest eagerly.
//
//   shard_function [--net net1|net2] [--steps N] [--batch B] [--width W] [--save-graphs]
//
// Net1: block1.shard(in_strategy=((1, n),), parameter_plan={'self.block1.dense2.weight': (n, 1)})
// with n the job's size (the seed writes 8); block2 and block3 stay eager. Net2: block1 through
// the functional shard (input split (n, 1)), block2 through Cell::shard ((1, n)), block3 eager.
// Both are trained with MSE against a fixed target and Momentum(0.01, 0.9) on one fixed batch;
// every rank passes and gets whole tensors (dataset_strategy "full_batch", set explicitly as the
// seed's function example does). Then dense_relu (matmul, bias_add, relu) runs through the
// functional shard with in_strategy ((n / 2, 2), None, None) (the seed's ((4, 2), None, None) on
// 8 devices) and `result.shape` is printed as the seed prints it. Started alone (world size 1)
// the program runs everything eagerly without shard: the reference the job must equal. Every
// rank prints the loss of each step and, at the end, a fingerprint of the whole parameters.
// --save-graphs writes every compiled block's stages (step_parallel_end: each operator's
// strategy) under saved_graph/rank_<R>/.
#include <fmt/core.h>
#include <fmt/ranges.h>

#include <CLI/CLI.hpp>
#include <chrono>
#include <cstdio>

#include "cleave/cleave.h"
#include "cleave/flags.h"
#include "common/shard_function.h"

namespace {

using namespace cleave;

std::string shape_text(const Shape& shape) {
  return fmt::format("({})", fmt::join(shape.dims(), ", "));
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"shard in PYNATIVE_MODE: one block compiled and sharded, the rest eager."};
  cleave::flags::setup(app, cleave::flags::cluster_variables());
  std::string net_name = "net1";
  int64_t steps = 20, batch = 32, width = 32;
  int64_t time_calls = 0;
  bool save_graphs = false;
  app.add_option("--net", net_name, "net1 (Cell::shard) or net2 (functional shard and Cell::shard)")
      ->check(cleave::flags::one_of({"net1", "net2"}));
  app.add_option("--steps", steps, "training steps")->check(cleave::flags::positive());
  app.add_option("--batch", batch, "batch size (divisible by the job's size for net2)")
      ->check(cleave::flags::positive());
  app.add_option("--width", width, "the blocks' width (divisible by the job's size)")
      ->check(cleave::flags::positive());
  app.add_option("--time-calls", time_calls,
                 "after training, time this many calls of block1 (forward and backward, the "
                 "compiled graphs warm) and print the time per call (bench/run.sh shard)")
      ->check(cleave::flags::non_negative());
  app.add_flag("--save-graphs", save_graphs, "write the compiled blocks' stages (save_graphs=2)");
  if (auto status = cleave::flags::parse(app, argc, argv)) return *status;
  try {
    init();
    const int rank = get_rank(), n = get_group_size();
    // 1. PyNative mode, and the parallel settings shard needs.
    runtime::set_context({.mode = runtime::PYNATIVE_MODE,
                          .save_graphs = save_graphs ? 2 : 0,
                          .save_graphs_path = fmt::format("saved_graph/rank_{}", rank)});
    if (n > 1) {
      runtime::set_auto_parallel_context({.parallel_mode = runtime::AUTO_PARALLEL,
                                          .search_mode = "sharding_propagation",
                                          .device_num = n,
                                          .dataset_strategy = "full_batch"});
    }
    // 2. The network, with its sharded parts when there are several ranks.
    set_seed(1);
    std::shared_ptr<examples::ShardNet> net;
    if (net_name == "net2" && n > 1) {
      net = std::make_shared<examples::Net2>(width, n);
    } else {
      net = std::make_shared<examples::ShardNet>(width);
      if (n > 1) examples::shard_net1(*net, n);
    }
    // 3. Training: MSE against a fixed target, Momentum.
    const Tensor x = Tensor::uniform({batch, width});
    const Tensor target = Tensor::uniform({batch, width});
    auto with_loss = std::make_shared<nn::WithLossCell>(net, std::make_shared<nn::MSELoss>());
    optim::TrainOneStep step(with_loss,
                             std::make_shared<optim::Momentum>(net->trainable_params(), 0.01, 0.9));
    for (int64_t s = 1; s <= steps; ++s) {
      fmt::print("epoch: 1 step: {}, loss is {:.10e}\n", s, step(x, target).item());
    }
    double sum = 0, sum_sq = 0;
    for (const Tensor& p : net->trainable_params()) {
      for (float v : p.to_vector<float>()) {
        sum += v;
        sum_sq += static_cast<double>(v) * v;
      }
    }
    fmt::print("rank {} of {}: parameters sum {:.10e} sum of squares {:.10e}\n", rank, n, sum,
               sum_sq);
    if (time_calls > 0) {
      // Steady state: block1 compiled already (sharded) or eager (one process).
      Tensor input = x.clone();
      input.set_requires_grad(true);
      const auto start = std::chrono::steady_clock::now();
      for (int64_t c = 0; c < time_calls; ++c) {
        autodiff::grad(ops::reduce_sum((*net->block1)(input)), {input});
      }
      const double seconds =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      fmt::print("rank {} of {}: block1 {:.4f} ms per call (forward and backward, {} calls)\n",
                 rank, n, 1e3 * seconds / static_cast<double>(time_calls), time_calls);
    }
    // 4. The function example: dense_relu with x split (n / 2, 2), weight and bias derived.
    const Tensor fx = Tensor::uniform({32, 128});
    const Tensor weight = Tensor::uniform({128, 10});
    const Tensor bias = Tensor::uniform({10});
    Tensor result;
    if (n > 1) {
      const std::vector<int64_t> x_strategy =
          n % 2 == 0 ? std::vector<int64_t>{n / 2, 2} : std::vector<int64_t>{n, 1};
      result = shard(examples::dense_relu, {x_strategy, std::nullopt, std::nullopt}, {},
                     "dense_relu")(fx, weight, bias);
    } else {
      result = examples::dense_relu(fx, weight, bias);
    }
    fmt::print("result.shape: {}\n", shape_text(result.shape()));
    double result_sum = 0;
    for (float v : result.to_vector<float>()) result_sum += v;
    fmt::print("rank {} of {}: result sum {:.10e}\n", rank, n, result_sum);
    std::fflush(stdout);
    release();
  } catch (const Error& e) {
    std::fprintf(stderr, "shard_function: %s\n", e.what());
    std::fflush(stderr);
    report_failure(e.what());
    return 1;
  }
  return 0;
}

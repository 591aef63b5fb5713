// Operator-level parallelism (SEMI_AUTO_PARALLEL): a network with a sharding strategy on every
// operator, trained across the ranks of a job and equal to one device.
//
//   semi_auto_parallel [--net mlp|lenet] [--strategy model|data] [--steps N] [--batch B]
//
// The networks are seed 002's MLP (784-512-512-10) and seed 000's LeNet-5 on 28x28 (32x32 for
// LeNet) images with 10 classes, trained with Momentum(0.01, 0.9) on fixed random batches
// (seeded: every rank and run sees the same data). Every rank reads the whole batch
// (dataset_strategy "full_batch"); the compiled step slices it. --strategy model shards the
// layers' operators by hand (NOTE below); --strategy data gives none, so every operator is data
// parallel (the default strategy). Started alone (world size 1) the program trains on one device
// without strategies: the reference the job must equal. Every rank prints LossMonitor's lines
// and, at the end, a fingerprint of the whole parameters (gathered from their slices), and the
// training rate ("samples/s", for bench/run.sh shard).
//
// NOTE [The model-parallel strategies] (8 devices; other counts scale the 8 down)
// MLP, batch 32: fc1 splits its output features 4 ways and the batch 2 ways (((2, 1), (4, 1)):
// MatMul's (i, k) and the (j, k) of its transposed weight); relu and fc2 follow that layout, and
// fc2 splits its reduction dimension 4 ways (((2, 4), (1, 4)): the output is a pending sum,
// AllReduce'd); fc3 and the loss are data parallel (8, 1).
// LeNet: conv1 splits the batch 4 ways and its 6 output channels 2 ways, the max-pooling follows;
// conv2 splits its 6 input channels 2 ways (a reduction) and the batch 4 ways; the dense layers
// as in the MLP (its one ReLU, used on 4-D and 2-D tensors, stays data parallel).
#include <fmt/core.h>

#include <CLI/CLI.hpp>
#include <chrono>
#include <cstdio>

#include "cleave/cleave.h"
#include "cleave/flags.h"
#include "cleave/runtime/sharded_parameters.h"
#include "common/lenet.h"
#include "common/mlp.h"

namespace {

using namespace cleave;

// NOTE [The model-parallel strategies], for n devices (n divides 8).
// The ReLUs get strategies when given (LeNet's one ReLU serves 4-D and 2-D tensors, so it keeps
// the default).
void shard_dense(nn::Dense& fc1, nn::ReLU* relu1, nn::Dense& fc2, nn::ReLU* relu2, nn::Dense& fc3,
                 int64_t n) {
  const int64_t b = n >= 2 ? 2 : 1, m = n / b;  // batch and model splits
  fc1.matmul.shard({{b, 1}, {m, 1}});
  fc1.bias_add.shard({{b, m}, {m}});
  if (relu1 != nullptr) relu1->relu.shard({{b, m}});
  fc2.matmul.shard({{b, m}, {1, m}});
  fc2.bias_add.shard({{n, 1}, {1}});
  if (relu2 != nullptr) relu2->relu.shard({{n, 1}});
  fc3.matmul.shard({{n, 1}, {1, 1}});
  fc3.bias_add.shard({{n, 1}, {1}});
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{
      "SEMI_AUTO_PARALLEL: a network with a strategy on every operator, equal to one "
      "device."};
  cleave::flags::setup(app, cleave::flags::cluster_variables());
  std::string net_name = "mlp", strategy = "model";
  int64_t steps = 20, batch = 32, per_print = 1;
  app.add_option("--net", net_name, "mlp or lenet")->check(cleave::flags::one_of({"mlp", "lenet"}));
  app.add_option("--strategy", strategy,
                 "model (the NOTE's strategies) or data (none: every "
                 "operator data parallel)")
      ->check(cleave::flags::one_of({"model", "data"}));
  app.add_option("--steps", steps, "training steps")->check(cleave::flags::positive());
  app.add_option("--batch", batch, "global batch size (a multiple of 8)")
      ->check(cleave::flags::positive());
  app.add_option("--per-print-times", per_print, "LossMonitor prints every this many steps")
      ->check(cleave::flags::non_negative());
  if (auto status = cleave::flags::parse(app, argc, argv)) return *status;
  try {
    init();
    const int rank = get_rank(), n = get_group_size();
    runtime::set_context({.mode = runtime::GRAPH_MODE});
    if (n > 1) {
      runtime::set_auto_parallel_context(
          {.parallel_mode = runtime::SEMI_AUTO_PARALLEL, .dataset_strategy = "full_batch"});
    }
    set_seed(1);
    const bool lenet = net_name == "lenet";
    const int64_t side = lenet ? 32 : 28;
    std::shared_ptr<nn::Cell> net;
    if (lenet) {
      auto l = std::make_shared<examples::LeNet>();
      if (n > 1 && strategy == "model") {
        const int64_t b = n >= 4 ? 4 : n, c = n / b;  // batch and channel splits of the convs
        l->conv1->conv2d.shard({{b, 1, 1, 1}, {c, 1, 1, 1}});
        l->max_pool2d->max_pool.shard({{b, c, 1, 1}});
        l->conv2->conv2d.shard({{b, c, 1, 1}, {1, c, 1, 1}});
        shard_dense(*l->fc1, nullptr, *l->fc2, nullptr, *l->fc3, n);
      }
      net = l;
    } else {
      auto m = std::make_shared<examples::Mlp>();
      if (n > 1 && strategy == "model") {
        m->flatten->flatten.shard({{n, 1, 1, 1}});
        shard_dense(*m->fc1, m->relu1.get(), *m->fc2, m->relu2.get(), *m->fc3, n);
      }
      net = m;
    }
    auto loss = std::make_shared<nn::SoftmaxCrossEntropyWithLogits>(/*sparse=*/true, "mean");
    auto opt = std::make_shared<optim::Momentum>(net->trainable_params(), 0.01, 0.9);
    // Fixed random batches: the same on every rank and run.
    std::vector<dataset::Row> rows;
    for (int64_t s = 0; s < steps; ++s) {
      rows.push_back({Tensor::normal({batch, 1, side, side}),
                      ops::cast(Tensor::uniform({batch}, 0, 10), DType::kInt32)});
    }
    auto data = dataset::GeneratorDataset([&](int64_t i) { return rows[static_cast<size_t>(i)]; },
                                          steps, {"image", "label"});
    train::Model model(net, loss, opt);
    const auto start = std::chrono::steady_clock::now();
    model.train(1, data, {std::make_shared<train::LossMonitor>(per_print)});
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    double sum = 0, sum_sq = 0;
    for (const Tensor& p : net->trainable_params()) {
      for (float v : runtime::gather_parameter(p).to_vector<float>()) {
        sum += v;
        sum_sq += static_cast<double>(v) * v;
      }
    }
    fmt::print("rank {} of {}: parameters sum {:.10e} sum of squares {:.10e}\n", rank, n, sum,
               sum_sq);
    fmt::print("rank {} of {}: {:.1f} samples/s ({} steps of {} in {:.3f} s, compile included)\n",
               rank, n, static_cast<double>(steps * batch) / seconds, steps, batch, seconds);
    std::fflush(stdout);
    release();
  } catch (const Error& e) {
    std::fprintf(stderr, "semi_auto_parallel: %s\n", e.what());
    std::fflush(stderr);
    report_failure(e.what());  // the whole job stops at once with this error
    return 1;
  }
  return 0;
}

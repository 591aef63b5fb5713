// DATA_PARALLEL training throughput (bench/run.sh dp): one process of a job started by cleave-run
// (or alone, for the one-process row) trains MODEL on a fixed random batch of BATCH images per
// rank in GRAPH_MODE, DATA_PARALLEL with mirror_mean when the job has several ranks, one thread.
//
//   dp_bench MODEL BATCH SECONDS [BUCKET_CAP_MB]
//     MODEL: lenet (1x32x32), resnet_small or resnet50 (3x32x32), 10 classes
//
// With DP_BENCH_PARALLEL_OPTIMIZER=1 the job runs with enable_parallel_optimizer (MindSpore's
// default threshold of 64 KB: smaller parameters stay replicated).
//
// After 3 warm-up steps it times steps for SECONDS, then times an AllReduce (mean) of one buffer
// as large as all the gradients together on the world group, alone. Rank 0 prints
//   ROW dp_<MODEL>_b<BATCH>_np<N> samples_per_s=<N * BATCH * steps / s> step_ms=<ms>
//       grad_mb=<MiB> allreduce_ms=<ms> waited_ms=<ms>
//       waited_max_ms=<ms> state_mib=<MiB> param_mib=<MiB>
// state_mib and param_mib being the bytes of optimizer state and of parameters rank 0 holds.
// (one line), waited_ms being the time per step the executor spent blocked on gradient
// AllReduces (Executor::communication_wait_seconds: waiting for those in flight and running
// those that run inline) on the rank that blocked least in that step: the all-reduce time the
// backward pass did not hide; waited_max_ms the same on the rank that blocked most, which adds the
// ranks' skew (NOTE [Waits and skew]).
#include <fmt/core.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "cleave/cleave.h"
#include "cleave/runtime/sharded_parameters.h"
#include "common/lenet.h"
#include "common/resnet.h"

namespace {

using namespace cleave;
using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 4) {
    std::fprintf(stderr,
                 "usage: dp_bench lenet|resnet_small|resnet50 BATCH SECONDS [BUCKET_CAP_MB]\n");
    return 2;
  }
  const std::string model = argv[1];
  const int64_t batch = std::atoll(argv[2]);
  const double seconds = std::atof(argv[3]);
  const double bucket_cap_mb = argc > 4 ? std::atof(argv[4]) : 25.0;
  if (batch <= 0 || seconds <= 0 ||
      (model != "lenet" && model != "resnet_small" && model != "resnet50")) {
    std::fprintf(stderr,
                 "dp_bench: bad arguments; usage: dp_bench lenet|resnet_small|resnet50 "
                 "BATCH>0 SECONDS>0 [BUCKET_CAP_MB]\n");
    return 2;
  }
  try {
    runtime::set_context({.mode = runtime::GRAPH_MODE});
    init();
    const int rank = get_rank(), world = get_group_size();
    if (world > 1) {
      const char* po = std::getenv("DP_BENCH_PARALLEL_OPTIMIZER");
      runtime::set_auto_parallel_context(
          {.parallel_mode = runtime::DATA_PARALLEL,
           .mirror_mean = true,
           .parameter_broadcast = true,
           .bucket_cap_mb = bucket_cap_mb,
           .enable_parallel_optimizer = po != nullptr && std::string(po) == "1"});
    }
    set_seed(1);
    nn::CellPtr net;
    int64_t channels = 3;
    if (model == "lenet") {
      net = std::make_shared<examples::LeNet>(10);
      channels = 1;
    } else if (model == "resnet_small") {
      net = examples::resnet_small(10);
    } else {
      net = examples::resnet50(batch, 10);
    }
    const Tensor x = Tensor::normal({batch, channels, 32, 32});
    std::vector<int32_t> labels(static_cast<size_t>(batch));
    for (int64_t i = 0; i < batch; ++i)
      labels[static_cast<size_t>(i)] = static_cast<int32_t>(i % 10);
    const Tensor y = Tensor::from_vector(labels, Shape{batch});
    auto loss = std::make_shared<nn::WithLossCell>(
        net, std::make_shared<nn::SoftmaxCrossEntropyWithLogits>(true, "mean"));
    auto opt = std::make_shared<optim::Momentum>(net->trainable_params(), 0.01, 0.9);
    optim::TrainOneStep step(loss, opt);
    for (int i = 0; i < 3; ++i) step(x, y);

    // Every rank runs the same number of steps: rank 0 decides when the time is up.
    int64_t steps = 0;
    const Tensor go = Tensor::ones({1});
    std::shared_ptr<comm::ProcessGroup> world_group = comm::get_group(comm::kWorldGroup);
    std::vector<double> waits;  // per step, seconds blocked on AllReduces
    const auto start = Clock::now();
    for (;;) {
      const double waited_before = step.last_executor()->communication_wait_seconds();
      step(x, y);
      waits.push_back(step.last_executor()->communication_wait_seconds() - waited_before);
      ++steps;
      if (steps % 4 == 0 && world_group != nullptr && world_group->size() > 1) {
        float* flag = go.data<float>();
        flag[0] = rank == 0 && seconds_since(start) >= seconds ? 0.0f : 1.0f;
        world_group->broadcast(go, 0);
        if (flag[0] == 0.0f) break;
      } else if ((world_group == nullptr || world_group->size() == 1) &&
                 seconds_since(start) >= seconds) {
        break;
      }
    }
    const double elapsed = seconds_since(start);
    // NOTE [Waits and skew]: a rank also blocks on a bucket while its peer is still computing
    // the gradients (the peer's compute, not communication). In each step the rank that blocked
    // least is the one whose peers were ready first, so the per-step minimum over the ranks is
    // the all-reduce time no backward computation hid; the maximum adds the ranks' skew.
    const Tensor least = Tensor::from_vector(waits), most = Tensor::from_vector(waits);
    if (world_group != nullptr && world_group->size() > 1) {
      world_group->all_reduce(least, comm::ReduceOp::kMin);
      world_group->all_reduce(most, comm::ReduceOp::kMax);
    }
    double waited_ms = 0, waited_max_ms = 0;
    for (double w : least.to_double_vector()) waited_ms += w * 1000 / static_cast<double>(steps);
    for (double w : most.to_double_vector()) waited_max_ms += w * 1000 / static_cast<double>(steps);

    int64_t grad_elements = 0;
    for (const Tensor& p : net->trainable_params()) {  // whole: the parallel optimizer splits
      const auto shard = runtime::parameter_shard(p);
      grad_elements += shard ? shard->global.shape.numel() : p.numel();
    }
    double allreduce_ms = 0;
    if (world_group != nullptr && world_group->size() > 1) {
      const Tensor flat = Tensor::ones({grad_elements});
      for (int i = 0; i < 2; ++i) world_group->all_reduce(flat, comm::ReduceOp::kMean);
      const int reps = 10;
      const auto t = Clock::now();
      for (int i = 0; i < reps; ++i) world_group->all_reduce(flat, comm::ReduceOp::kMean);
      allreduce_ms = seconds_since(t) * 1000 / reps;
    }
    double state_bytes = 0, param_bytes = 0;
    for (const auto& [name, t] : opt->state()) state_bytes += static_cast<double>(t.nbytes());
    for (const Tensor& p : net->trainable_params()) param_bytes += static_cast<double>(p.nbytes());
    if (rank == 0) {
      fmt::print(
          "dp_{}_b{}_np{} samples_per_s={:.1f} step_ms={:.3f} grad_mb={:.2f} allreduce_ms={:.3f} "
          "waited_ms={:.3f} waited_max_ms={:.3f} state_mib={:.3f} param_mib={:.3f}\n",
          model, batch, world, static_cast<double>(world * batch * steps) / elapsed,
          elapsed * 1000 / static_cast<double>(steps),
          static_cast<double>(grad_elements) * 4 / (1 << 20), allreduce_ms, waited_ms,
          waited_max_ms, state_bytes / (1 << 20), param_bytes / (1 << 20));
      std::fflush(stdout);
    }
    release();
  } catch (const Error& e) {
    std::fprintf(stderr, "dp_bench: %s\n", e.what());
    return 1;
  }
  return 0;
}

// LeNet-5 trained on thread ranks with cells placed on workers, and on one process, for the
// partition tests (partition_test.cc, partition_slow_test.cc): placed training must equal one
// process. Each thread rank has its own copy of the network, initialised from the same seed, as
// every worker process would; ranks run over Gloo (testing::run_thread_job).
#pragma once

#include <gtest/gtest.h>
#include <pthread.h>
#include <sched.h>

#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "cleave/cleave.h"
#include "cleave/runtime/core_binding.h"
#include "cleave/runtime/rpc.h"
#include "testing/env.h"
#include "testing/graph_mode.h"
#include "testing/models.h"
#include "testing/ranks.h"

namespace cleave::testing {

struct Batch {
  Tensor data, label;
};

inline std::vector<Batch> lenet_batches(int steps, int64_t batch) {
  set_seed(7);
  std::vector<Batch> out;
  for (int i = 0; i < steps; ++i) {
    Tensor label = Tensor::empty({batch}, DType::kInt32);
    for (int64_t k = 0; k < batch; ++k)
      label.data<int32_t>()[k] = static_cast<int32_t>((i * 7 + k * 3) % 10);
    // Learnable: each image is shifted by its label.
    Tensor data = Tensor::normal({batch, 1, 32, 32});
    float* x = data.data<float>();
    for (int64_t k = 0; k < batch; ++k) {
      for (int64_t e = 0; e < 32 * 32; ++e)
        x[k * 32 * 32 + e] += 0.3f * static_cast<float>(label.data<int32_t>()[k] - 4.5);
    }
    out.push_back({data, label});
  }
  return out;
}

// The seed's placement: fc1 -> 0, fc2 -> 1, fc3 -> 2, conv1 -> 3, conv2 -> 4.
inline void place_like_the_seed(testing::LeNet5& net) {
  net.fc1->place("MS_WORKER", 0);
  net.fc2->place("MS_WORKER", 1);
  net.fc3->place("MS_WORKER", 2);
  net.conv1->place("MS_WORKER", 3);
  net.conv2->place("MS_WORKER", 4);
}

struct TrainingRun {
  std::vector<double> losses;
  std::map<std::string, std::vector<double>> params;  // on the rank that owns them
  std::map<std::string, std::vector<double>> initial;
  std::vector<std::vector<bool>> inputs_read;  // per rank: TrainOneStep::inputs_read()
  int sends = 0;                               // RpcSend nodes of all ranks' graphs
  int zero_copy_buffers = 0;  // of all ranks' executors (NOTE [Zero-copy cut edges])
  std::vector<runtime::CoreBinding> bindings;  // per rank (NOTE [Placed workers on few cores])
  std::vector<int> affinity;  // per rank: how many cores its thread may run on afterwards
  // With share_state: per rank, the whole training state (train::train_state_tensors) after
  // TrainOneStep::share_placed_state (NOTE [Saving a placed network]).
  std::vector<std::map<std::string, std::vector<double>>> state;
};

using Placer = std::function<void(testing::LeNet5&)>;

// Trains LeNet-5 (Momentum 0.01/0.9, seed 1) on `batches`; on `world` thread ranks with `place`
// applied when world > 1. Returns rank 0's losses and each parameter as held by the rank that
// updates it (the rank of its node in the partition).
inline TrainingRun train_lenet(int world, const Placer& place, const std::vector<Batch>& batches,
                               int micro_batches = 1, bool share_state = false) {
  std::mutex counts_mutex;
  testing::ModeGuard graph(runtime::GRAPH_MODE);
  runtime::set_auto_parallel_context({.pipeline_micro_batches = micro_batches});
  runtime::rpc_send_op();  // registers the primitives before the threads look ops up
  std::vector<std::shared_ptr<testing::LeNet5>> nets;
  for (int r = 0; r < world; ++r) {
    set_seed(1);
    nets.push_back(std::make_shared<testing::LeNet5>());
  }
  TrainingRun run;
  run.inputs_read.resize(world);
  run.bindings.resize(world);
  run.affinity.resize(world);
  run.state.resize(world);
  std::vector<std::map<std::string, std::vector<double>>> owned(world);
  auto train = [&](int rank) {
    testing::LeNet5& net = *nets[rank];
    if (world > 1) place(net);
    auto loss_fn = std::make_shared<nn::SoftmaxCrossEntropyWithLogits>(true, "mean");
    auto with_loss = std::make_shared<nn::WithLossCell>(nets[rank], loss_fn);
    std::map<std::string, std::vector<double>> initial;
    for (const auto& [name, p] : with_loss->parameters_and_names())
      initial[name] = p.to_double_vector();
    auto opt = std::make_shared<optim::Momentum>(net.trainable_params(), 0.01, 0.9);
    optim::TrainOneStep step(with_loss, opt);
    for (const Batch& b : batches) {
      const Tensor loss = step(b.data, b.label);
      if (rank == 0) {
        EXPECT_TRUE(loss.defined());
        run.losses.push_back(loss.item());
      } else {
        EXPECT_FALSE(loss.defined()) << "rank " << rank << " returned a loss";
      }
    }
    EXPECT_EQ(step.placed(), world > 1) << "rank " << rank;
    run.inputs_read[rank] = step.inputs_read();
    run.bindings[rank] = runtime::core_binding();
    if (share_state) {
      const train::NamedTensors state = train::train_state_tensors(*with_loss, opt.get(), {});
      std::vector<Tensor> values;
      for (const auto& [name, t] : state) values.push_back(t);
      step.share_placed_state(values);
      for (const auto& [name, t] : state) run.state[rank][name] = t.to_double_vector();
    }
    cpu_set_t set;
    CPU_ZERO(&set);
    if (pthread_getaffinity_np(pthread_self(), sizeof(set), &set) == 0)
      run.affinity[rank] = CPU_COUNT(&set);
    // Which parameters this rank updated: those bound in its graph next to an update op.
    const ir::Graph& g = step.last_executor()->graph();
    {
      std::lock_guard<std::mutex> lock(counts_mutex);
      run.zero_copy_buffers += step.last_executor()->zero_copy_buffers();
      for (const ir::Node& n : g.nodes) run.sends += n.is_op() && n.op->name == "RpcSend";
    }
    for (const ir::Node& n : g.nodes) {
      if (!n.is_op() || !n.op->mutates_inputs) continue;
      const ir::Node& p = g.nodes[n.inputs[0].node];
      owned[rank][p.name] = p.value.to_double_vector();
    }
    if (rank == 0) {
      for (const auto& [name, p] : with_loss->parameters_and_names())
        run.initial[name] = initial[name];
    }
  };
  if (world == 1) {
    train(0);
  } else {
    testing::run_thread_job(world, train, "gloo");
  }
  for (auto& m : owned) {
    for (auto& [name, values] : m) {
      EXPECT_EQ(run.params.count(name), 0u) << name << " is updated on two ranks";
      run.params[name] = values;
    }
  }
  runtime::set_auto_parallel_context({});
  return run;
}

// The largest rel_diff of two equally long lists.
inline double worst_rel_diff(const std::vector<double>& got, const std::vector<double>& want) {
  double worst = 0;
  for (size_t k = 0; k < want.size(); ++k) worst = std::max(worst, rel_diff(got[k], want[k]));
  return worst;
}

// The seed's placement on 5 thread-ranks, trained with the environment variable `var` set to
// `value`.
inline TrainingRun train_seed_placement_with(const char* var, const char* value,
                                             const std::vector<Batch>& batches, int micro_batches) {
  testing::ScopedEnv env(var, value);
  return train_lenet(5, place_like_the_seed, batches, micro_batches);
}

// Placed training equals one process: the same losses and each parameter where it is updated,
// within `tolerance` (rel_diff), and training moved the parameters.
inline void expect_same(const TrainingRun& placed, const TrainingRun& single, double tolerance) {
  ASSERT_EQ(placed.losses.size(), single.losses.size());
  for (size_t i = 0; i < single.losses.size(); ++i) {
    EXPECT_LE(rel_diff(placed.losses[i], single.losses[i]), tolerance)
        << "step " << i << ": " << placed.losses[i] << " vs " << single.losses[i];
  }
  ASSERT_EQ(placed.params.size(), single.params.size());
  double moved = 0;  // training changed the parameters (the comparison is not of initial values)
  for (const auto& [name, values] : single.params) {
    const std::vector<double>& before = single.initial.at(name);
    for (size_t k = 0; k < values.size(); ++k)
      moved = std::max(moved, std::abs(values[k] - before[k]));
  }
  EXPECT_GT(moved, 1e-4);
  for (const auto& [name, values] : single.params) {
    auto it = placed.params.find(name);
    ASSERT_NE(it, placed.params.end()) << name << " is updated on no rank";
    ASSERT_EQ(it->second.size(), values.size());
    EXPECT_LE(worst_rel_diff(it->second, values), tolerance) << name;
  }
}

}  // namespace cleave::testing

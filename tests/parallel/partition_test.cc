// Distributed graph partition (cleave/parallel/partition.h): the per-rank graphs of traced steps
// read from text (tests/parallel/golden/*_step.ir) and cut with no thread or process, compared
// with golden per-rank texts; placement rules and errors; and, on thread ranks over Gloo
// (testing::run_thread_job), placed training equals one process and micro-batching equals the
// unpipelined step. Each thread rank has its own copy of the network, initialised from the same
// seed, as every worker process would.
#include "cleave/parallel/partition.h"

#include <gtest/gtest.h>
#include <pthread.h>
#include <sched.h>

#include <filesystem>
#include <mutex>
#include <regex>
#include <set>

#include "cleave/cleave.h"
#include "cleave/comm/group_registry.h"
#include "cleave/ir/dump.h"
#include "cleave/ir/parse.h"
#include "cleave/runtime/core_binding.h"
#include "cleave/runtime/rpc.h"
#include "data/data_files.h"
#include "testing/env.h"
#include "testing/golden.h"
#include "testing/gradcheck.h"
#include "testing/graph_mode.h"
#include "testing/models.h"
#include "testing/ranks.h"

namespace cleave {
namespace {

using testing::rel_diff;

// ---- partition() on traced steps read from text: golden per-rank texts, rules, errors ----
//
// The steps under tests/parallel/golden were traced once as TrainOneStep traces them (one SGD
// step, forward, graph autodiff and the update, nodes numbered as traced):
//   two_stage_step.ir       Dense(4, 3), ReLU, Dense(3, 2), MSELoss, SGD(0.1), batch 2; fc1 on
//                           worker 1 (its backward ops carry the placement, as autodiff copies it)
//   two_stage_fc2_step.ir   the same with fc2 on worker 1
//   shared_weight_step.ir   SharedWeight below: one (6, 6) weight used by a MatMul on worker 1 and
//                           one on worker 0, MSELoss, SGD(0.1), batch 5

namespace fs = std::filesystem;

const fs::path kGolden = fs::path(CLEAVE_TESTS_DIR) / "parallel/golden";

// The traced step of tests/parallel/golden/<file>, with the placement of its placed ops
// ("role: MS_WORKER, rank: 1") replaced by `placement` when one is given.
ir::Graph read_step(const std::string& file, const std::string& placement = "") {
  std::string text = testing::read_text(kGolden / file);
  if (!placement.empty()) {
    text = std::regex_replace(text, std::regex("role: MS_WORKER, rank: 1"), placement);
  }
  return ir::parse_text(text, file).graph;
}

// Partition options for `world` workers; the per-step part of `g` starts at its first node in the
// optimizer's scope.
parallel::PartitionOptions options(const ir::Graph& g, int world, int micro = 1) {
  parallel::PartitionOptions o;
  o.world_size = world;
  o.micro_batches = micro;
  for (size_t i = 0; i < g.nodes.size() && o.step_begin < 0; ++i) {
    if (g.nodes[i].scope.rfind("Default/optimizer", 0) == 0) o.step_begin = static_cast<int>(i);
  }
  o.send_op = &runtime::rpc_send_op();
  o.recv_op = &runtime::rpc_recv_op();
  return o;
}

// Each rank's graph against tests/parallel/golden/<name>_rank<r>.ir (NOTE [Golden files] in
// testing/golden.h); each verifies.
void expect_golden(const parallel::Partition& p, const std::string& name) {
  for (size_t r = 0; r < p.ranks.size(); ++r) {
    EXPECT_TRUE(testing::matches_golden(ir::dump_text(p.ranks[r]),
                                        kGolden / fmt::format("{}_rank{}.ir", name, r)))
        << "rank " << r;
    ir::verify(p.ranks[r]);
  }
}

// One line per cut edge: "<producer>: <src> -> <dst>, tag <tag>, <bytes> bytes".
std::string cuts_text(const parallel::Partition& p) {
  std::string out;
  for (const parallel::CutEdge& c : p.cuts) {
    out += fmt::format("{}: {} -> {}, tag {}, {} bytes\n", c.value, c.src_rank, c.dst_rank, c.tag,
                       c.bytes);
  }
  return out;
}

// One line per rank: the instance names of the ops of `g` it runs, in the order of `g`.
std::string ops_by_rank(const ir::Graph& g, const parallel::Partition& p) {
  std::string out;
  for (size_t r = 0; r < p.ranks.size(); ++r) {
    out += fmt::format("{}:", r);
    for (size_t i = 0; i < g.nodes.size(); ++i) {
      if (g.nodes[i].is_op() && p.node_rank[i] == static_cast<int>(r)) {
        out += " " + g.nodes[i].name;
      }
    }
    out += "\n";
  }
  return out;
}

TEST(Partition, GoldenPerRankGraphs) {
  const ir::Graph g = read_step("two_stage_step.ir");
  const parallel::Partition p = parallel::partition(g, options(g, 2));
  // fc1 and its gradient and update on 1; relu, fc2, the loss and the rest on 0.
  expect_golden(p, "two_stage");
  // Forward: fc1's output 1 -> 0; backward: its gradient 0 -> 1. Tags are distinct.
  EXPECT_EQ(cuts_text(p),
            "fc1.biasadd: 1 -> 0, tag 0, 24 bytes\n"
            "relu.relu.grad.relugrad: 0 -> 1, tag 1, 24 bytes\n");
}

TEST(Partition, GoldenMicroBatchedGraphs) {
  // Two micro-batches of one row: rank 0 reads data_0, label_0, data_1, label_1; the loss is
  // averaged where it is computed (rank 0), the gradients of fc2 on rank 1.
  const ir::Graph g = read_step("two_stage_fc2_step.ir");
  expect_golden(parallel::partition(g, options(g, 2, 2)), "two_stage_mb2");
}

TEST(Partition, UnlabelledOpsRunOnWorkerZero) {
  // fc2 on worker 2 of 3: its forward, backward and updates there; every unplaced op on worker 0;
  // worker 1 owns nothing and sends or receives nothing.
  const ir::Graph g = read_step("two_stage_fc2_step.ir", "role: MS_WORKER, rank: 2");
  const parallel::Partition p = parallel::partition(g, options(g, 3));
  EXPECT_EQ(ops_by_rank(g, p),
            "0: fc1.matmul fc1.biasadd relu.relu _loss_fn.mse _loss_fn.reducemean "
            "_loss_fn.reducemean.grad.reshape _loss_fn.reducemean.grad.mul "
            "_loss_fn.reducemean.grad.broadcastto _loss_fn.mse.grad.neg _loss_fn.mse.grad.add "
            "_loss_fn.mse.grad.mul _loss_fn.mse.grad.mul relu.relu.grad.relugrad "
            "fc1.biasadd.grad.reducesum fc1.matmul.grad.matmul optimizer.sgd optimizer.sgd_1\n"
            "1:\n"
            "2: fc2.matmul fc2.biasadd fc2.biasadd.grad.reducesum fc2.matmul.grad.matmul "
            "fc2.matmul.grad.matmul optimizer.sgd_2 optimizer.sgd_3\n");
  EXPECT_EQ(p.ranks[1].num_ops(), 0);
}

TEST(Partition, ParameterUsedOnTwoRanksIsSentByItsFirstUser) {
  // w's first user (the MatMul on worker 1) owns it: worker 1 sends w to worker 0 at the start of
  // the step, receives worker 0's gradient contribution, sums and applies the update.
  const ir::Graph g = read_step("shared_weight_step.ir");
  const parallel::Partition p = parallel::partition(g, options(g, 2));
  expect_golden(p, "shared_weight");
  // w and the MatMul's output forward; the other MatMul's contribution to w's gradient (6 x 6)
  // and the gradient of the first MatMul's output (5 x 6) back.
  EXPECT_EQ(cuts_text(p),
            "_backbone.w: 1 -> 0, tag 0, 144 bytes\n"
            "_backbone.matmul: 1 -> 0, tag 1, 120 bytes\n"
            "_backbone.matmul_1.grad.matmul: 0 -> 1, tag 2, 144 bytes\n"
            "_backbone.relu.grad.relugrad: 0 -> 1, tag 3, 120 bytes\n");
}

TEST(Partition, RejectsABadRoleOrRank) {
  const ir::Graph g = read_step("two_stage_fc2_step.ir", "role: MS_WORKER, rank: 3");
  EXPECT_ERROR(parallel::partition(g, options(g, 3)),
               "is placed on MS_WORKER rank 3; expected a rank in [0, 3)", "fc2-Dense");
  const ir::Graph sched = read_step("two_stage_fc2_step.ir", "role: MS_SCHED, rank: 0");
  EXPECT_ERROR(parallel::partition(sched, options(sched, 3)), "is placed on role 'MS_SCHED'",
               "only workers run graph ops");
  EXPECT_ERROR(parallel::partition(g, options(g, 3, 0)), "micro_batches is 0");
  nn::Dense dense(4, 3);
  EXPECT_ERROR(dense.place("MS_SCHED", 0), "role is 'MS_SCHED'", "only workers run graph ops");
}

// ---- training on thread ranks equals one process ----

struct Batch {
  Tensor data, label;
};

std::vector<Batch> lenet_batches(int steps, int64_t batch) {
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
void place_like_the_seed(testing::LeNet5& net) {
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
TrainingRun train_lenet(int world, const Placer& place, const std::vector<Batch>& batches,
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
double worst_rel_diff(const std::vector<double>& got, const std::vector<double>& want) {
  double worst = 0;
  for (size_t k = 0; k < want.size(); ++k) worst = std::max(worst, rel_diff(got[k], want[k]));
  return worst;
}

// The seed's placement on 5 thread-ranks, trained with the environment variable `var` set to
// `value`.
TrainingRun train_seed_placement_with(const char* var, const char* value,
                                      const std::vector<Batch>& batches, int micro_batches) {
  testing::ScopedEnv env(var, value);
  return train_lenet(5, place_like_the_seed, batches, micro_batches);
}

void expect_same(const TrainingRun& placed, const TrainingRun& single, double tolerance) {
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

TEST(Partition, SeedPlacementTrainsLikeOneProcess) {
  const auto batches = lenet_batches(100, 16);
  const TrainingRun single = train_lenet(1, {}, batches);
  const TrainingRun placed = train_lenet(5, place_like_the_seed, batches);
  expect_same(placed, single, 1e-5);
  // Every cut edge of the seed carries a whole op output: both of its ends are bound to the
  // mailbox slot, none is copied (NOTE [Zero-copy cut edges] in cleave/runtime/executor.h).
  EXPECT_EQ(placed.sends, 14);
  EXPECT_EQ(placed.zero_copy_buffers, 2 * placed.sends);
  // Which of (data, label) each rank's part reads (NOTE [Workers that read no batch] in
  // src/train/model.cc): the loss on rank 0 reads the label, conv1 on rank 3 the data.
  EXPECT_EQ(single.inputs_read[0], (std::vector<bool>{true, true}));
  const std::vector<std::vector<bool>> expected = {
      {false, true}, {false, false}, {false, false}, {true, false}, {false, false}};
  EXPECT_EQ(placed.inputs_read, expected);
}

TEST(Partition, CutEdgesOverTheGroupTransport) {
  // The same run with shared memory off (CLEAVE_RPC_SHM=0): RpcSend/RpcRecv over Gloo, with
  // receives posted at the start of each run.
  const auto batches = lenet_batches(10, 16);
  const TrainingRun single = train_lenet(1, {}, batches);
  const TrainingRun placed = train_seed_placement_with("CLEAVE_RPC_SHM", "0", batches, 2);
  expect_same(placed, single, 1e-4);
  EXPECT_EQ(placed.zero_copy_buffers, 0);
}

TEST(Partition, CopiedMessagesTrainAlike) {
  // CLEAVE_RPC_ZERO_COPY=0: the shared-memory mailboxes with a copy on each side of every edge.
  const auto batches = lenet_batches(10, 16);
  const TrainingRun single = train_lenet(1, {}, batches);
  const TrainingRun copied = train_seed_placement_with("CLEAVE_RPC_ZERO_COPY", "0", batches, 2);
  expect_same(copied, single, 1e-4);
  EXPECT_EQ(copied.zero_copy_buffers, 0);
  EXPECT_GT(copied.sends, 0);
  // How long a wait polls (NOTE [Waiting for a message]): 0 (sleep at once) trains alike; a value
  // that is not a number of microseconds is an error naming the variable.
  testing::ScopedEnv spin("CLEAVE_RPC_SPIN_US", "0");
  const TrainingRun sleeping = train_lenet(5, place_like_the_seed, batches);
  expect_same(sleeping, single, 1e-5);
  spin.set("CLEAVE_RPC_SPIN_US", "20ms");
  EXPECT_ERROR(train_lenet(5, place_like_the_seed, batches), "CLEAVE_RPC_SPIN_US='20ms' is invalid",
               "expected microseconds from 0 to 1000000");
}

TEST(Partition, EveryWorkerGathersTheTrainingStateOfOneProcess) {
  // NOTE [Saving a placed network]: after share_placed_state every worker, including those that
  // own nothing (5-7), holds the parameters and momentum accumulators one process ends with.
  const auto batches = lenet_batches(6, 8);
  const TrainingRun single = train_lenet(1, {}, batches, 1, true);
  const TrainingRun placed = train_lenet(8, place_like_the_seed, batches, 2, true);
  ASSERT_FALSE(single.state[0].empty());
  for (int r = 0; r < 8; ++r) {
    ASSERT_EQ(placed.state[r].size(), single.state[0].size()) << "rank " << r;
    for (const auto& [name, want] : single.state[0]) {
      const std::vector<double>& got = placed.state[r].at(name);
      ASSERT_EQ(got.size(), want.size()) << name;
      EXPECT_LE(worst_rel_diff(got, want), 1e-4) << "rank " << r << ": " << name;
    }
  }
  // The comparison is of trained values: fc3's weight (updated on rank 2 only) and its momentum
  // accumulator moved away from where every rank started.
  const std::string w = "_backbone.fc3.weight";
  ASSERT_TRUE(single.initial.count(w) && single.state[0].count("moments." + w));
  double weight_moved = 0, accum = 0;
  for (size_t k = 0; k < single.initial.at(w).size(); ++k) {
    weight_moved =
        std::max(weight_moved, std::abs(single.state[0].at(w)[k] - single.initial.at(w)[k]));
    accum = std::max(accum, std::abs(single.state[0].at("moments." + w)[k]));
  }
  EXPECT_GT(weight_moved, 1e-5);
  EXPECT_GT(accum, 1e-5);
}

TEST(Partition, ModelCheckpointOfAPlacedNetworkEqualsOneProcess) {
  // Model.train with ModelCheckpoint on the seed's placement over 8 thread-ranks, each saving into
  // its own folder (as seed 000's workers run in worker_N/): every worker's file, also those of
  // ranks that own nothing, holds what one process saves (NOTE [Saving a placed network]). Then
  // fresh networks (another seed) on 8 thread-ranks resume from the step-2 files and end where
  // the uninterrupted run ended.
  testing::ModeGuard graph(runtime::GRAPH_MODE);
  runtime::rpc_send_op();
  testing::TempDir dir;
  auto data = [] {
    return dataset::GeneratorDataset(
               [](int64_t i) -> dataset::Row {
                 Tensor image = Tensor::full({1, 32, 32}, 0.05 * static_cast<double>(i % 7));
                 image.data<float>()[i % 1024] += 1.0f;
                 return {image, Tensor::scalar(static_cast<double>(i % 10), DType::kInt32)};
               },
               32, {"image", "label"}, {.shuffle = false})
        ->batch(8);
  };
  std::vector<std::shared_ptr<testing::LeNet5>> nets;  // 0-7 ranks, 8 one process, 9-16 resumed
  for (int r = 0; r < 17; ++r) {
    set_seed(r < 9 ? 1 : 2);
    nets.push_back(std::make_shared<testing::LeNet5>());
  }
  auto train = [&](int index, const std::string& folder, const std::string& resume_from) {
    auto loss = std::make_shared<nn::SoftmaxCrossEntropyWithLogits>(true, "mean");
    auto opt = std::make_shared<optim::Momentum>(nets[index]->trainable_params(), 0.01, 0.9);
    train::Model model(nets[index], loss, opt);
    if (!resume_from.empty()) model.load_train_state(resume_from);
    auto ckpt = std::make_shared<train::ModelCheckpoint>(
        train::CheckpointConfig{.save_checkpoint_steps = 2}, "lenet", folder);
    model.train(1, data(), {ckpt});
  };
  auto folder = [&](int r) { return dir.file(fmt::format("worker_{}", r)); };
  train(8, dir.file("single"), "");
  for (const bool resumed : {false, true}) {
    testing::run_thread_job(
        8,
        [&](int rank) {
          const int index = resumed ? 9 + rank : rank;
          place_like_the_seed(*nets[index]);
          if (!resumed) return train(index, folder(rank), "");
          train(index, folder(rank) + "/resumed", folder(rank) + "/lenet-1_2.ckpt");
        },
        "gloo");
  }
  const train::ParamMap want = train::load_checkpoint(dir.file("single") + "/lenet-1_4.ckpt");
  ASSERT_GT(want.size(), 10u);
  for (const std::string& file :
       {folder(0) + "/lenet-1_4.ckpt", folder(3) + "/lenet-1_4.ckpt", folder(5) + "/lenet-1_4.ckpt",
        folder(0) + "/resumed/lenet-1_4.ckpt", folder(4) + "/resumed/lenet-1_4.ckpt"}) {
    SCOPED_TRACE(file);
    const train::ParamMap got = train::load_checkpoint(file);
    ASSERT_EQ(got.size(), want.size());
    for (const auto& [name, t] : want) {
      ASSERT_TRUE(got.count(name)) << name;
      const std::vector<double> a = got.at(name).to_double_vector(), b = t.to_double_vector();
      ASSERT_EQ(a.size(), b.size()) << name;
      EXPECT_LE(worst_rel_diff(a, b), 1e-5) << name;
    }
  }
}

TEST(Partition, SplitCoresByLoad) {
  // Seed 000's measured loads (ms per run at M = 4) on 2 cores: the largest first, each onto the
  // least loaded core; idle workers stay unbound.
  EXPECT_EQ(runtime::split_cores({0.68, 0.10, 0.04, 1.45, 1.10, 0, 0, 0}, 2),
            (std::vector<int>{1, 0, 0, 0, 1, -1, -1, -1}));
  // Enough cores: each busy worker its own; equal loads keep rank order; one core takes all.
  EXPECT_EQ(runtime::split_cores({1, 1, 1, 0}, 4), (std::vector<int>{0, 1, 2, -1}));
  EXPECT_EQ(runtime::split_cores({2, 3, 1}, 1), (std::vector<int>{0, 0, 0}));
  EXPECT_EQ(runtime::split_cores({}, 2), (std::vector<int>{}));
  EXPECT_ERROR(runtime::split_cores({1}, 0), "split_cores: 0 cores");
}

TEST(Partition, BusyWorkersAreBoundToCores) {
  // 8 ranks, the seed's placement: after kWarmupRuns + kMeasuredRuns steps the busy ranks 0-4 bind
  // their threads to one core each (CLEAVE_BIND_CORES=1 binds even when cores are plentiful);
  // ranks 5-7 ran no kernels and stay free. Training is unchanged.
  const int steps = runtime::kWarmupRuns + runtime::kMeasuredRuns + 2;
  const auto batches = lenet_batches(steps, 8);
  const TrainingRun single = train_lenet(1, {}, batches);
  testing::ScopedEnv bind("CLEAVE_BIND_CORES", "1");
  const TrainingRun bound = train_lenet(8, place_like_the_seed, batches);
  expect_same(bound, single, 1e-5);
  const int cores = static_cast<int>(sysconf(_SC_NPROCESSORS_ONLN));
  for (int r = 0; r < 8; ++r) {
    const runtime::CoreBinding& b = bound.bindings[r];
    EXPECT_TRUE(b.decided) << "rank " << r;
    EXPECT_EQ(b.summary, bound.bindings[0].summary) << "rank " << r;
    if (r < 5) {
      EXPECT_GE(b.cpu, 0) << "rank " << r << ": " << b.summary;
      EXPECT_EQ(bound.affinity[r], 1) << "rank " << r;
    } else {
      EXPECT_EQ(b.cpu, -1) << "rank " << r;
    }
  }
  EXPECT_NE(bound.bindings[0].summary.find("5 busy workers on"), std::string::npos)
      << bound.bindings[0].summary;
  if (cores >= 5) {  // each busy rank its own core
    std::set<int> used;
    for (int r = 0; r < 5; ++r) used.insert(bound.bindings[r].cpu);
    EXPECT_EQ(used.size(), 5u) << bound.bindings[0].summary;
  }
  // 0 on any worker: nobody binds.
  bind.set("CLEAVE_BIND_CORES", "0");
  const TrainingRun free = train_lenet(8, place_like_the_seed, batches);
  for (int r = 0; r < 8; ++r) {
    EXPECT_EQ(free.bindings[r].cpu, -1) << "rank " << r;
    EXPECT_NE(free.bindings[r].summary.find("not bound: CLEAVE_BIND_CORES=0"), std::string::npos)
        << free.bindings[r].summary;
  }
  // A bad value is an error naming the variable, at the first step.
  bind.set("CLEAVE_BIND_CORES", "yes");
  EXPECT_ERROR(train_lenet(5, place_like_the_seed, {batches[0]}),
               "CLEAVE_BIND_CORES='yes' is invalid", "expected auto");
}

TEST(Partition, MicroBatchesEqualTheUnpipelinedStep) {
  const auto batches = lenet_batches(12, 16);
  const TrainingRun single = train_lenet(1, {}, batches);
  const TrainingRun pipelined = train_lenet(5, place_like_the_seed, batches, 4);
  expect_same(pipelined, single, 1e-4);
  // The micro-batches' slices of (data, label) count as the arguments they come from.
  const std::vector<std::vector<bool>> expected = {
      {false, true}, {false, false}, {false, false}, {true, false}, {false, false}};
  EXPECT_EQ(pipelined.inputs_read, expected);
  // Micro-batching without placement: gradient accumulation on one process.
  const TrainingRun accumulated = train_lenet(1, {}, batches, 4);
  expect_same(accumulated, single, 1e-4);
}

TEST(Partition, RanksThatOwnNothingFinish) {
  // Everything on ranks 0 and 1 of 4: ranks 2 and 3 run empty graphs every step.
  const auto batches = lenet_batches(5, 8);
  const TrainingRun single = train_lenet(1, {}, batches);
  const TrainingRun placed = train_lenet(
      4, [](testing::LeNet5& net) { net.conv1->place("MS_WORKER", 1); }, batches);
  expect_same(placed, single, 1e-5);
}

TEST(Partition, PingPongPlacementWithMicroBatches) {
  // Every layer on another rank, back and forth: many cut edges in both directions.
  const auto batches = lenet_batches(4, 12);
  const TrainingRun single = train_lenet(1, {}, batches);
  auto ping_pong = [](testing::LeNet5& net) {
    net.conv1->place("MS_WORKER", 2);
    net.conv2->place("MS_WORKER", 0);
    net.fc1->place("MS_WORKER", 2);
    net.fc2->place("MS_WORKER", 1);
    net.fc3->place("MS_WORKER", 2);
  };
  expect_same(train_lenet(3, ping_pong, batches, 3), single, 1e-4);
}

// ---- a parameter used on two ranks ----

class SharedWeight : public nn::Cell {
 public:
  SharedWeight() : Cell("SharedWeight") {
    w = register_parameter("w", nn::Normal(0.3)(Shape{6, 6}));
    first.place("MS_WORKER", 1);
    second.place("MS_WORKER", 0);
  }
  Tensor construct(const Tensor& x) override {
    const Tensor h = ops::relu(first.call1({x, w}));
    return second.call1({h, w});
  }
  Tensor w;
  ir::Primitive first{"MatMul"}, second{"MatMul"};
};

std::vector<double> train_shared(int world, std::vector<double>* weight) {
  testing::ModeGuard graph(runtime::GRAPH_MODE);
  runtime::rpc_send_op();
  std::vector<std::shared_ptr<SharedWeight>> nets;
  for (int r = 0; r < world; ++r) {
    set_seed(3);
    nets.push_back(std::make_shared<SharedWeight>());
  }
  set_seed(4);
  const Tensor x = Tensor::normal({5, 6}), y = Tensor::normal({5, 6});
  std::vector<double> losses;
  auto train = [&](int rank) {
    auto with_loss =
        std::make_shared<nn::WithLossCell>(nets[rank], std::make_shared<nn::MSELoss>());
    auto opt = std::make_shared<optim::SGD>(std::vector<Tensor>{nets[rank]->w}, 0.1);
    optim::TrainOneStep step(with_loss, opt);
    for (int i = 0; i < 6; ++i) {
      const Tensor loss = step(x, y);
      if (rank == 0) losses.push_back(loss.item());
    }
    if (rank == (world > 1 ? 1 : 0)) *weight = nets[rank]->w.to_double_vector();
  };
  if (world == 1) {
    train(0);
  } else {
    testing::run_thread_job(world, train, "gloo");
  }
  return losses;
}

TEST(Partition, ParameterUsedOnTwoRanksLivesWithItsFirstUser) {
  std::vector<double> w_single, w_placed;
  const std::vector<double> single = train_shared(1, &w_single);
  const std::vector<double> placed = train_shared(2, &w_placed);
  ASSERT_EQ(single.size(), placed.size());
  for (size_t i = 0; i < single.size(); ++i) EXPECT_LE(rel_diff(placed[i], single[i]), 1e-5) << i;
  EXPECT_LT(single.back(), single.front());
  // The first user (the MatMul on rank 1) owns w: rank 1 holds the updated weight.
  ASSERT_EQ(w_single.size(), w_placed.size());
  for (size_t k = 0; k < w_single.size(); ++k) EXPECT_LE(rel_diff(w_placed[k], w_single[k]), 1e-5);
}

TEST(Partition, MicroBatchesMustDivideTheBatch) {
  testing::ModeGuard graph(runtime::GRAPH_MODE);
  runtime::set_auto_parallel_context({.pipeline_micro_batches = 3});
  set_seed(5);
  auto net = std::make_shared<nn::Dense>(4, 2);
  auto with_loss = std::make_shared<nn::WithLossCell>(net, std::make_shared<nn::MSELoss>());
  auto opt = std::make_shared<optim::SGD>(net->trainable_params(), 0.1);
  optim::TrainOneStep step(with_loss, opt);
  EXPECT_ERROR(step(Tensor::zeros({4, 4}), Tensor::zeros({4, 2})),
               "data has shape (4, 4); with pipeline_micro_batches = 3");
  runtime::set_auto_parallel_context({});
  EXPECT_ERROR(runtime::set_auto_parallel_context({.pipeline_micro_batches = 0}),
               "pipeline_micro_batches is 0");
}

TEST(Partition, WorkersThatTracedDifferentStepsAreRefused) {
  testing::ModeGuard graph(runtime::GRAPH_MODE);
  runtime::rpc_send_op();
  std::vector<std::shared_ptr<testing::LeNet5>> nets;
  for (int r = 0; r < 2; ++r) {
    set_seed(1);
    nets.push_back(std::make_shared<testing::LeNet5>());
  }
  const auto batches = lenet_batches(1, 4);
  testing::run_thread_job(
      2,
      [&](int rank) {
        nets[rank]->fc3->place("MS_WORKER", rank);  // each worker places fc3 elsewhere
        auto with_loss = std::make_shared<nn::WithLossCell>(
            nets[rank], std::make_shared<nn::SoftmaxCrossEntropyWithLogits>(true, "mean"));
        auto opt = std::make_shared<optim::Momentum>(nets[rank]->trainable_params(), 0.01, 0.9);
        optim::TrainOneStep step(with_loss, opt);
        EXPECT_ERROR(step(batches[0].data, batches[0].label),
                     "the workers traced different training steps",
                     "every worker must run the same program");
      },
      "gloo");
}

TEST(Partition, PlacedNetworksNeedGraphMode) {
  testing::ModeGuard eager(runtime::PYNATIVE_MODE);
  set_seed(1);
  std::vector<std::shared_ptr<testing::LeNet5>> nets = {std::make_shared<testing::LeNet5>(),
                                                        std::make_shared<testing::LeNet5>()};
  const auto batches = lenet_batches(1, 4);
  testing::run_thread_job(
      2,
      [&](int rank) {
        nets[rank]->fc3->place("MS_WORKER", 1);
        auto with_loss = std::make_shared<nn::WithLossCell>(
            nets[rank], std::make_shared<nn::SoftmaxCrossEntropyWithLogits>(true, "mean"));
        auto opt = std::make_shared<optim::Momentum>(nets[rank]->trainable_params(), 0.01, 0.9);
        optim::TrainOneStep step(with_loss, opt);
        EXPECT_ERROR(step(batches[0].data, batches[0].label), "the context is PYNATIVE_MODE",
                     "distributed graph partition needs GRAPH_MODE");
        optim::Forward forward(nets[rank]);
        EXPECT_ERROR(forward(batches[0].data), "Forward: the network has cells placed");
      },
      "gloo");
}

TEST(Partition, WithoutAClusterPlaceHasNoEffect) {
  // World of one (no init): the placed net trains on this process exactly like an unplaced one.
  const auto batches = lenet_batches(3, 8);
  const TrainingRun plain = train_lenet(1, {}, batches);
  testing::ModeGuard graph(runtime::GRAPH_MODE);
  set_seed(1);
  auto net = std::make_shared<testing::LeNet5>();
  place_like_the_seed(*net);
  auto with_loss = std::make_shared<nn::WithLossCell>(
      net, std::make_shared<nn::SoftmaxCrossEntropyWithLogits>(true, "mean"));
  auto opt = std::make_shared<optim::Momentum>(net->trainable_params(), 0.01, 0.9);
  optim::TrainOneStep step(with_loss, opt);
  for (size_t i = 0; i < batches.size(); ++i) {
    EXPECT_EQ(step(batches[i].data, batches[i].label).item(), plain.losses[i]) << i;
  }
}

TEST(Partition, PlacedEvaluationReturnsTheOutputOnWorkerZero) {
  testing::ModeGuard graph(runtime::GRAPH_MODE);
  runtime::rpc_send_op();
  set_seed(2);
  const Tensor x = Tensor::normal({4, 1, 32, 32});
  std::vector<std::shared_ptr<testing::LeNet5>> nets;
  for (int r = 0; r < 6; ++r) {
    set_seed(1);
    nets.push_back(std::make_shared<testing::LeNet5>());
  }
  optim::Forward single(nets[5]);
  const std::vector<double> expected = single(x).to_double_vector();
  testing::run_thread_job(
      5,
      [&](int rank) {
        place_like_the_seed(*nets[rank]);
        optim::Forward forward(nets[rank]);
        const Tensor y = forward(x);
        if (rank != 0) {
          EXPECT_FALSE(y.defined());
          return;
        }
        const std::vector<double> got = y.to_double_vector();
        ASSERT_EQ(got.size(), expected.size());
        for (size_t k = 0; k < got.size(); ++k) EXPECT_LE(rel_diff(got[k], expected[k]), 1e-6);
      },
      "gloo");
}

}  // namespace
}  // namespace cleave

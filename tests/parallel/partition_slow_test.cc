// Placed LeNet-5 on 8 thread ranks (the slow label, NOTE [Test labels] in tests/CMakeLists.txt;
// the other partition tests are in partition_test.cc): every worker, also those that own
// nothing, gathers the training state and saves the checkpoint one process does, and busy workers
// are bound to cores.
#include <gtest/gtest.h>
#include <unistd.h>

#include <set>

#include "cleave/cleave.h"
#include "data/data_files.h"
#include "parallel/placed_lenet.h"
#include "testing/env.h"
#include "testing/gradcheck.h"
#include "testing/ranks.h"

namespace cleave {
namespace {

using testing::expect_same;
using testing::lenet_batches;
using testing::place_like_the_seed;
using testing::train_lenet;
using testing::TrainingRun;
using testing::worst_rel_diff;

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

}  // namespace
}  // namespace cleave

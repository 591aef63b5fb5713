// Merging a sharded job's checkpoints (NOTE [Merging sharded checkpoints] in
// cleave/train/sharded_checkpoint.h): a SEMI_AUTO_PARALLEL MLP trained on 4 thread ranks, each
// rank saving its slices and Momentum's state, merges into exactly the parameters gathered from
// the ranks, loads into a one-device network, and every inconsistent set is refused by name.
#include "cleave/train/sharded_checkpoint.h"

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <mutex>

#include "cleave/cleave.h"
#include "cleave/runtime/sharded_parameters.h"
#include "testing/ranks.h"
#include "train/sharded_mlp.h"

namespace cleave::train {
namespace {

namespace fs = std::filesystem;
using ckpt_testing::expect_error;

using ckpt_testing::Mlp;

struct Job {
  fs::path dir;
  std::string strategy;
  std::map<std::string, Tensor> gathered;  // rank 0's gathered parameters (state stays sliced)
  std::map<std::string, Tensor> single;    // the same training on one device
};

// The MLP with the shard() strategies of a job of `ranks` (ignored by a one-device run), trained
// `steps` steps, first restoring `resume` (a whole, single-device checkpoint) when given; returns
// its train_state_tensors.
NamedTensors train(const Tensor& x, const Tensor& y, int ranks, int steps = 3,
                   const ParamMap* resume = nullptr) {
  const std::shared_ptr<Mlp> net = ckpt_testing::make_mlp(ranks);
  auto opt = std::make_shared<optim::Momentum>(net->trainable_params(), 0.1, 0.9);
  TrainProgress progress;
  if (resume != nullptr) progress = restore_train_state(*net, *opt, *resume);
  auto with_loss = std::make_shared<nn::WithLossCell>(
      net, std::make_shared<nn::SoftmaxCrossEntropyWithLogits>(true, "mean"));
  optim::TrainOneStep step(with_loss, opt);
  for (int s = 0; s < steps; ++s) step(x, y);
  return train_state_tensors(*net, opt.get(), {1, progress.step_num + steps});
}

// Trains the MLP 3 steps on `ranks` ranks (shard()), each rank saving train_state_tensors to
// dir/<rank>/net.ckpt.
Job train_sharded(int ranks = 4) {
  Job job;
  job.dir = fs::temp_directory_path() / fmt::format("cleave_merge_test_{}_{}", ::getpid(), ranks);
  fs::remove_all(job.dir);
  fs::create_directories(job.dir);
  job.strategy = (job.dir / "strategy.json").string();
  runtime::set_context({.mode = runtime::GRAPH_MODE});
  set_seed(5);
  const Tensor x = Tensor::normal({8, 12});
  const Tensor y = ops::cast(Tensor::uniform({8}, 0, 8), DType::kInt32);
  runtime::reset_auto_parallel_context();
  for (const auto& [name, t] : train(x, y, ranks)) job.single[name] = t.clone();
  runtime::set_auto_parallel_context({.parallel_mode = runtime::SEMI_AUTO_PARALLEL,
                                      .dataset_strategy = "full_batch",
                                      .strategy_ckpt_save_file = job.strategy});
  std::mutex out_mutex;
  testing::run_thread_job(ranks, [&](comm::ProcessGroup& g) {
    const NamedTensors state = train(x, y, ranks);
    const fs::path mine = job.dir / std::to_string(g.rank());
    fs::create_directories(mine);
    save_checkpoint(state, (mine / "net.ckpt").string());
    // The parameters' whole values, gathered (collective: every rank, the same order).
    std::map<std::string, Tensor> whole;
    for (const auto& [name, t] : state) {
      if (runtime::parameter_shard(t)) whole[name] = runtime::gather_parameter(t);
    }
    if (g.rank() == 0) {
      std::lock_guard<std::mutex> lock(out_mutex);
      job.gathered = whole;
    }
  });
  runtime::reset_auto_parallel_context();
  return job;
}

std::vector<RankCheckpoint> load_ranks(const Job& job, int n = 4) {
  std::vector<RankCheckpoint> ranks;
  for (const std::string& f : rank_checkpoint_files(job.dir.string(), n)) {
    ranks.push_back({load_checkpoint(f), f});
  }
  return ranks;
}

TEST(ShardedCheckpoint, MergesIntoTheGatheredParametersAndLoadsIntoOneDevice) {
  const Job job = train_sharded();
  const std::vector<RankCheckpoint> ranks = load_ranks(job);
  // The slices really are slices: fc1's weight (16, 12) is (4, 12) on each rank.
  EXPECT_EQ(ranks[1].tensors.at("fc1.weight").shape(), Shape({4, 12}));
  EXPECT_EQ(ranks[1].tensors.at("moments.fc1.weight").shape(), Shape({4, 12}));
  EXPECT_EQ(ranks[1].tensors.at("fc2.weight").shape(), Shape({8, 4}));
  const parallel::ParameterLayouts layouts = parallel::load_parameter_layouts(job.strategy);
  EXPECT_EQ(layouts.device_num, 4);
  EXPECT_EQ(layouts.layouts.count("_backbone.fc1.weight"), 1u);
  const NamedTensors merged = merge_checkpoints(ranks, layouts);
  // Every tensor of the one-device run, within float tolerance (the sharded step sums in another
  // order); the sharded parameters bit for bit as gathered from the ranks.
  ASSERT_EQ(merged.size(), job.single.size());
  int exact = 0;
  for (const auto& [name, t] : merged) {
    SCOPED_TRACE(name);
    const Tensor& want = job.single.at(name);
    ASSERT_EQ(t.shape().to_string(), want.shape().to_string());
    ASSERT_EQ(t.dtype(), want.dtype());
    const std::vector<double> a = ops::cast(t, DType::kFloat64).to_vector<double>();
    const std::vector<double> b = ops::cast(want, DType::kFloat64).to_vector<double>();
    for (size_t i = 0; i < a.size(); ++i) {
      ASSERT_LE(std::abs(a[i] - b[i]), 1e-5 * std::max(std::abs(b[i]), 1e-3)) << "element " << i;
    }
    auto g = job.gathered.find(name);
    if (g == job.gathered.end()) continue;
    EXPECT_EQ(std::memcmp(t.raw_data(), g->second.raw_data(),
                          static_cast<size_t>(t.numel()) * dtype_size(t.dtype())),
              0);
    ++exact;
  }
  EXPECT_GE(exact, 3);  // fc1's weight and bias, fc2's weight
  // The merged checkpoint is a one-device checkpoint: it loads into the network as defined.
  const fs::path full = job.dir / "full.ckpt";
  save_checkpoint(merged, full.string());
  Mlp one;
  const std::vector<std::string> rest = load_param_into_net(one, load_checkpoint(full.string()));
  EXPECT_NE(std::find(rest.begin(), rest.end(), "moments.fc1.weight"), rest.end());
  EXPECT_EQ(one.fc1->weight.shape(), Shape({16, 12}));

  // Sets that do not fit are refused, naming what is wrong.
  expect_error(
      [&] {
        merge_checkpoints({ranks[0], ranks[1]}, layouts);
      },
      "2 checkpoints for a strategy of 4 devices");
  std::vector<RankCheckpoint> swapped = ranks;
  swapped[2].tensors["fc1.weight"] = ranks[2].tensors.at("fc1.weight").narrow_rows(0, 2).clone();
  expect_error([&] { merge_checkpoints(swapped, layouts); }, "rank 2");
  std::vector<RankCheckpoint> drifted = ranks;
  Tensor step = drifted[3].tensors.at("global_step").clone();
  step.data<int32_t>()[0] += 1;
  drifted[3].tensors["global_step"] = step;
  expect_error([&] { merge_checkpoints(drifted, layouts); }, "'global_step' is not sharded");
  std::vector<RankCheckpoint> missing = ranks;
  missing[1].tensors.erase("moments.fc2.weight");
  expect_error([&] { merge_checkpoints(missing, layouts); }, "moments.fc2.weight");
  // fc2's bias is replicated: its replicas must agree.
  std::vector<RankCheckpoint> replicas = ranks;
  Tensor bias = replicas[1].tensors.at("fc2.bias").clone();
  bias.data<float>()[0] += 1;
  replicas[1].tensors["fc2.bias"] = bias;
  expect_error([&] { merge_checkpoints(replicas, layouts); }, "fc2.bias");
  fs::remove_all(job.dir);
}

::testing::AssertionResult same(const NamedTensors& a, const NamedTensors& b, double tolerance) {
  if (a.size() != b.size()) {
    return ::testing::AssertionFailure() << a.size() << " tensors against " << b.size();
  }
  for (size_t i = 0; i < a.size(); ++i) {
    if (a[i].first != b[i].first || a[i].second.shape() != b[i].second.shape()) {
      return ::testing::AssertionFailure()
             << a[i].first << " " << a[i].second.shape().to_string() << " against " << b[i].first
             << " " << b[i].second.shape().to_string();
    }
    const auto x = ops::cast(a[i].second, DType::kFloat64).to_vector<double>();
    const auto y = ops::cast(b[i].second, DType::kFloat64).to_vector<double>();
    for (size_t k = 0; k < x.size(); ++k) {
      if (std::abs(x[k] - y[k]) > tolerance * std::max(std::abs(y[k]), 1e-3)) {
        return ::testing::AssertionFailure()
               << a[i].first << " element " << k << ": " << x[k] << " against " << y[k];
      }
    }
  }
  return ::testing::AssertionSuccess();
}

TEST(ShardedCheckpoint, TransformsFourRanksIntoTheCheckpointsOfATwoRankJob) {
  const Job four = train_sharded(4), two = train_sharded(2);
  const parallel::ParameterLayouts from = parallel::load_parameter_layouts(four.strategy);
  const parallel::ParameterLayouts to = parallel::load_parameter_layouts(two.strategy);
  const NamedTensors whole = merge_checkpoints(load_ranks(four), from);
  const std::vector<RankCheckpoint> theirs = load_ranks(two, 2);
  std::vector<RankCheckpoint> split;
  for (int64_t r = 0; r < 2; ++r) {
    const NamedTensors mine = split_checkpoint(whole, to, r);
    // What the 2-rank job itself saved (it trained the same steps: equal within float rounding).
    const NamedTensors saved(theirs[static_cast<size_t>(r)].tensors.begin(),
                             theirs[static_cast<size_t>(r)].tensors.end());
    EXPECT_TRUE(same(mine, saved, 1e-5)) << "rank " << r;
    split.push_back({ParamMap(mine.begin(), mine.end()), fmt::format("split rank {}", r)});
  }
  EXPECT_EQ(split[1].tensors.at("fc2.weight").shape(), Shape({4, 16}));
  // Split then merged: the same bytes.
  EXPECT_TRUE(same(merge_checkpoints(split, to), whole, 0));
  // Which source ranks each destination rank reads: fc2's weight (8, 16) is split by columns
  // over the 4 source ranks and by rows over the 2 destinations, so each destination needs every
  // source rank; with only fc1's weight (rows split 4 ways, whole in the destination) also all 4.
  std::vector<std::string> names;
  for (const auto& [name, t] : whole) names.push_back(name);
  const TransformPlan plan = plan_transform(names, from, to);
  ASSERT_EQ(plan.reads.size(), 2u);
  EXPECT_EQ(plan.reads[0], (std::vector<int64_t>{0, 1, 2, 3}));
  // The other way round: fc1's weight whole in the source (2 ranks) comes from one file, the
  // destination rank's own where the source has it, else rank d % 2 (NOTE [Reading only what a
  // rank needs]).
  const TransformPlan back = plan_transform({"fc1.weight"}, to, from);
  ASSERT_EQ(back.reads.size(), 4u);
  for (int64_t d = 0; d < 4; ++d) {
    EXPECT_EQ(back.reads[static_cast<size_t>(d)], (std::vector<int64_t>{d % 2})) << d;
  }
  const TransformPlan columns = plan_transform({"fc2.weight"}, to, from);
  EXPECT_EQ(columns.reads[3], (std::vector<int64_t>{0, 1}));
  fs::remove_all(four.dir);
  fs::remove_all(two.dir);
}

// Resuming a sharded job: every rank of a new job loads the merged checkpoint (whole tensors,
// before its step is compiled; compiling slices them and Momentum's state with them) and trains
// on: after 3 + 3 steps it holds what 6 uninterrupted steps on one device give.
TEST(ShardedCheckpoint, AJobResumedFromTheMergedCheckpointContinuesAsOneDevice) {
  const Job first = train_sharded(4);
  const parallel::ParameterLayouts layouts = parallel::load_parameter_layouts(first.strategy);
  const NamedTensors merged = merge_checkpoints(load_ranks(first), layouts);
  const ParamMap whole(merged.begin(), merged.end());
  set_seed(5);  // train_sharded's data
  const Tensor x = Tensor::normal({8, 12});
  const Tensor y = ops::cast(Tensor::uniform({8}, 0, 8), DType::kInt32);
  runtime::set_context({.mode = runtime::GRAPH_MODE});
  runtime::reset_auto_parallel_context();
  const NamedTensors trained = train(x, y, 4, 6);
  const ParamMap by_name(trained.begin(), trained.end());  // merge's order
  const NamedTensors six(by_name.begin(), by_name.end());
  runtime::set_auto_parallel_context(
      {.parallel_mode = runtime::SEMI_AUTO_PARALLEL, .dataset_strategy = "full_batch"});
  std::vector<RankCheckpoint> resumed(4);
  testing::run_thread_job(4, [&](comm::ProcessGroup& g) {
    const NamedTensors state = train(x, y, 4, 3, &whole);
    resumed[static_cast<size_t>(g.rank())] = {ParamMap(state.begin(), state.end()),
                                              fmt::format("resumed rank {}", g.rank())};
  });
  runtime::reset_auto_parallel_context();
  // The new job's slices really are slices, and merged they are the uninterrupted run.
  EXPECT_EQ(resumed[2].tensors.at("fc1.weight").shape(), Shape({4, 12}));
  const NamedTensors after = merge_checkpoints(resumed, layouts);
  EXPECT_TRUE(same(after, six, 1e-5));
  EXPECT_EQ(ParamMap(after.begin(), after.end()).at("global_step").to_vector<int32_t>()[0], 6);
  fs::remove_all(first.dir);
}

TEST(ShardedCheckpoint, RankFoldersAreFoundOrNamed) {
  const fs::path dir =
      fs::temp_directory_path() / fmt::format("cleave_merge_folders_{}", ::getpid());
  fs::remove_all(dir);
  fs::create_directories(dir / "rank_0");
  const NamedTensors t = {{"w", Tensor::ones({2})}};
  save_checkpoint(t, (dir / "rank_0" / "a-1_5.ckpt").string());
  save_checkpoint(t, (dir / "rank_0" / "a-2_10.ckpt").string());
  EXPECT_EQ(rank_checkpoint_files(dir.string(), 1),
            std::vector<std::string>{(dir / "rank_0" / "a-2_10.ckpt").string()});
  expect_error([&] { rank_checkpoint_files(dir.string(), 2); }, "for rank 1 of 2");
  save_checkpoint(t, (dir / "rank_0" / "other.ckpt").string());
  expect_error([&] { rank_checkpoint_files(dir.string(), 1); }, "give --prefix");
  EXPECT_EQ(rank_checkpoint_files(dir.string(), 1, "a"),
            std::vector<std::string>{(dir / "rank_0" / "a-2_10.ckpt").string()});
  expect_error([&] { rank_checkpoint_files((dir / "none").string(), 1); }, "is not a folder");
  fs::remove_all(dir);
}

TEST(ShardedCheckpoint, BadStrategyFilesAreNamed) {
  const fs::path dir = fs::temp_directory_path() / fmt::format("cleave_merge_bad_{}", ::getpid());
  fs::create_directories(dir);
  const auto write = [&](const std::string& text) {
    std::ofstream((dir / "s.json").string()) << text;
    return (dir / "s.json").string();
  };
  expect_error([&] { parallel::load_parameter_layouts(write("{")); }, "not valid JSON");
  expect_error(
      [&] {
        parallel::load_parameter_layouts(write(
            R"({"format": "cleave-strategy", "version": 1, "device_num": 4,
                "parallel_layout_item": {"w": {"dev_matrix": [4], "tensor_map": [[0]],
                                               "tensor_shape": [6]}}})"));
      },
      "parameter 'w' has an invalid layout");
  expect_error(
      [&] {
        parallel::load_parameter_layouts(write(
            R"({"format": "cleave-strategy", "version": 1, "device_num": 4,
                "parallel_layout_item": {"w": {"dev_matrix": [4]}}})"));
      },
      "parameter 'w' has no valid layout");
  fs::remove_all(dir);
}

}  // namespace
}  // namespace cleave::train

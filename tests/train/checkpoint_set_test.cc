// A sharded job's checkpoint sets (NOTE [Checkpoint sets] in cleave/train/checkpoint_set.h): the
// MLP of sharded_mlp.h trained by Model.train on 4 thread ranks with ModelCheckpoint, resumed by
// Model.load_distributed_checkpoint on 4 ranks (same strategy), on 2, 6 and 8 ranks (other
// strategies) and on one device, each continuing the loss curve of an uninterrupted one-device
// run; partial sets and other jobs' files refused by name; and a saving job killed with SIGKILL
// at 20 moments, after each of which the newest committed set loads on every rank.
#include "cleave/train/checkpoint_set.h"

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <map>
#include <mutex>
#include <random>
#include <thread>

#include "cleave/cleave.h"
#include "cleave/train/sharded_checkpoint.h"
#include "testing/ranks.h"
#include "train/sharded_mlp.h"

extern char** environ;

namespace cleave::train {
namespace {

namespace fs = std::filesystem;
using ckpt_testing::expect_error;

fs::path fresh_dir(const std::string& name) {
  const fs::path dir = fs::temp_directory_path() / fmt::format("cleave_{}_{}", name, ::getpid());
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

class LossRecorder : public Callback {
 public:
  void on_step_end(RunContext& ctx) override { losses.push_back(ctx.loss_value()); }
  std::vector<double> losses;
};

// Where Model.train of the MLP starts from and what it saves.
struct Run {
  int ranks = 1;                    // the job's ranks (the shard() strategies of sharded_mlp.h)
  int64_t epochs = 1;               // of 3 steps each, on one fixed batch
  std::string save_dir;             // ModelCheckpoint into <save_dir>/<rank> when set
  std::string resume_dir;           // Model.load_distributed_checkpoint from here when set
  std::string resume_strategy;      // ... saved under this strategy file
  bool parallel_optimizer = false;  // enable_parallel_optimizer (every parameter it can split)
  bool build = false;               // Model.build before loading
  // When set: the files each rank's load_distributed_checkpoint read, by rank.
  std::map<int64_t, std::vector<std::string>>* files_read = nullptr;
};

// The batch every run trains on (drawn before any thread job: set_seed is process-wide).
struct Batch {
  Tensor x, y;
};
Batch fixed_batch() {
  set_seed(5);
  const Tensor x = Tensor::normal({24, 12});  // 24 rows: divisible by every job's batch split
  return {x, ops::cast(Tensor::uniform({24}, 0, 8), DType::kInt32)};
}

// The losses of `run` on this thread (a rank of a thread job, or one device).
std::vector<double> train_losses(const Run& run, const Batch& batch) {
  const Tensor &x = batch.x, &y = batch.y;
  auto data = dataset::GeneratorDataset(
      [&](int64_t) {
        return dataset::Row{x, y};
      },
      3, {"data", "label"});
  const auto net = ckpt_testing::make_mlp(run.ranks);
  auto opt = std::make_shared<optim::Momentum>(net->trainable_params(), 0.1, 0.9);
  Model model(net, std::make_shared<nn::SoftmaxCrossEntropyWithLogits>(true, "mean"), opt);
  if (run.build) model.build(data);
  if (!run.resume_dir.empty()) {
    model.load_distributed_checkpoint(run.resume_dir, run.resume_strategy);
    if (run.files_read != nullptr) {
      static std::mutex mutex;
      std::lock_guard<std::mutex> lock(mutex);
      (*run.files_read)[comm::world_rank()] = model.loaded_files();
    }
  }
  auto recorder = std::make_shared<LossRecorder>();
  std::vector<CallbackPtr> callbacks = {recorder};
  if (!run.save_dir.empty()) {
    callbacks.push_back(std::make_shared<ModelCheckpoint>(
        CheckpointConfig{.save_checkpoint_steps = 1, .keep_checkpoint_max = 1}, "CKP",
        fmt::format("{}/{}", run.save_dir, comm::world_rank())));
  }
  model.train(run.epochs, data, callbacks);
  return recorder->losses;
}

// `run` on `run.ranks` thread ranks in SEMI_AUTO_PARALLEL (full batch), writing its strategy file
// to `strategy` when given; rank 0's losses (checked equal on every rank).
std::vector<double> job_losses(const Run& run, const std::string& strategy = "") {
  const Batch batch = fixed_batch();
  if (run.ranks == 1) {
    runtime::reset_auto_parallel_context();
    return train_losses(run, batch);
  }
  runtime::AutoParallelContext context{.parallel_mode = runtime::SEMI_AUTO_PARALLEL,
                                       .dataset_strategy = "full_batch",
                                       .strategy_ckpt_save_file = strategy,
                                       .enable_parallel_optimizer = run.parallel_optimizer};
  context.parallel_optimizer_config.parallel_optimizer_threshold = 0;
  runtime::set_auto_parallel_context(context);
  std::vector<std::vector<double>> losses(static_cast<size_t>(run.ranks));
  testing::run_thread_job(run.ranks, [&](comm::ProcessGroup& g) {
    losses[static_cast<size_t>(g.rank())] = train_losses(run, batch);
  });
  runtime::reset_auto_parallel_context();
  for (const auto& l : losses) EXPECT_EQ(l, losses[0]);
  return losses[0];
}

void expect_near(const std::vector<double>& got, const std::vector<double>& want) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    EXPECT_NEAR(got[i], want[i], 1e-5 * std::abs(want[i])) << "loss " << i;
  }
}

// A 4-rank job trained one epoch of 3 steps, saving every step (keep_checkpoint_max 1: a job of
// several ranks keeps 2), into `dir`/<rank>, its strategy file `dir`/strategy.json.
std::vector<double> save_four_rank_job(const fs::path& dir) {
  runtime::set_context({.mode = runtime::GRAPH_MODE});
  return job_losses({.ranks = 4, .save_dir = dir.string()}, (dir / "strategy.json").string());
}

TEST(CheckpointSet, AJobResumesOnAnyDeviceCountAsOneUninterruptedDevice) {
  runtime::set_context({.mode = runtime::GRAPH_MODE});
  const std::vector<double> six = job_losses({.ranks = 1, .epochs = 2});
  ASSERT_EQ(six.size(), 6u);
  const fs::path dir = fresh_dir("ckpt_set_resume");
  const std::vector<double> first = save_four_rank_job(dir);
  expect_near(first, {six.begin(), six.begin() + 3});
  for (int r = 0; r < 4; ++r) {
    const fs::path mine = dir / std::to_string(r);
    EXPECT_TRUE(fs::exists(mine / "CKP-1_3.ckpt.commit")) << mine;
    EXPECT_TRUE(fs::exists(mine / "CKP-1_2.ckpt")) << "a job of several ranks keeps 2";
    EXPECT_FALSE(fs::exists(mine / "CKP-1_1.ckpt"));
    const auto marker = read_commit_marker((mine / "CKP-1_3.ckpt").string());
    ASSERT_TRUE(marker.has_value());
    EXPECT_EQ(marker->job.rank, r);
    EXPECT_EQ(marker->job.device_num, 4);
    EXPECT_EQ(marker->step_num, 3);
    // The file itself records its job too.
    const auto job = job_from_metadata(load_checkpoint_metadata((mine / "CKP-1_3.ckpt").string()));
    ASSERT_TRUE(job.has_value());
    EXPECT_EQ(job->layouts, marker->job.layouts);
    EXPECT_FALSE(job->layouts.empty());
  }
  // The job's layouts fingerprint is its strategy file's.
  const std::string strategy = (dir / "strategy.json").string();
  EXPECT_EQ(read_commit_marker((dir / "0" / "CKP-1_3.ckpt").string())->job.layouts,
            layouts_fingerprint(parallel::load_parameter_layouts(strategy)));
  const std::vector<double> next(six.begin() + 3, six.end());
  // The same strategy on 4 ranks, others on 2, 6 (a device matrix (2, 3) with replicas) and 8
  // ranks, and one device: steps 4 to 6.
  for (int ranks : {4, 2, 6, 8, 1}) {
    SCOPED_TRACE(fmt::format("resumed on {} rank(s)", ranks));
    expect_near(
        job_losses(
            {.ranks = ranks, .epochs = 2, .resume_dir = dir.string(), .resume_strategy = strategy}),
        next);
  }
  fs::remove_all(dir);
}

// NOTE [Reading only what a rank needs] in src/train/sharded_checkpoint.cc: after Model.build
// (the step compiled, the parameters this rank's slices) each rank of the resumed job reads only
// the files holding a part of its slices, those `cleave-ckpt transform --plan` names for the
// job's strategy file, and continues the one-device curve; resumed under the saving job's own
// strategy, each rank reads its own file only. Without build it reads one file of each set of
// replicas the source holds.
TEST(CheckpointSet, ABuiltJobReadsOnlyTheFilesHoldingItsSlices) {
  runtime::set_context({.mode = runtime::GRAPH_MODE});
  const std::vector<double> six = job_losses({.ranks = 1, .epochs = 2});
  const std::vector<double> next(six.begin() + 3, six.end());
  const fs::path dir = fresh_dir("ckpt_set_rank_reads");
  save_four_rank_job(dir);
  const std::string strategy = (dir / "strategy.json").string();
  const parallel::ParameterLayouts source = parallel::load_parameter_layouts(strategy);
  const std::vector<std::string> files = rank_checkpoint_files(dir.string(), 4);
  std::vector<std::string> names;
  for (const auto& [name, t] : load_checkpoint(files[0])) names.push_back(name);
  const auto planned = [&](const TransformPlan& plan, int64_t rank) {
    std::vector<std::string> out;
    for (int64_t s : plan.reads.at(static_cast<size_t>(rank))) {
      out.push_back(files[static_cast<size_t>(s)]);
    }
    return out;
  };
  const auto sorted = [](std::vector<std::string> v) {
    std::sort(v.begin(), v.end());
    return v;
  };
  size_t fewer = 0;  // ranks of the built jobs that read fewer files than the set holds
  for (const auto& [ranks, build] :
       std::vector<std::pair<int, bool>>{{4, true}, {2, true}, {8, true}, {2, false}, {1, false}}) {
    SCOPED_TRACE(fmt::format("resumed on {} rank(s), {}", ranks, build ? "built" : "not built"));
    const fs::path theirs = dir / fmt::format("strategy_{}.json", ranks);
    std::map<int64_t, std::vector<std::string>> read;
    expect_near(job_losses({.ranks = ranks,
                            .epochs = 2,
                            .resume_dir = dir.string(),
                            .resume_strategy = strategy,
                            .build = build,
                            .files_read = &read},
                           ranks > 1 ? theirs.string() : ""),
                next);
    parallel::ParameterLayouts destination{.device_num = ranks};
    if (build) destination = parallel::load_parameter_layouts(theirs.string());
    const TransformPlan plan = plan_transform(names, source, destination);
    ASSERT_EQ(read.size(), static_cast<size_t>(ranks));
    for (int64_t r = 0; r < ranks; ++r) {
      EXPECT_EQ(sorted(read[r]), planned(plan, r)) << "rank " << r;
      if (ranks == 4) EXPECT_EQ(read[r], std::vector<std::string>{files[r]}) << "rank " << r;
      // On 8 ranks fc1's rows and fc2's columns are split 4 ways as in the source: one file each.
      if (ranks == 8) EXPECT_EQ(read[r].size(), 1u) << "rank " << r;
      if (build && read[r].size() < files.size()) ++fewer;
    }
  }
  // Not a check that cannot fail: most ranks of the built jobs read part of the set.
  EXPECT_GE(fewer, 4u + 2u);
  fs::remove_all(dir);
}

// NOTE [Parallel optimizer] in cleave/parallel/parallel_optimizer.h: each rank saves its slice
// of the weights and optimizer state it splits, the strategy file holds their layouts L' (fc1's
// weight on 8 ranks lists its axes out of order), and the set moves to any other job.
TEST(CheckpointSet, AJobWithTheParallelOptimizerResumesOnAnyDeviceCount) {
  runtime::set_context({.mode = runtime::GRAPH_MODE});
  const std::vector<double> six = job_losses({.ranks = 1, .epochs = 2});
  const fs::path dir = fresh_dir("ckpt_set_parallel_optimizer");
  const std::string strategy = (dir / "strategy.json").string();
  const std::vector<double> first =
      job_losses({.ranks = 8, .save_dir = dir.string(), .parallel_optimizer = true}, strategy);
  expect_near(first, {six.begin(), six.begin() + 3});
  const parallel::ParameterLayouts layouts = parallel::load_parameter_layouts(strategy);
  // The traced step names it with its loss cell's prefix.
  const auto it = std::find_if(layouts.layouts.begin(), layouts.layouts.end(),
                               [](const auto& e) { return e.first.ends_with("fc1.weight"); });
  ASSERT_NE(it, layouts.layouts.end());
  const auto& fc1 = it->second;
  // Rows 4 ways on the axis of 4, then the replica axis of 2 (numbered below it) after it.
  EXPECT_EQ(fc1.first.normalized(), parallel::Layout({2, 4}, {{1, 0}, {}}))
      << fc1.first.to_string();
  EXPECT_EQ(fc1.first.slice_shape(fc1.second), Shape({2, 12}));
  // Rank 3 saved an eighth of fc1's weight (16 x 12): 2 rows, and of its momentum.
  const auto saved = load_checkpoint((dir / "3" / "CKP-1_3.ckpt").string());
  EXPECT_EQ(saved.at("fc1.weight").shape(), Shape({2, 12}));
  EXPECT_EQ(saved.at("moments.fc1.weight").shape(), Shape({2, 12}));
  const std::vector<double> next(six.begin() + 3, six.end());
  for (const auto& [ranks, parallel_optimizer] : std::vector<std::pair<int, bool>>{
           {8, true}, {8, false}, {4, true}, {2, false}, {6, true}, {1, false}}) {
    SCOPED_TRACE(fmt::format("resumed on {} rank(s), parallel optimizer {}", ranks,
                             parallel_optimizer ? "on" : "off"));
    expect_near(job_losses({.ranks = ranks,
                            .epochs = 2,
                            .resume_dir = dir.string(),
                            .resume_strategy = strategy,
                            .parallel_optimizer = parallel_optimizer}),
                next);
  }
  fs::remove_all(dir);
}

// NOTE [A run after another] in src/train/checkpoint_state.cc: a run started over in the folder
// of this job's earlier, longer run saves under a new prefix and leaves the earlier files; a
// run resumed from the folder's newest set keeps the prefix.
TEST(CheckpointSet, ARunStartedOverLeavesTheEarlierRunsNewerFiles) {
  runtime::set_context({.mode = runtime::GRAPH_MODE});
  const fs::path dir = fresh_dir("ckpt_set_rerun");
  const fs::path mine = dir / "0";
  job_losses({.ranks = 1, .epochs = 2, .save_dir = dir.string()});
  ASSERT_TRUE(fs::exists(mine / "CKP-2_3.ckpt"));
  const auto earlier = fs::last_write_time(mine / "CKP-2_3.ckpt");
  // Started over: its steps 1-3 are older than the folder's step 6, so they would have been
  // deleted as its own oldest files (and the loader would take step 6).
  job_losses({.ranks = 1, .epochs = 1, .save_dir = dir.string()});
  EXPECT_TRUE(fs::exists(mine / "CKP_1-1_3.ckpt"));
  EXPECT_TRUE(fs::exists(mine / "CKP_1-1_3.ckpt.commit"));
  EXPECT_EQ(fs::last_write_time(mine / "CKP-2_3.ckpt"), earlier);
  EXPECT_EQ(read_commit_marker((mine / "CKP-2_3.ckpt").string())->step_num, 6);
  // Another start over takes the next prefix.
  job_losses({.ranks = 1, .epochs = 1, .save_dir = dir.string()});
  EXPECT_TRUE(fs::exists(mine / "CKP_2-1_3.ckpt"));
  EXPECT_TRUE(fs::exists(mine / "CKP_1-1_3.ckpt"));

  // A run resumed from a folder's newest set saves after it, under the prefix.
  const fs::path other = fresh_dir("ckpt_set_resumed");
  job_losses({.ranks = 1, .epochs = 1, .save_dir = other.string()});
  job_losses({.ranks = 1,
              .epochs = 2,
              .save_dir = other.string(),
              .resume_dir = other.string(),
              .resume_strategy = ""});
  EXPECT_TRUE(fs::exists(other / "0" / "CKP-2_3.ckpt"));
  for (const auto& entry : fs::directory_iterator(other / "0")) {
    EXPECT_FALSE(entry.path().filename().string().starts_with("CKP_")) << entry.path();
  }
  fs::remove_all(dir);
  fs::remove_all(other);
}

TEST(CheckpointSet, PartialSetsAndOtherJobsFilesAreRefusedByName) {
  const fs::path dir = fresh_dir("ckpt_set_partial");
  save_four_rank_job(dir);
  const std::string strategy = (dir / "strategy.json").string();
  const parallel::ParameterLayouts layouts = parallel::load_parameter_layouts(strategy);
  const auto set = [&] { return rank_checkpoint_files(dir.string(), 4, "", &layouts); };
  EXPECT_EQ(set()[2], (dir / "2" / "CKP-1_3.ckpt").string());

  // Folders renamed: rank 3's files in rank 1's folder.
  fs::rename(dir / "1", dir / "x");
  fs::rename(dir / "3", dir / "1");
  expect_error(set, "saved by rank 3 of a job of 4 ranks");
  fs::rename(dir / "1", dir / "3");
  fs::rename(dir / "x", dir / "1");
  // Another device count's strategy.
  parallel::ParameterLayouts two = layouts;
  two.device_num = 2;
  expect_error([&] { rank_checkpoint_files(dir.string(), 2, "", &two); }, "set of 2 ranks");
  // A one-device run writing into rank 0's folder would replace the job's files: refused.
  runtime::set_context({.mode = runtime::GRAPH_MODE});
  expect_error([&] { job_losses({.ranks = 1, .save_dir = dir.string()}); },
               "saved by rank 0 of a job of 4 ranks");
  EXPECT_EQ(set()[0], (dir / "0" / "CKP-1_3.ckpt").string());

  // Rank 2 stopped before committing step 3: the set of step 2 is the newest whole one.
  fs::remove(dir / "2" / "CKP-1_3.ckpt.commit");
  for (const std::string& f : set()) EXPECT_TRUE(f.ends_with("CKP-1_2.ckpt")) << f;
  // Each rank resuming from its own folder's newest file would mix steps 2 and 3: refused.
  runtime::set_auto_parallel_context(
      {.parallel_mode = runtime::SEMI_AUTO_PARALLEL, .dataset_strategy = "full_batch"});
  expect_error(
      [&] {
        testing::run_thread_job(4, [&](comm::ProcessGroup& g) {
          const auto net = ckpt_testing::make_mlp(4);
          Model model(net, std::make_shared<nn::SoftmaxCrossEntropyWithLogits>(true, "mean"),
                      std::make_shared<optim::Momentum>(net->trainable_params(), 0.1, 0.9));
          // Its own folder's newest committed step (rank 2: step 2; the others: step 3), that
          // step's set merged into whole tensors, as a resumed job loads them before compiling.
          const std::string own =
              fs::path(latest_checkpoint((dir / std::to_string(g.rank())).string(), "CKP"))
                  .filename()
                  .string();
          std::vector<RankCheckpoint> ranks;
          for (int r = 0; r < 4; ++r) {
            const std::string f = (dir / std::to_string(r) / own).string();
            ranks.push_back({load_checkpoint(f), f});
          }
          const NamedTensors whole = merge_checkpoints(ranks, layouts);
          const fs::path mine = dir / fmt::format("whole_{}.ckpt", g.rank());
          save_checkpoint(whole, mine.string());
          model.load_train_state(mine.string());
        });
      },
      "loaded steps 2 to 3");
  runtime::reset_auto_parallel_context();
  // Without any step committed on rank 2: no set, and the error names rank 2.
  fs::remove(dir / "2" / "CKP-1_2.ckpt.commit");
  expect_error(set, "is missing on rank 2");
  fs::remove_all(dir);
}

// NOTE [Killing a saving job]
// checkpoint_kill_child (tests/train/checkpoint_kill_child.cc) trains the 4-rank job saving every
// step until it is killed. It is killed with SIGKILL at 20 seeded moments: 5 within 0.4 s of its
// start (the start, the compile, the first saves), 15 within 0.4 s after every rank committed its
// first save (about 150 saves a second then, so the moments fall in every phase of a save: the
// file, the marker, the deletions, on any rank). After each kill: either no rank committed any step
// yet (and the set is refused as incomplete, unless every rank wrote its first file and none its
// marker: folders without any marker are taken as other tools' files, each folder's newest), or the
// newest step every rank committed is what rank_checkpoint_files takes, every file of it loads, and
// they merge (replicated tensors and counters equal on every rank: the files are of one step).
TEST(CheckpointSet, AJobKilledWhileSavingLeavesItsLastCommittedSetWhole) {
  std::mt19937 random(2026);
  std::uniform_int_distribution<int> delay_ms(0, 400);
  int committed = 0, newer_than_set = 0;
  for (int kill = 0; kill < 20; ++kill) {
    SCOPED_TRACE(fmt::format("kill {}", kill));
    const fs::path dir = fresh_dir(fmt::format("ckpt_kill_{}", kill));
    const std::string child = CLEAVE_CHECKPOINT_KILL_CHILD;
    const std::string dir_arg = dir.string();
    char* argv[] = {const_cast<char*>(child.c_str()), const_cast<char*>(dir_arg.c_str()), nullptr};
    pid_t pid = 0;
    ASSERT_EQ(posix_spawn(&pid, child.c_str(), nullptr, nullptr, argv, environ), 0);
    if (kill >= 5) {
      // After every rank committed its first save: the steady state of saving every step.
      const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
      const auto first_committed = [&] {
        for (int r = 0; r < 4; ++r) {
          if (!fs::exists(dir / std::to_string(r) / "CKP-1_1.ckpt.commit")) return false;
        }
        return true;
      };
      while (!first_committed() && std::chrono::steady_clock::now() < deadline) {
        std::this_thread::sleep_for(std::chrono::milliseconds(2));
      }
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(delay_ms(random)));
    ::kill(pid, SIGKILL);
    int status = 0;
    ASSERT_EQ(::waitpid(pid, &status, 0), pid);
    ASSERT_TRUE(WIFSIGNALED(status)) << "the child ended by itself (status " << status << ")";

    // The newest step with a marker on every rank, and the newest with a file on any, read
    // directly from the folders.
    std::map<int64_t, int> committed_on;  // step -> ranks with its file and marker
    int64_t newest_committed = -1, newest_any = -1;
    int ranks_with_a_file = 0;
    for (int r = 0; r < 4; ++r) {
      std::error_code ec;
      bool has_file = false;
      for (const auto& e : fs::directory_iterator(dir / std::to_string(r), ec)) {
        int64_t step = 0;
        const std::string name = e.path().filename().string();
        if (std::sscanf(name.c_str(), "CKP-1_%ld.ckpt", &step) != 1 || !name.ends_with(".ckpt")) {
          continue;
        }
        has_file = true;
        newest_any = std::max(newest_any, step);
        if (fs::exists(e.path().string() + ".commit")) ++committed_on[step];
      }
      ranks_with_a_file += has_file ? 1 : 0;
    }
    for (const auto& [step, ranks] : committed_on) {
      if (ranks == 4) newest_committed = step;
    }
    if (newest_committed < 0 && (!committed_on.empty() || ranks_with_a_file < 4)) {
      if (fs::exists(dir / "0")) {
        expect_error([&] { rank_checkpoint_files(dir.string(), 4, "CKP"); }, "merge:");
      }
      fs::remove_all(dir);
      continue;
    }
    if (newest_committed < 0) {
      // Killed after every rank wrote its first file but before any wrote its marker: folders
      // without markers are taken as other tools' files are, each folder's newest. A rank writes
      // its marker before its next step, so every file is of step 1, whole (written atomically).
      newest_committed = 1;
    } else {
      ++committed;
    }
    if (newest_any > newest_committed) ++newer_than_set;
    const parallel::ParameterLayouts layouts =
        parallel::load_parameter_layouts((dir / "strategy.json").string());
    const std::vector<std::string> files = rank_checkpoint_files(dir.string(), 4, "CKP", &layouts);
    std::vector<RankCheckpoint> ranks;
    for (int r = 0; r < 4; ++r) {
      EXPECT_EQ(
          files[static_cast<size_t>(r)],
          (dir / std::to_string(r) / fmt::format("CKP-1_{}.ckpt", newest_committed)).string());
      ranks.push_back({load_checkpoint(files[static_cast<size_t>(r)]), files[r]});
    }
    const NamedTensors whole = merge_checkpoints(ranks, layouts);
    EXPECT_EQ(ParamMap(whole.begin(), whole.end()).at("step_num").item(), newest_committed);
    fs::remove_all(dir);
  }
  std::printf("%d of 20 kills after a committed set; %d of them with a newer, partial save\n",
              committed, newer_than_set);
  EXPECT_GE(committed, 15) << "kills 5 to 19 come after the first committed set";
}

}  // namespace
}  // namespace cleave::train

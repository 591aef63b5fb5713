// Resuming training from a checkpoint continues the same loss curve.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>

#include "testing/gradcheck.h"
#include "train/train_testing.h"

namespace cleave::train {
namespace {

namespace fs = std::filesystem;

struct LossRecorder : Callback {
  std::vector<double> losses;
  std::vector<int64_t> steps;
  void on_step_end(RunContext& ctx) override {
    losses.push_back(ctx.loss_value());
    steps.push_back(ctx.cur_step_num);
  }
};

struct Session {
  std::shared_ptr<testing::SmallNet> net;
  std::shared_ptr<optim::Optimizer> opt;
  std::unique_ptr<Model> model;
  dataset::DatasetPtr data;
};

// A model with weights from `weight_seed` and the shuffled blobs pipeline (always built with the
// same seed, as a rerun of the same script would).
Session make_run(uint64_t weight_seed, const std::string& optimizer = "Momentum") {
  Session r;
  set_seed(weight_seed);
  r.net = std::make_shared<testing::SmallNet>();
  if (optimizer == "Momentum") {
    r.opt = std::make_shared<optim::Momentum>(r.net->trainable_params(),
                                              optim::step_lr(0.1, 5, 0.5), 0.9);
  } else {
    r.opt = std::make_shared<optim::Adam>(r.net->trainable_params(), 0.01);
  }
  r.model = std::make_unique<Model>(
      r.net, std::make_shared<nn::SoftmaxCrossEntropyWithLogits>(true, "mean"), r.opt);
  r.data = testing::blobs_dataset(64, 16, /*seed=*/9, /*shuffle=*/true);
  return r;
}

std::string temp_dir() {
  const fs::path p = fs::temp_directory_path() / fmt::format("cleave_resume_test_{}", ::getpid());
  fs::remove_all(p);
  fs::create_directories(p);
  return p.string();
}

class Resume : public ::testing::TestWithParam<std::string> {};

TEST_P(Resume, MidEpochCheckpointContinuesTheSameLossCurve) {
  const std::string dir = temp_dir();
  // Uninterrupted: 3 epochs of 4 steps, a checkpoint every 3 steps (step 6 is epoch 2 step 2).
  Session full = make_run(1);
  auto full_losses = std::make_shared<LossRecorder>();
  auto ckpt = std::make_shared<ModelCheckpoint>(
      CheckpointConfig{.save_checkpoint_steps = 3, .keep_checkpoint_max = 10, .format = GetParam()},
      "run", dir);
  full.model->train(3, full.data, {ckpt, full_losses});
  ASSERT_EQ(full_losses->losses.size(), 12u);

  // A new process: other initial weights, a fresh pipeline, the step-6 checkpoint.
  Session resumed = make_run(2);
  resumed.model->load_train_state(dir + "/run-2_2." + GetParam());
  EXPECT_EQ(resumed.model->progress().step_num, 6);
  EXPECT_EQ(resumed.opt->step_count(), 6);
  auto resumed_losses = std::make_shared<LossRecorder>();
  resumed.model->train(3, resumed.data, {resumed_losses});
  ASSERT_EQ(resumed_losses->losses.size(), 6u);
  EXPECT_EQ(resumed_losses->steps.front(), 7);
  for (size_t i = 0; i < 6; ++i) {
    EXPECT_EQ(resumed_losses->losses[i], full_losses->losses[6 + i]) << "step " << 7 + i;
  }
  for (const auto& [name, p] : full.net->parameters_and_names()) {
    const auto theirs = resumed.net->parameters_and_names();
    const auto it = std::find_if(theirs.begin(), theirs.end(),
                                 [&name = name](const auto& q) { return q.first == name; });
    EXPECT_EQ(it->second.to_double_vector(), p.to_double_vector()) << name;
  }
  fs::remove_all(dir);
}

INSTANTIATE_TEST_SUITE_P(Train, Resume, ::testing::Values("ckpt", "safetensors"));

TEST(Resume, EpochBoundaryCheckpointFromSaveTrainState) {
  const std::string dir = temp_dir();
  Session full = make_run(1, "Adam");
  auto full_losses = std::make_shared<LossRecorder>();
  full.model->train(4, full.data, {full_losses});

  Session first = make_run(1, "Adam");
  first.model->train(2, first.data);
  first.model->save_train_state(dir + "/state.ckpt");
  Session resumed = make_run(3, "Adam");
  resumed.model->load_train_state(dir + "/state.ckpt");
  auto resumed_losses = std::make_shared<LossRecorder>();
  resumed.model->train(4, resumed.data, {resumed_losses});
  ASSERT_EQ(resumed_losses->losses.size(), 8u);
  for (size_t i = 0; i < 8; ++i) {
    EXPECT_EQ(resumed_losses->losses[i], full_losses->losses[8 + i]) << "step " << 9 + i;
  }
  fs::remove_all(dir);
}

TEST(Resume, MismatchedModelIsOneClearError) {
  const std::string dir = temp_dir();
  Session momentum = make_run(1);
  momentum.model->train(1, momentum.data);
  momentum.model->save_train_state(dir + "/m.ckpt");
  Session adam = make_run(1, "Adam");
  EXPECT_ERROR(adam.model->load_train_state(dir + "/m.ckpt"), "cannot resume training",
               "'moment1.fc1.weight' (Float32 (8, 4)) is missing",
               "'moment2.fc2.bias' (Float32 (3)) is missing", "nothing was restored");
  // A dataset with another number of batches per epoch than the saved run.
  Session other = make_run(2);
  other.model->load_train_state(dir + "/m.ckpt");
  EXPECT_ERROR(other.model->train(2, testing::blobs_dataset(24, 8)),
               "saved at epoch 1 after 4 steps", "3 batches per epoch", "in epoch 2");
  fs::remove_all(dir);
}

}  // namespace
}  // namespace cleave::train

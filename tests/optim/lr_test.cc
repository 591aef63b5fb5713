#include <gtest/gtest.h>

#include <cmath>
#include <numbers>

#include "cleave/optim/optimizer.h"
#include "testing/gradcheck.h"

namespace cleave::optim {
namespace {

TEST(LearningRate, ConstantIsTheSameAtEveryStep) {
  const LearningRate lr = 0.05;
  EXPECT_EQ(lr.at(0), 0.05);
  EXPECT_EQ(lr.at(1000), 0.05);
  EXPECT_EQ(lr.name(), "0.05");
}

TEST(LearningRate, StepLrDecaysEveryStepSizeSteps) {
  const LearningRate lr = step_lr(0.1, 3, 0.5);
  const std::vector<double> expected = {0.1, 0.1, 0.1, 0.05, 0.05, 0.05, 0.025};
  for (int64_t s = 0; s < 7; ++s) EXPECT_DOUBLE_EQ(lr.at(s), expected[s]) << "step " << s;
}

TEST(LearningRate, CosineDecayGoesFromMaxToMinThenStays) {
  const LearningRate lr = cosine_decay_lr(0.01, 0.1, 10);
  EXPECT_DOUBLE_EQ(lr.at(0), 0.1);
  EXPECT_DOUBLE_EQ(lr.at(5), 0.055);
  EXPECT_DOUBLE_EQ(lr.at(2), 0.01 + 0.045 * (1 + std::cos(std::numbers::pi * 0.2)));
  EXPECT_DOUBLE_EQ(lr.at(10), 0.01);
  EXPECT_DOUBLE_EQ(lr.at(50), 0.01);
  for (int64_t s = 1; s <= 10; ++s) EXPECT_LT(lr.at(s), lr.at(s - 1));
}

TEST(LearningRate, WarmupRisesLinearlyThenFollowsTheShiftedSchedule) {
  const LearningRate constant = warmup_lr(0.1, 4);
  const std::vector<double> expected = {0.0, 0.025, 0.05, 0.075, 0.1, 0.1};
  for (int64_t s = 0; s < 6; ++s) EXPECT_DOUBLE_EQ(constant.at(s), expected[s]) << "step " << s;

  const LearningRate decayed = warmup_lr(step_lr(0.1, 2, 0.5), 2);
  const std::vector<double> expected2 = {0.0, 0.05, 0.1, 0.1, 0.05, 0.05, 0.025};
  for (int64_t s = 0; s < 7; ++s) EXPECT_DOUBLE_EQ(decayed.at(s), expected2[s]) << "step " << s;
  EXPECT_EQ(decayed.name(), "warmup_lr(step_lr(lr=0.1, step_size=2, gamma=0.5), warmup_steps=2)");

  EXPECT_DOUBLE_EQ(warmup_lr(0.1, 0).at(0), 0.1);
}

TEST(LearningRate, CustomSchedule) {
  const LearningRate lr([](int64_t step) { return 1.0 / static_cast<double>(step + 1); },
                        "inverse");
  EXPECT_DOUBLE_EQ(lr.at(3), 0.25);
  EXPECT_EQ(lr.name(), "inverse");
}

TEST(LearningRate, BadArgumentsAreReported) {
  EXPECT_ERROR(LearningRate(-0.1), "learning rate is -0.1", ">= 0");
  EXPECT_ERROR(LearningRate(NAN), "learning rate is nan");
  EXPECT_ERROR(step_lr(0.1, 0), "step_lr: step_size is 0; expected step_size > 0");
  EXPECT_ERROR(step_lr(0.1, 2, 0.0), "step_lr: gamma is 0");
  EXPECT_ERROR(step_lr(-1, 2), "step_lr: lr is -1");
  EXPECT_ERROR(cosine_decay_lr(0.2, 0.1, 10), "cosine_decay_lr: min_lr 0.2 and max_lr 0.1",
               "0 <= min_lr <= max_lr");
  EXPECT_ERROR(cosine_decay_lr(0.0, 0.1, 0), "cosine_decay_lr: decay_steps is 0");
  EXPECT_ERROR(warmup_lr(0.1, -1), "warmup_lr: warmup_steps is -1");
  EXPECT_ERROR(LearningRate(std::function<double(int64_t)>(), "empty"),
               "learning rate schedule 'empty' is an empty function");
  const LearningRate negative([](int64_t step) { return 0.1 - 0.05 * static_cast<double>(step); },
                              "linear");
  EXPECT_ERROR(negative.at(4), "learning rate linear at step 4 is -0.1", ">= 0");
  EXPECT_ERROR(negative.at(-1), "step -1 is negative");
}

}  // namespace
}  // namespace cleave::optim

#include "cleave/train/callback.h"

#include <gtest/gtest.h>

#include <regex>

#include "testing/gradcheck.h"

namespace cleave::train {
namespace {

using ::testing::internal::CaptureStdout;
using ::testing::internal::GetCapturedStdout;

// Runs `epochs` epochs of `batch_num` steps through `cb` with losses 2.0, 1.9, ... (float32).
void drive(Callback& cb, int64_t epochs, int64_t batch_num) {
  RunContext ctx;
  ctx.epoch_num = epochs;
  ctx.batch_num = batch_num;
  cb.on_train_begin(ctx);
  float loss = 2.0f;
  for (int64_t e = 1; e <= epochs; ++e) {
    ctx.cur_epoch_num = e;
    cb.on_epoch_begin(ctx);
    for (int64_t s = 1; s <= batch_num; ++s) {
      ctx.step_in_epoch = s;
      cb.on_step_begin(ctx);
      ctx.loss = Tensor::scalar(loss);
      loss -= 0.1f;
      ++ctx.cur_step_num;
      cb.on_step_end(ctx);
    }
    cb.on_epoch_end(ctx);
  }
  cb.on_train_end(ctx);
}

TEST(LossMonitor, PrintsLikeMindSpore) {
  LossMonitor monitor(2);
  CaptureStdout();
  drive(monitor, 2, 3);
  // Steps 2, 4, 6 over all epochs; the step is counted within its epoch; the loss is the float32
  // value widened to double, in Python's repr (checked with Python's struct float32 rounding).
  EXPECT_EQ(GetCapturedStdout(),
            "epoch: 1 step: 2, loss is 1.899999976158142\n"
            "epoch: 2 step: 1, loss is 1.6999999284744263\n"
            "epoch: 2 step: 3, loss is 1.4999998807907104\n");
}

TEST(LossMonitor, DefaultPrintsEveryStepAndZeroPrintsNothing) {
  LossMonitor every;
  CaptureStdout();
  drive(every, 1, 2);
  EXPECT_EQ(GetCapturedStdout(),
            "epoch: 1 step: 1, loss is 2.0\nepoch: 1 step: 2, loss is 1.899999976158142\n");
  LossMonitor never(0);
  CaptureStdout();
  drive(never, 1, 2);
  EXPECT_EQ(GetCapturedStdout(), "");
  EXPECT_ERROR(LossMonitor(-1), "LossMonitor: per_print_times is -1");
}

TEST(LossMonitor, InvalidLossStopsTraining) {
  LossMonitor monitor;
  RunContext ctx;
  ctx.cur_epoch_num = 1;
  ctx.step_in_epoch = 3;
  ctx.cur_step_num = 3;
  ctx.loss = Tensor::scalar(std::nan(""));
  EXPECT_ERROR(monitor.on_step_end(ctx), "epoch: 1 step: 3. Invalid loss, terminating training.");
}

TEST(TimeMonitor, PrintsEpochAndStepTime) {
  TimeMonitor monitor;
  CaptureStdout();
  drive(monitor, 2, 4);
  const std::string out = GetCapturedStdout();
  const std::regex two_lines(R"((epoch time: \d+\.\d{3} ms, per step time: \d+\.\d{3} ms\n){2})");
  EXPECT_TRUE(std::regex_match(out, two_lines)) << out;
}

TEST(ProgressBar, RendersRateAndEta) {
  RunContext ctx;
  ctx.epoch_num = 10;
  ctx.cur_epoch_num = 2;
  ctx.batch_num = 100;
  ctx.step_in_epoch = 50;
  EXPECT_EQ(ProgressBar::render(ctx, 5.0),
            "epoch 2/10 [###############...............] 50/100  10.0 step/s  ETA 00:05");
  ctx.step_in_epoch = 0;
  EXPECT_EQ(ProgressBar::render(ctx, 0.0),
            "epoch 2/10 [..............................] 0/100  0.0 step/s  ETA --:--");
}

TEST(ProgressBar, SilentWhenStdoutIsNotATerminal) {
  // Under ctest stdout is a pipe or file, as in a log.
  ProgressBar bar;
  ASSERT_FALSE(bar.enabled());
  CaptureStdout();
  drive(bar, 2, 3);
  EXPECT_EQ(GetCapturedStdout(), "");
}

// A user callback sees the events in order and can stop training.
struct Recorder : Callback {
  std::string log;
  void on_train_begin(RunContext&) override { log += "B"; }
  void on_epoch_begin(RunContext& c) override { log += fmt::format("e{}", c.cur_epoch_num); }
  void on_step_end(RunContext& c) override { log += fmt::format("s{}", c.cur_step_num); }
  void on_epoch_end(RunContext&) override { log += "E"; }
  void on_train_end(RunContext&) override { log += "T"; }
};

TEST(Callback, UserCallbackSeesEveryEvent) {
  Recorder rec;
  drive(rec, 2, 2);
  EXPECT_EQ(rec.log, "Be1s1s2Ee2s3s4ET");
}

}  // namespace
}  // namespace cleave::train

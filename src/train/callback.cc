// RunContext, LossMonitor, TimeMonitor and ProgressBar.
#include "cleave/train/callback.h"

#include <fmt/format.h>

#include <cmath>

#include "cleave/core/error.h"
#include "cleave/train/python_format.h"
#include "train/console.h"

namespace cleave::train {

double RunContext::loss_value() const {
  CLEAVE_CHECK_ARG(loss.defined(), "RunContext: no loss yet; the loss is set once a step has run");
  // The mean, as MindSpore's _handle_loss does for a loss with several elements.
  const std::vector<double> values = loss.to_double_vector();
  CLEAVE_CHECK_ARG(!values.empty(), "RunContext: the loss has no elements (shape {})",
                   loss.shape().to_string());
  if (values.size() == 1) return values[0];
  double sum = 0.0;
  for (double v : values) sum += v;
  return static_cast<double>(static_cast<float>(sum / static_cast<double>(values.size())));
}

void print_line(const std::string& line) { console::print_line(line); }

// ---- LossMonitor ----

LossMonitor::LossMonitor(int64_t per_print_times) : per_print_times_(per_print_times) {
  CLEAVE_CHECK_ARG(per_print_times >= 0,
                   "LossMonitor: per_print_times is {}; expected an integer >= 0 (0 prints "
                   "nothing)",
                   per_print_times);
}

void LossMonitor::on_train_begin(RunContext& ctx) {
  // A resumed run continues the print rhythm of the steps already done.
  last_print_step_ = per_print_times_ > 0 ? ctx.cur_step_num - ctx.cur_step_num % per_print_times_
                                          : ctx.cur_step_num;
}

void LossMonitor::on_step_end(RunContext& ctx) {
  if (!ctx.loss.defined()) return;  // a placed network's loss is on worker 0 only
  const double loss = ctx.loss_value();
  if (std::isnan(loss) || std::isinf(loss)) {
    CLEAVE_FAIL("epoch: {} step: {}. Invalid loss, terminating training.", ctx.cur_epoch_num,
                ctx.step_in_epoch);
  }
  if (per_print_times_ == 0 || ctx.cur_step_num - last_print_step_ < per_print_times_) return;
  last_print_step_ = ctx.cur_step_num;
  print_line(fmt::format("epoch: {} step: {}, loss is {}", ctx.cur_epoch_num, ctx.step_in_epoch,
                         python_float_repr(loss)));
}

// ---- TimeMonitor ----

void TimeMonitor::on_epoch_begin(RunContext& ctx) {
  epoch_start_ = std::chrono::steady_clock::now();
  steps_in_epoch_ = 0;
}

void TimeMonitor::on_step_end(RunContext& ctx) { ++steps_in_epoch_; }

void TimeMonitor::on_epoch_end(RunContext& ctx) {
  const double epoch_ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - epoch_start_)
          .count();
  const int64_t steps = steps_in_epoch_ > 0 ? steps_in_epoch_ : 1;
  print_line(fmt::format("epoch time: {:5.3f} ms, per step time: {:5.3f} ms", epoch_ms,
                         epoch_ms / static_cast<double>(steps)));
}

// ---- ProgressBar ----

ProgressBar::ProgressBar() : enabled_(console::stdout_is_terminal()) {}

std::string ProgressBar::render(const RunContext& ctx, double elapsed_s) {
  constexpr int64_t kWidth = 30;
  const int64_t total = ctx.batch_num > 0 ? ctx.batch_num : 1;
  const int64_t done = ctx.step_in_epoch < total ? ctx.step_in_epoch : total;
  const int64_t filled = done * kWidth / total;
  const double rate = elapsed_s > 0 ? static_cast<double>(done) / elapsed_s : 0.0;
  std::string eta = "--:--";
  if (rate > 0) {
    const auto left = static_cast<int64_t>(std::lround(static_cast<double>(total - done) / rate));
    eta = left >= 3600 ? fmt::format("{}:{:02}:{:02}", left / 3600, left / 60 % 60, left % 60)
                       : fmt::format("{:02}:{:02}", left / 60, left % 60);
  }
  return fmt::format("epoch {}/{} [{}{}] {}/{}  {:.1f} step/s  ETA {}", ctx.cur_epoch_num,
                     ctx.epoch_num, std::string(static_cast<size_t>(filled), '#'),
                     std::string(static_cast<size_t>(kWidth - filled), '.'), done, total, rate,
                     eta);
}

void ProgressBar::on_epoch_begin(RunContext& ctx) {
  epoch_start_ = std::chrono::steady_clock::now();
}

void ProgressBar::on_step_end(RunContext& ctx) {
  if (!enabled_) return;
  const double elapsed =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - epoch_start_).count();
  console::set_status(render(ctx, elapsed));
}

void ProgressBar::on_epoch_end(RunContext& ctx) {
  if (enabled_) console::clear_status();
}

void ProgressBar::on_train_end(RunContext& ctx) {
  if (enabled_) console::clear_status();
}

}  // namespace cleave::train

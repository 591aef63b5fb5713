// Learning rates: constants and schedules over the optimizer's step number.
#include <cmath>
#include <numbers>

#include "cleave/core/error.h"
#include "cleave/optim/optimizer.h"

namespace cleave::optim {

LearningRate::LearningRate(double value) : name_(fmt::format("{}", value)) {
  CLEAVE_CHECK_ARG(std::isfinite(value) && value >= 0,
                   "learning rate is {}; expected a finite value >= 0", value);
  schedule_ = [value](int64_t) { return value; };
}

LearningRate::LearningRate(std::function<double(int64_t step)> schedule, std::string name)
    : schedule_(std::move(schedule)), name_(std::move(name)) {
  CLEAVE_CHECK_ARG(schedule_ != nullptr, "learning rate schedule '{}' is an empty function", name_);
}

double LearningRate::at(int64_t step) const {
  CLEAVE_CHECK_ARG(step >= 0, "learning rate {}: step {} is negative; steps count from 0", name_,
                   step);
  const double value = schedule_(step);
  CLEAVE_CHECK_ARG(std::isfinite(value) && value >= 0,
                   "learning rate {} at step {} is {}; expected a finite value >= 0", name_, step,
                   value);
  return value;
}

LearningRate step_lr(double lr, int64_t step_size, double gamma) {
  CLEAVE_CHECK_ARG(std::isfinite(lr) && lr >= 0, "step_lr: lr is {}; expected a finite lr >= 0",
                   lr);
  CLEAVE_CHECK_ARG(step_size > 0, "step_lr: step_size is {}; expected step_size > 0", step_size);
  CLEAVE_CHECK_ARG(std::isfinite(gamma) && gamma > 0, "step_lr: gamma is {}; expected gamma > 0",
                   gamma);
  return LearningRate(
      [=](int64_t step) { return lr * std::pow(gamma, static_cast<double>(step / step_size)); },
      fmt::format("step_lr(lr={}, step_size={}, gamma={})", lr, step_size, gamma));
}

LearningRate cosine_decay_lr(double min_lr, double max_lr, int64_t decay_steps) {
  CLEAVE_CHECK_ARG(
      std::isfinite(min_lr) && std::isfinite(max_lr) && 0 <= min_lr && min_lr <= max_lr,
      "cosine_decay_lr: min_lr {} and max_lr {} must satisfy 0 <= min_lr <= max_lr", min_lr,
      max_lr);
  CLEAVE_CHECK_ARG(decay_steps > 0, "cosine_decay_lr: decay_steps is {}; expected decay_steps > 0",
                   decay_steps);
  return LearningRate(
      [=](int64_t step) {
        if (step >= decay_steps) return min_lr;
        const double progress = static_cast<double>(step) / static_cast<double>(decay_steps);
        return min_lr + 0.5 * (max_lr - min_lr) * (1.0 + std::cos(std::numbers::pi * progress));
      },
      fmt::format("cosine_decay_lr(min_lr={}, max_lr={}, decay_steps={})", min_lr, max_lr,
                  decay_steps));
}

// During warmup the rate rises linearly, lr(step) = after(0) * step / warmup_steps, so that it
// reaches after(0) at step warmup_steps, where `after` starts: lr(step) = after(step -
// warmup_steps) from then on.
LearningRate warmup_lr(LearningRate after, int64_t warmup_steps) {
  CLEAVE_CHECK_ARG(warmup_steps >= 0, "warmup_lr: warmup_steps is {}; expected warmup_steps >= 0",
                   warmup_steps);
  const std::string name =
      fmt::format("warmup_lr({}, warmup_steps={})", after.name(), warmup_steps);
  return LearningRate(
      [after = std::move(after), warmup_steps](int64_t step) {
        if (step >= warmup_steps) return after.at(step - warmup_steps);
        return after.at(0) * static_cast<double>(step) / static_cast<double>(warmup_steps);
      },
      name);
}

}  // namespace cleave::optim

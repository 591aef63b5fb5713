// Optimizers (mindspore.nn.Momentum, SGD, Adam, AdamW) and learning-rate schedules.
//
// An optimizer holds the parameters it updates (sharing their storage) and their state. step()
// applies one update from each parameter's .grad() (parameters without a gradient are skipped);
// apply(grads) takes the gradients explicitly, in the order of the parameters. Updates run as
// in-place primitives (ApplyMomentum, ...) under no-grad.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "cleave/core/tensor.h"

namespace cleave::optim {

// A learning rate: a constant or a function of the step number (0-based, counted by the
// optimizer).
class LearningRate {
 public:
  LearningRate(double value);  // NOLINT: implicit so that optimizers take 0.01
  explicit LearningRate(std::function<double(int64_t step)> schedule, std::string name);
  double at(int64_t step) const;
  const std::string& name() const { return name_; }

 private:
  std::function<double(int64_t)> schedule_;
  std::string name_;
};

// lr * gamma^(step / step_size).
LearningRate step_lr(double lr, int64_t step_size, double gamma = 0.1);
// Cosine from max_lr to min_lr over decay_steps, then min_lr.
LearningRate cosine_decay_lr(double min_lr, double max_lr, int64_t decay_steps);
// Linear from 0 to `after`'s value at warmup_steps over warmup_steps, then `after` (shifted).
LearningRate warmup_lr(LearningRate after, int64_t warmup_steps);

class Optimizer {
 public:
  Optimizer(std::string name, std::vector<Tensor> params, LearningRate lr, double weight_decay);
  virtual ~Optimizer() = default;

  // One update from the parameters' .grad(); increments the step count.
  void step();
  // One update from `grads` (one per parameter, same shapes; undefined = skip).
  void apply(const std::vector<Tensor>& grads);
  // Clears every parameter's .grad().
  void zero_grad();

  const std::vector<Tensor>& parameters() const { return params_; }
  // "Momentum", "SGD", "Adam", "AdamW": the prefix of this optimizer's errors.
  const std::string& name() const { return name_; }
  int64_t step_count() const { return step_; }
  // Sets the step count (the learning-rate schedule's position), e.g. when resuming training
  // from a checkpoint; step >= 0.
  void set_step_count(int64_t step);
  double current_lr() const { return lr_.at(step_); }
  // Counts one step that ran the update outside apply() (a cached compiled training step).
  void advance_step() { ++step_; }
  // The learning rate input of the update primitives: a one-element Float64 tensor that apply()
  // sets to current_lr() before the updates. A compiled training step reads it when it runs, so
  // write_lr() must precede each run of a cached step.
  const Tensor& lr_input() const { return lr_input_; }
  void write_lr() const;
  // The optimizer state tensors (for checkpoints), named "<state>.<param index>".
  virtual std::vector<std::pair<std::string, Tensor>> state() const = 0;
  // The state that is not a tensor (per-parameter update counts, first-update flags) as new Int64
  // tensors, for checkpoints; empty when there is none. load_counters() restores values of the
  // same names and shapes (the caller checks them).
  virtual std::vector<std::pair<std::string, Tensor>> counters() const { return {}; }
  virtual void load_counters(const std::vector<std::pair<std::string, Tensor>>& counters) {}

 protected:
  // Updates parameter i in place from its gradient; `lr` is lr_input() (pass it to the
  // primitive as an input, not its value as an attribute, so that tracing records a read).
  virtual void update(size_t i, const Tensor& grad, const Tensor& lr) = 0;
  double weight_decay_;

 private:
  std::string name_;
  std::vector<Tensor> params_;
  LearningRate lr_;
  int64_t step_ = 0;
  Tensor lr_input_;
};

// MindSpore's Momentum: accum = momentum * accum + grad; param -= lr * accum (nesterov:
// param -= lr * (grad + momentum * accum)).
class Momentum : public Optimizer {
 public:
  Momentum(std::vector<Tensor> params, LearningRate lr, double momentum, double weight_decay = 0.0,
           bool use_nesterov = false);
  std::vector<std::pair<std::string, Tensor>> state() const override;

 protected:
  void update(size_t i, const Tensor& grad, const Tensor& lr) override;

 private:
  double momentum_;
  bool nesterov_;
  std::vector<Tensor> accum_;
};

struct SGDOptions {
  double momentum = 0.0;
  double dampening = 0.0;
  double weight_decay = 0.0;
  bool nesterov = false;
};
// PyTorch/MindSpore SGD with momentum, dampening, nesterov and weight decay.
class SGD : public Optimizer {
 public:
  SGD(std::vector<Tensor> params, LearningRate lr, SGDOptions options = {});
  std::vector<std::pair<std::string, Tensor>> state() const override;
  // "accum_started": 1 for each parameter updated at least once.
  std::vector<std::pair<std::string, Tensor>> counters() const override;
  void load_counters(const std::vector<std::pair<std::string, Tensor>>& counters) override;

 protected:
  void update(size_t i, const Tensor& grad, const Tensor& lr) override;

 private:
  SGDOptions options_;
  std::vector<Tensor> accum_;
  // Per parameter: the SGD primitive's one-element `stat` (1 until the first update).
  std::vector<Tensor> stat_;
};

struct AdamOptions {
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
  double weight_decay = 0.0;  // Adam: L2 added to the gradient; AdamW: decoupled
};
class Adam : public Optimizer {
 public:
  Adam(std::vector<Tensor> params, LearningRate lr, AdamOptions options = {});
  std::vector<std::pair<std::string, Tensor>> state() const override;
  // "param_steps": the updates applied to each parameter (the t of the bias correction).
  std::vector<std::pair<std::string, Tensor>> counters() const override;
  void load_counters(const std::vector<std::pair<std::string, Tensor>>& counters) override;

 protected:
  // For AdamW: `decoupled` applies weight decay to the parameter instead of the gradient.
  Adam(std::string name, std::vector<Tensor> params, LearningRate lr, AdamOptions options,
       bool decoupled);
  void update(size_t i, const Tensor& grad, const Tensor& lr) override;
  AdamOptions options_;
  std::vector<Tensor> m_, v_;
  bool decoupled_ = false;
  // Per parameter: the updates applied so far (the t of the bias correction; a parameter skipped
  // for lack of a gradient does not advance, as in PyTorch), a one-element tensor of the
  // parameter's dtype that the Adam primitive increments (exact in Float32 up to 2^24 steps).
  std::vector<Tensor> steps_;
};
class AdamW : public Adam {
 public:
  AdamW(std::vector<Tensor> params, LearningRate lr, AdamOptions options = {.weight_decay = 1e-2});
};

}  // namespace cleave::optim

// Callbacks of Model::train (mindspore.train.Callback, LossMonitor, TimeMonitor) and a progress
// bar.
//
// A callback is told of the training loop's events through the hooks below, each given the run
// context (epoch, step, the step's loss, the network and optimizer). Users derive from Callback
// and override the hooks they need; Model::train calls every callback's hook in list order. A hook
// may call RunContext::request_stop() to end training after the current step.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "cleave/core/tensor.h"
#include "cleave/nn/cell.h"
#include "cleave/optim/optimizer.h"

namespace cleave::train {

class TrainStep;

// The state of the training loop a callback sees (MindSpore's cb_params). Steps are counted from
// 1; cur_step_num counts every step since the start of training (over all epochs, including
// those before a resume), step_in_epoch restarts at 1 each epoch.
struct RunContext {
  int64_t epoch_num = 0;      // epochs to train (the `epoch` of Model::train)
  int64_t batch_num = 0;      // steps per epoch (the dataset size)
  int64_t cur_epoch_num = 0;  // the current epoch, 1-based
  int64_t cur_step_num = 0;   // steps done in all, including this one once it ran
  int64_t step_in_epoch = 0;  // the current step within its epoch, 1-based
  Tensor loss;                // the loss of the step just run (on_step_end); undefined before
  nn::Cell* network = nullptr;
  optim::Optimizer* optimizer = nullptr;
  // The step runs partitioned over several workers (Cell::place): each worker holds the current
  // values only of the parameters (and optimizer state) its part updates, until
  // train_step->share_placed_state() (NOTE [Saving a placed network]) gathers them.
  bool placed = false;
  TrainStep* train_step = nullptr;  // set by Model.train

  // The loss as a double (a float32 loss widened exactly, as Python's float(np.mean(loss))).
  double loss_value() const;
  // Ends training after the current step; on_epoch_end and on_train_end still run.
  void request_stop() { stop_requested = true; }
  bool stop_requested = false;
};

class Callback {
 public:
  virtual ~Callback() = default;
  virtual void on_train_begin(RunContext& ctx) {}
  virtual void on_epoch_begin(RunContext& ctx) {}
  virtual void on_step_begin(RunContext& ctx) {}
  virtual void on_step_end(RunContext& ctx) {}
  virtual void on_epoch_end(RunContext& ctx) {}
  virtual void on_train_end(RunContext& ctx) {}
};

using CallbackPtr = std::shared_ptr<Callback>;

// Prints "epoch: 1 step: 20, loss is 2.241283893585205" when at least per_print_times steps have
// passed since the last line (counted over all epochs, as MindSpore does), the step counted within
// its epoch and the loss in Python's repr. A loss that is NaN or infinite throws Error
// ("epoch: 1 step: 3. Invalid loss, terminating training."). per_print_times >= 0; 0 prints
// nothing.
class LossMonitor : public Callback {
 public:
  explicit LossMonitor(int64_t per_print_times = 1);
  void on_train_begin(RunContext& ctx) override;
  void on_step_end(RunContext& ctx) override;

 private:
  int64_t per_print_times_;
  int64_t last_print_step_ = 0;
};

// Prints at each epoch's end "epoch time: 1234.567 ms, per step time: 12.345 ms": the epoch's wall
// time and its mean over the epoch's steps.
class TimeMonitor : public Callback {
 public:
  TimeMonitor() = default;
  void on_epoch_begin(RunContext& ctx) override;
  void on_step_end(RunContext& ctx) override;
  void on_epoch_end(RunContext& ctx) override;

 private:
  std::chrono::steady_clock::time_point epoch_start_;
  int64_t steps_in_epoch_ = 0;
};

// A one-line progress bar redrawn every step: epoch, step of the epoch, steps/s and the time left
// in the epoch ("epoch 1/10 [#####.....] 940/1875  212.4 step/s  ETA 00:04"). Drawn only when
// standard output is a terminal; in a log file (or a pipe) it prints nothing, so logs hold only
// the other callbacks' lines. Lines that other callbacks print appear above the bar.
class ProgressBar : public Callback {
 public:
  ProgressBar();
  void on_epoch_begin(RunContext& ctx) override;
  void on_step_end(RunContext& ctx) override;
  void on_epoch_end(RunContext& ctx) override;
  void on_train_end(RunContext& ctx) override;
  // Whether this bar draws (stdout is a terminal).
  bool enabled() const { return enabled_; }

  // The bar's text for a state of the loop (for tests): `elapsed_s` seconds since the epoch
  // began.
  static std::string render(const RunContext& ctx, double elapsed_s);

 private:
  bool enabled_;
  std::chrono::steady_clock::time_point epoch_start_;
};

// Writes a line to standard output (and flushes), above the progress bar when one is drawn. The
// callbacks print through this; user callbacks may too.
void print_line(const std::string& line);

}  // namespace cleave::train

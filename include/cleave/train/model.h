// Model (mindspore.train.Model): trains, evaluates and runs a network over datasets.
//
//   auto model = train::Model(net, loss_fn, opt, {{"Accuracy", std::make_shared<Accuracy>()}});
//   model.train(10, ds_train, {std::make_shared<LossMonitor>(), std::make_shared<TimeMonitor>()});
//   std::cout << "Accuracy is: " << model.eval(ds_eval) << "\n";  // {'Accuracy': 0.98...}
//
// Datasets give rows (data, label): the first column is the network's input, the second the
// label. One epoch of train() is one pass of the dataset (dataset->create_tuple_iterator()).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "cleave/core/tensor.h"
#include "cleave/data/dataset.h"
#include "cleave/nn/cell.h"
#include "cleave/optim/optimizer.h"
#include "cleave/optim/train_one_step.h"
#include "cleave/train/callback.h"
#include "cleave/train/checkpoint.h"
#include "cleave/train/metrics.h"

namespace cleave::train {

// One training step on one batch: updates the parameters and returns the batch's loss (detached).
// Model runs every step through one TrainStep, so that the way a step is executed (eagerly now, a
// compiled graph later) is swapped in one place.
class TrainStep {
 public:
  virtual ~TrainStep() = default;
  virtual Tensor operator()(const Tensor& data, const Tensor& label) = 0;
  // Whether the step reads the values of its data and label (after its first call). false on the
  // workers of a placed network whose part of the step reads neither: they need only the batch
  // shapes (NOTE [Workers that read no batch] in model.cc).
  virtual bool reads_inputs() const { return true; }
  // Per argument, {data, label}: whether the step reads its values (after its first call). A
  // worker of a placed network whose part reads only the label gets {false, true}: Model then
  // asks the dataset for the label column only (NOTE [Workers that read no batch] in model.cc).
  // By default both are reads_inputs().
  virtual std::vector<bool> inputs_read() const { return {reads_inputs(), reads_inputs()}; }
  // Whether the step runs partitioned over several workers (after its first call).
  virtual bool placed() const { return false; }
  // A placed step: gives every worker the current values of `tensors` (the training state, the
  // same list on every worker; collective, NOTE [Saving a placed network] in
  // cleave/runtime/placed_state.h). The default, for steps that cannot, throws when placed().
  virtual void share_placed_state(const std::vector<Tensor>& tensors);
  // Compiles the step for batches shaped as `data` and `label` without running it (Model::build);
  // the default, for a step that compiles nothing ahead, does nothing.
  virtual void compile(const Tensor& data, const Tensor& label);
};

// The PyNative (eager) step: loss = loss_fn(network(data), label) (or network(data, label) when
// loss_fn is null), autodiff::backward(loss), optimizer.step(), optimizer.zero_grad().
class EagerTrainStep : public TrainStep {
 public:
  EagerTrainStep(nn::CellPtr network, nn::CellPtr loss_fn,
                 std::shared_ptr<optim::Optimizer> optimizer);
  Tensor operator()(const Tensor& data, const Tensor& label) override;

 private:
  nn::CellPtr network_;
  nn::CellPtr loss_fn_;
  std::shared_ptr<optim::Optimizer> optimizer_;
};

// The step of the current execution mode (runtime::set_context): in GRAPH_MODE, the default, the
// forward, loss, backward and update are traced and compiled once per input signature and run as
// one graph; in PYNATIVE_MODE they run eagerly. Both through optim::TrainOneStep over
// WithLossCell(network, loss_fn) (or the network itself when loss_fn is null).
class ContextTrainStep : public TrainStep {
 public:
  ContextTrainStep(nn::CellPtr network, nn::CellPtr loss_fn,
                   std::shared_ptr<optim::Optimizer> optimizer);
  Tensor operator()(const Tensor& data, const Tensor& label) override;
  bool reads_inputs() const override { return step_->reads_inputs(); }
  std::vector<bool> inputs_read() const override { return step_->inputs_read(); }
  bool placed() const override { return step_->placed(); }
  void share_placed_state(const std::vector<Tensor>& tensors) override {
    step_->share_placed_state(tensors);
  }
  void compile(const Tensor& data, const Tensor& label) override;

 private:
  std::unique_ptr<optim::TrainOneStep> step_;
};

class Model {
 public:
  // network: maps data to outputs (logits); loss_fn: (outputs, label) -> loss, or null when the
  // network itself takes (data, label) and returns the loss (train only). optimizer: needed by
  // train(). metrics: what eval() computes, by name. The Model shares ownership of all of them
  // (NOTE [Ownership of networks and optimizers] in cleave/optim/train_one_step.h).
  Model(nn::CellPtr network, nn::CellPtr loss_fn = nullptr,
        std::shared_ptr<optim::Optimizer> optimizer = nullptr, MetricMap metrics = {});

  // Trains `epoch` epochs (MindSpore's Model.train): epochs 1..epoch, steps counted from 1. After
  // load_train_state(), the next train() instead continues from the step after the saved one (the
  // rest of the saved epoch, then the next epochs up to `epoch`), so that a resumed run continues
  // the same loss curve as an uninterrupted one. Calls the callbacks in list order. Rows must have
  // 2 columns (data, label). dataset_sink_mode = true is accepted and runs like false, as
  // MindSpore does on CPU (with a note on stderr). Throws Error without an optimizer, for
  // epoch < 1, an empty dataset or rows of the wrong arity.
  void train(int64_t epoch, const dataset::DatasetPtr& train_dataset,
             const std::vector<CallbackPtr>& callbacks = {}, bool dataset_sink_mode = false);

  // Runs the network in inference mode (no gradients, Dropout off) over one epoch of
  // `valid_dataset` and returns every metric's value. A placed network (Cell::place in a job of
  // several workers) computes the metrics on worker 0; the other workers return no values. Throws
  // Error without metrics, for an empty dataset, or when a Loss metric is asked for without a
  // loss_fn.
  EvalResult eval(const dataset::DatasetPtr& valid_dataset, bool dataset_sink_mode = false);

  // The network's output for `data`, in inference mode without gradients (an undefined Tensor on
  // the workers other than 0 of a placed network).
  Tensor predict(const Tensor& data);

  // Replaces the training step (by default a ContextTrainStep of the network, loss and optimizer).
  void set_train_step(std::shared_ptr<TrainStep> step);

  // Compiles the training step for the batches of `train_dataset` (its first batch's shapes; the
  // dataset's epochs are left as they were) without running a step, as MindSpore's Model.build:
  // in SEMI_AUTO_PARALLEL and AUTO_PARALLEL the parameters and the optimizer state then hold this
  // rank's slices, so that load_distributed_checkpoint reads only the files holding them. Every
  // rank of a job calls it (the slicing is collective). Nothing in PYNATIVE_MODE. Throws Error
  // without an optimizer or for an empty dataset or rows of the wrong arity.
  void build(const dataset::DatasetPtr& train_dataset);

  // Writes everything needed to resume training to `path` (.ckpt or .safetensors; see
  // checkpoint.h): the parameters, the optimizer's state and step count, and the epoch and step
  // reached (the ModelCheckpoint layout). For a placed network every worker must call it (it
  // gathers the state first: NOTE [Saving a placed network] in cleave/runtime/placed_state.h) and
  // every worker writes the same file.
  void save_train_state(const std::string& path) const;
  // Restores what save_train_state (or ModelCheckpoint) wrote into this model's network and
  // optimizer; the next train() continues after the saved step. Give that train() a freshly built
  // dataset pipeline with the same seed and batches per epoch as the saved run: it skips the
  // epochs and steps already done, so it sees the batches the uninterrupted run saw. Throws Error
  // listing every missing or mismatched tensor (and changes nothing then). In a job of several
  // ranks it is collective: each rank then checks that every rank loaded the same step, and
  // throws Error naming the steps otherwise (their values are loaded by then; train() must not
  // follow).
  void load_train_state(const std::string& path);
  // Restores the newest checkpoint set `directory` holds (one folder per rank, as ModelCheckpoint
  // writes them), saved by a job under `strategy_file` ("" when it sharded nothing), whatever
  // this job's device count and strategy (train::load_distributed_checkpoint); call it before the
  // first train(), after build() for each rank to read only the files holding its slices. The
  // next train() continues after the saved step, as after load_train_state. The files this rank
  // read: loaded_files().
  void load_distributed_checkpoint(const std::string& directory, const std::string& strategy_file,
                                   const std::string& prefix = "");
  // The checkpoint files the last load_distributed_checkpoint read on this rank.
  const std::vector<std::string>& loaded_files() const { return loaded_files_; }

  // Where training stands: the epoch of the last step run and the steps run in all.
  const TrainProgress& progress() const { return progress_; }

  const nn::CellPtr& network() const { return network_; }
  const std::shared_ptr<optim::Optimizer>& optimizer() const { return optimizer_; }

 private:
  // Continues after `progress` (loaded from `source`); in a job, checks that every rank loaded
  // the same step (collective).
  void resume_from(const TrainProgress& progress, const std::string& source);

  nn::CellPtr network_;
  nn::CellPtr loss_fn_;
  std::shared_ptr<optim::Optimizer> optimizer_;
  MetricMap metrics_;
  std::shared_ptr<TrainStep> train_step_;
  // eval() and predict(): compiled in GRAPH_MODE, eager in PYNATIVE_MODE.
  std::unique_ptr<optim::Forward> forward_;
  TrainProgress progress_;
  // The steps a loaded checkpoint had done, until the next train() resumes after them; -1: none.
  int64_t resume_step_ = -1;
  int64_t resume_epoch_ = 0;
  std::vector<std::string> loaded_files_;
};

}  // namespace cleave::train

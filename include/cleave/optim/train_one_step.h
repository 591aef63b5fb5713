// One training step (MindSpore's TrainOneStepCell), in PYNATIVE_MODE or GRAPH_MODE.
#pragma once

#include <cstddef>
#include <map>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include "cleave/core/tensor.h"
#include "cleave/nn/cell.h"
#include "cleave/optim/optimizer.h"
#include "cleave/runtime/executor.h"
#include "cleave/runtime/pipeline.h"

namespace cleave::optim {

// step(data, label): loss = net_with_loss(data, label), gradients of the loss with respect to
// the optimizer's parameters, and the optimizer's update; returns the loss (a new tensor).
//
// Training mode: every call first puts the whole network in training mode
// (net_with_loss->set_train(true)), as Model.train does, so BatchNorm normalises with the batch
// statistics and updates its moving ones, and Dropout drops, whatever mode the network was left in
// (a new Cell starts in inference mode). The network stays in training mode after the call; for
// evaluation, set_train(false) it (Model.eval and Model.predict switch to inference mode and back).
//
// In PYNATIVE_MODE (runtime::set_context) each op runs at once with the tape (autodiff::backward
// then optimizer.step(); parameters' .grad() hold the gradients afterwards). In GRAPH_MODE the
// first call for an input signature (shapes and dtypes of data and label) traces construct, appends
// the backward (autodiff::graph_grad) and the optimizer's update into one graph, compiles it (NOTE
// [Compile pipeline]) and caches it; every call runs the cached graph, which updates the parameters
// and optimizer state in place (.grad() is not set). Every optimizer (Momentum, SGD, Adam, AdamW)
// updates inside the graph: the per-step scalars are tensors the update primitives read when they
// run (Optimizer::lr_input(), written before each run; SGD's first-update flags and Adam's step
// counts, which the kernels advance), not attributes, so a learning-rate schedule runs on one
// compiled graph.
//
// A placed network (Cell::place after cleave::init() in a job of several workers) is partitioned
// (the partition pass of NOTE [Compile pipeline]): every worker runs its part of the step, and
// the loss is returned on worker 0 only (an undefined Tensor elsewhere). With
// runtime::set_auto_parallel_context({.pipeline_micro_batches = M}), M > 1, the step runs as M
// micro-batches (NOTE [Micro-batches] in cleave/parallel/partition.h). With parallel_mode
// SEMI_AUTO_PARALLEL the step is sharded by the operators' strategies (NOTE [Step-parallel
// rewrite] in cleave/parallel/step_parallel.h): data and label are this rank's batch (its slice of
// the global batch with the default dataset_strategy "data_parallel"), the parameters hold this
// rank's slices afterwards (NOTE [Sharded parameters]), and every rank returns the loss.
//
// NOTE [Ownership of networks and optimizers]
// TrainOneStep, Forward and train::Model share ownership of the network and the optimizer they
// are given (nn::CellPtr, std::shared_ptr<Optimizer>): each keeps them alive as long as it needs
// them, whatever the caller does with its own pointers, and the caller may keep using them (read
// parameters, change the learning rate, set_train). Null is rejected when the object is made.
//
// Throws Error when net_with_loss or optimizer is null.
class TrainOneStep {
 public:
  TrainOneStep(nn::CellPtr net_with_loss, std::shared_ptr<Optimizer> optimizer);

  Tensor operator()(const Tensor& data, const Tensor& label);

  // Compiles the step for data and label of these metas without running it (GRAPH_MODE; nothing
  // in PYNATIVE_MODE), as the first call would: the parameters of a sharded step then hold this
  // rank's slices (NOTE [Sharded parameters]; collective then, as that call is) and the next call
  // of that signature runs the cached graph. The optimizer's step count is left as it was.
  void compile(const ir::TensorMeta& data, const ir::TensorMeta& label);

  // The step as the compiler sees it for data and label of these metas (GRAPH_MODE): compile it
  // with runtime::compile for a dry run of any rank (a plan, nothing run, no parameter changed;
  // tracing the update advances the optimizer's step count, as a call would). Puts the network
  // in training mode. The program refers to this object, which must outlive it.
  runtime::StepProgram program(const ir::TensorMeta& data, const ir::TensorMeta& label);

  // Whether the last call's graph reads the data or the label (always true in PYNATIVE_MODE and
  // before the first call); false on a worker whose part of a placed step reads neither.
  bool reads_inputs() const { return last_ == nullptr || last_->reads_inputs(); }
  // Per argument, {data, label}: whether the last call's graph reads it (with micro-batches, any
  // micro-batch's slice of it); {true, true} in PYNATIVE_MODE and before the first call. On a
  // worker of a placed step, e.g. {false, true} where only the loss's part reads the label: the
  // other argument must still be given with its shape and dtype, but its values are not read.
  std::vector<bool> inputs_read() const;
  // Whether the last call's graph is one worker's part of a placed step.
  bool placed() const { return last_ != nullptr && last_->placed(); }
  // Placed: gives every worker the current values of `tensors` (the training state, the same list
  // on every worker; collective: NOTE [Saving a placed network] in cleave/runtime/placed_state.h).
  // Not placed: nothing to do.
  void share_placed_state(const std::vector<Tensor>& tensors) const;
  // The threads that split the last call's batch (NOTE [Threads split the batch] in
  // cleave/runtime/pipeline.h); 1 when none did, in PYNATIVE_MODE and before the first call.
  int thread_split() const { return last_step_ == nullptr ? 1 : last_step_->thread_split(); }
  // Graphs compiled so far (GRAPH_MODE).
  size_t num_compiled() const { return cache_.size(); }
  // The executor the last GRAPH_MODE call ran (null before one): its graph and memory plan.
  const runtime::Executor* last_executor() const { return last_; }
  runtime::Executor* last_executor() { return last_; }  // e.g. to turn on profiling

 private:
  Tensor step_pynative(const Tensor& data, const Tensor& label);

  nn::CellPtr net_;
  std::shared_ptr<Optimizer> optimizer_;
  // (data signature, label signature, training, micro-batches, parallel mode)
  using Key = std::tuple<std::string, std::string, bool, int, int>;
  Key cache_key(std::string data_signature, std::string label_signature) const;
  std::map<Key, std::unique_ptr<runtime::CompiledStep>> cache_;
  runtime::Executor* last_ = nullptr;
  runtime::CompiledStep* last_step_ = nullptr;
};

// The forward of a one-input cell (evaluation / prediction), compiled in GRAPH_MODE (once per
// input signature, without gradients) and run eagerly under NoGradGuard in PYNATIVE_MODE. A
// placed network returns its output on worker 0 and an undefined Tensor on the other workers.
// The network runs in its current mode (Cell::training(); Model.eval and Model.predict put it in
// inference mode first). Shares ownership of the cell (NOTE [Ownership of networks and
// optimizers]); throws Error when it is null.
class Forward {
 public:
  explicit Forward(nn::CellPtr net);
  Tensor operator()(const Tensor& x);
  // The forward as the compiler sees it for inputs of this meta (see TrainOneStep::program).
  runtime::StepProgram program(const ir::TensorMeta& x);
  size_t num_compiled() const { return cache_.size(); }

 private:
  nn::CellPtr net_;
  std::map<std::tuple<std::string, bool, int>, std::unique_ptr<runtime::CompiledStep>> cache_;
};

}  // namespace cleave::optim

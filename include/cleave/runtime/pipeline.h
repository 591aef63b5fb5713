// The compile pipeline of GRAPH_MODE: one owner from a traced step to its executor.
//
// NOTE [Compile pipeline]
// compile_step runs these stages, numbered as in the dumps (save_graphs >= 1 writes
// NN_<stage>.ir and NN_<stage>.dot under save_graphs_path/<graph name>/):
//   01_trace                the forward, traced from construct with global shapes
//   02_step_parallel_begin  SEMI_AUTO_PARALLEL: every op's strategy (given, or derived: marked)
//   03_step_parallel_end    SEMI_AUTO_PARALLEL: this rank's forward after the rewrite
//                           (cleave/parallel/step_parallel.h): local shapes, redistributions,
//                           forward communication
//   05_autodiff             + the backward (autodiff::graph_grad), whose communication comes
//                           from the communication primitives' gradient rules; then the
//                           gradient AllReduce of each parameter over the ranks holding the
//                           same slice (SEMI_AUTO_PARALLEL's mirror operators) or over all ranks
//                           (DATA_PARALLEL)
//   06_optimizer            + the optimizer's in-place updates (side effects)
//   07_constant_fold, 08_cse, 08_dce, 09_execute (runtime::compile)
//   10_partition_rank<R>    a placed or micro-batched step: each rank's graph as partitioned
//                           (cleave/parallel/partition.h)
// The parallel passes sit before autodiff, so the communication they insert is differentiated
// like any other op. In a job, rank-specific stages (03 onwards of a parallel step, 07-09 of a
// placed one) go to <graph name>_rank<R>/ so that ranks sharing save_graphs_path never write
// the same file; worker 0 writes the shared ones.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "cleave/core/tensor.h"
#include "cleave/ir/op_def.h"
#include "cleave/runtime/executor.h"

namespace cleave::runtime {

// A step as the user layers describe it (TrainOneStep, Forward).
struct StepProgram {
  std::string name;  // the graph's name prefix ("train_step", "forward")
  struct Input {
    ir::TensorMeta meta;  // as the caller feeds it to run(): this rank's whole batch
    std::string name;     // "data", "label"
  };
  std::vector<Input> inputs;
  // Bound before the forward is traced, in this order, under these names.
  std::vector<std::pair<std::string, Tensor>> parameters;
  // Traces the forward on symbolic inputs (one per `inputs`) and returns its outputs; a
  // training step returns its one-element loss first.
  std::function<std::vector<Tensor>(const std::vector<Tensor>& inputs)> forward;
  // Training: the tensors to differentiate (the optimizer's parameters), for each of them the
  // tensors laid out like it (optimizer state of its shape), and the update, traced from one
  // gradient per tensor of `wrt` (undefined where the loss does not reach it). Empty `wrt` and
  // no `update`: an evaluation step without gradients.
  std::vector<Tensor> wrt;
  std::vector<std::vector<Tensor>> wrt_like;
  std::function<void(const std::vector<Tensor>& grads)> update;
};

// A compiled step and how to feed it.
class CompiledStep {
 public:
  CompiledStep(std::unique_ptr<Executor> executor, int micro_batches, size_t num_inputs);

  // Runs the step on this rank's inputs (one per StepProgram::inputs, whole batches: with
  // micro-batches they are cut here). Returns the outputs; none on a rank of a placed step that
  // does not produce them.
  std::vector<Tensor> run(const std::vector<Tensor>& inputs);
  // Per input of StepProgram::inputs: whether the step reads it (any micro-batch's slice of it).
  std::vector<bool> inputs_read() const;
  Executor& executor() { return *executor_; }
  const Executor& executor() const { return *executor_; }
  int micro_batches() const { return micro_batches_; }

 private:
  std::unique_ptr<Executor> executor_;
  int micro_batches_;
  size_t num_inputs_;
};

// Traces and compiles `program` under the current context and auto-parallel context (NOTE
// [Compile pipeline]). Throws Error for a program the context cannot run (an invalid strategy, a
// batch the micro-batches do not divide, a device_num other than the job's, placement combined
// with a parallel mode). Collective in a job: every rank compiles the same program.
std::unique_ptr<CompiledStep> compile_step(const StepProgram& program);

}  // namespace cleave::runtime

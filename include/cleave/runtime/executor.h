// Running a compiled graph on this process, with buffers from a memory plan.
#pragma once

#include <cstddef>
#include <vector>

#include "cleave/core/tensor.h"
#include "cleave/ir/graph.h"

namespace cleave::runtime {

// NOTE [Memory plan]
// Every output of an op that is not a view gets a buffer, live from the op that writes it to the
// last op that reads it (through any chain of views, which alias their input's buffer instead of
// owning one; graph outputs live to the end). Buffers are placed in one arena, largest first, each
// at the lowest 64-byte-aligned offset that overlaps no placed buffer whose lifetime overlaps its
// own, so buffers whose lifetimes are disjoint share memory. Parameters, constants and inputs are
// bound, not planned.
struct MemoryPlan {
  // offset[node][output] in the arena; -1 for values without a buffer of their own.
  std::vector<std::vector<int64_t>> offset;
  size_t peak_bytes = 0;   // the arena size
  size_t total_bytes = 0;  // the sum of all buffers (what allocating each separately would hold)
  int num_buffers = 0;
};

MemoryPlan plan_memory(const ir::Graph& graph);

class Executor {
 public:
  // Verifies the graph, plans its memory and allocates the arena once.
  explicit Executor(ir::Graph graph);

  // Runs the graph on `inputs` (one per graph input, with the traced shapes and dtypes; throws
  // Error naming the input otherwise). A graph with RpcSend ops returns once its sends are done.
  // Returns the graph outputs as new tensors owned by the caller. Side-effecting ops (optimizer
  // updates) write their bound parameters and state.
  std::vector<Tensor> run(const std::vector<Tensor>& inputs);

  const ir::Graph& graph() const { return graph_; }
  // Whether any op (or output) of the graph reads one of its inputs.
  bool reads_inputs() const { return reads_inputs_; }
  // Per graph input (in graph().inputs order): whether any op (or output) reads it. A worker's
  // part of a placed step may read only some inputs (NOTE [Column projection] in
  // cleave/data/dataset.h); run() still takes every input, with its traced shape and dtype.
  const std::vector<bool>& inputs_read() const { return inputs_read_; }
  // Whether the graph is one worker's part of a placed step (it has RpcSend/RpcRecv nodes, or
  // compile_distributed marked it: a worker that owns no ops runs an empty part).
  bool placed() const { return placed_; }
  void mark_placed() { placed_ = true; }
  // Per-node timing, off by default: while on, run() adds each op's kernel wall time (a steady
  // clock read around the kernel) to node_seconds()[node index]. For measurements (graph_bench
  // profile), not training: the clock reads cost ~50 ns per op. Turning it on clears the sums.
  void set_profiling(bool on);
  const std::vector<double>& node_seconds() const { return node_seconds_; }
  const MemoryPlan& plan() const { return plan_; }
  // Per-node notes for ir::dump_text: each op's buffers.
  std::vector<std::string> plan_notes() const;

 private:
  ir::Graph graph_;
  MemoryPlan plan_;
  Tensor arena_;
  std::vector<int> slot_base_;  // first value slot of each node
  std::vector<Tensor> values_;  // one per (node, output)
  std::vector<std::vector<Tensor>> node_inputs_;
  std::vector<std::vector<Tensor>> node_outputs_;
  bool profiling_ = false;
  // The graph talks to other ranks (a placed graph: RpcSend/RpcRecv): run() times its kernels
  // for runtime::placed_run_stats() and waits for its sends before returning.
  bool placed_ = false;
  bool reads_inputs_ = false;
  std::vector<bool> inputs_read_;
  std::vector<double> node_seconds_;
};

}  // namespace cleave::runtime

// Running a compiled graph on this process, with buffers from a memory plan
// (cleave/runtime/memory_plan.h), measured by a profiler (cleave/runtime/profiling.h).
#pragma once

#include <cstddef>
#include <functional>
#include <string>
#include <vector>

#include "cleave/core/tensor.h"
#include "cleave/ir/graph.h"
#include "cleave/runtime/memory_plan.h"
#include "cleave/runtime/profiling.h"

namespace cleave::runtime {

// NOTE [Collectives in flight]
// A communication primitive with an async_kernel (AllReduce, AllGather, ReduceScatter, Broadcast)
// is started on its group's communication thread and waited for right before the first node that
// reads one of its outputs, the first node that writes into its inputs' storage (an update of the
// parameter it reads; updates of other parameters do not wait for it: NOTE [Updates at their
// gradients] in cleave/parallel/data_parallel.h), or the end of the run, whichever comes first;
// the ops in between run meanwhile
// (a gradient AllReduce overlapping the rest of the backward pass). Its input buffers are kept by
// the memory plan until that wait (read_until), its outputs from its start to that wait or their
// last reader (an output nobody reads included), so nothing reuses them while the thread works.
// Collectives of one group still run in the order they were started. When the wait would come right
// after the op, it runs synchronously. collective_waits (cleave/runtime/memory_plan.h) computes
// where each one is waited for. Where no core is left for the communication thread, every
// collective runs synchronously instead (NOTE [Collectives in place] in
// cleave/runtime/pipeline.h; ExecutorOptions::collectives_in_flight).

// NOTE [Zero-copy cut edges]
// In a placed graph whose cut edges go through shared-memory mailboxes (NOTE [Messages in place]
// in cleave/comm/shm_mailbox.h), a value crossing ranks is not copied at all when it can be
// avoided: the buffer of an op output that an RpcSend sends whole lies in the receiver's slot of
// that edge (the op writes its result there, after claiming the slot: waiting until the receiver
// released the previous step's message), and the buffer of an RpcRecv's output is the slot in
// this rank's inbox (its readers read it in place; the slot is released right after the last of
// them, by the memory plan's lifetime, which follows views). Not bound, and copied as before: a
// value sent as part of a buffer (a micro-batch's rows), a second edge of the same buffer, values
// that are inputs, parameters or constants, buffers an op writes in place, and everything when
// the edges go through a process group's transport. A bound buffer takes no room in the arena.
// bind_cut_edges (cleave/runtime/memory_plan.h) decides which buffers are bound.
struct ExecutorOptions {
  // NOTE [Zero-copy cut edges]; false copies every message (CLEAVE_RPC_ZERO_COPY=0).
  bool zero_copy = true;
  // NOTE [Collectives in flight]; false runs every collective where it stands, on this thread
  // (NOTE [Collectives in place] in cleave/runtime/pipeline.h).
  bool collectives_in_flight = true;
};

class Executor {
 public:
  // Verifies the graph, plans its memory and allocates the arena once.
  explicit Executor(ir::Graph graph, ExecutorOptions options = {});

  // Runs the graph on `inputs` (one per graph input, with the traced shapes and dtypes; throws
  // Error naming the input otherwise). A graph with RpcSend ops returns once its sends are done.
  // Returns the graph outputs as new tensors owned by the caller (copy_outputs = false: views of
  // the executor's memory, valid until the next run). Side-effecting ops (optimizer updates)
  // write their bound parameters and state.
  std::vector<Tensor> run(const std::vector<Tensor>& inputs, bool copy_outputs = true);

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
  const std::vector<double>& node_seconds() const { return profiler_.node_seconds(); }
  // Seconds run() has spent blocked on communication since the executor was made: waiting for
  // collectives in flight (NOTE [Collectives in flight]), and running those whose first reader is
  // the next op (they run inline, nothing to overlap). The communication the computation did not
  // hide.
  double communication_wait_seconds() const { return profiler_.communication_wait_seconds(); }
  const MemoryPlan& plan() const { return plan_; }
  // Buffers that lie in a shared-memory mailbox slot instead of the arena (NOTE [Zero-copy cut
  // edges]): one per cut edge end that needs no copy.
  int zero_copy_buffers() const { return cut_edges_.count; }
  // Per-node notes for ir::dump_text: each op's buffers.
  std::vector<std::string> plan_notes() const;

 private:
  // run(), step by step.
  void bind_inputs(const std::vector<Tensor>& inputs);
  void wait_for_collectives(size_t node);
  void drain_collectives();
  void claim_slots(size_t node);
  void release_slots(size_t node);

  ir::Graph graph_;
  MemoryPlan plan_;
  Tensor arena_;
  std::vector<int> slot_base_;  // first value slot of each node
  std::vector<Tensor> values_;  // one per (node, output)
  std::vector<std::vector<Tensor>> node_inputs_;
  std::vector<std::vector<Tensor>> node_outputs_;
  // The graph talks to other ranks (a placed graph: RpcSend/RpcRecv): run() times its kernels
  // for runtime::placed_run_stats() and waits for its sends before returning.
  bool placed_ = false;
  bool reads_inputs_ = false;
  std::vector<bool> inputs_read_;
  ExecutorProfiler profiler_;  // NOTE [Executor profiling]
  // NOTE [Collectives in flight]: per node, where an asynchronous op is waited for (-1: it runs
  // synchronously), and per node (+ the end) the waiters of this run to call before it.
  std::vector<int> wait_at_;
  std::vector<std::vector<std::function<void()>>> waiters_;
  int async_ops_ = 0;
  // NOTE [Zero-copy cut edges]: buffers bound to a mailbox slot instead of the arena (none
  // without ExecutorOptions::zero_copy).
  CutEdgeSlots cut_edges_;
};

}  // namespace cleave::runtime

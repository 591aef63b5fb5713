// What the executor measures while it runs a graph (NOTE [Executor profiling]).
#pragma once

#include <chrono>
#include <cstddef>
#include <vector>

#include "cleave/ir/graph.h"

namespace cleave::runtime {

// NOTE [Executor profiling]
// Executor::run measures three things, all through one ExecutorProfiler:
//   - node timing (Executor::set_profiling, off by default): each op's kernel wall time, summed
//     per node into node_seconds();
//   - communication wait (always on): the seconds run() blocked on collectives in flight (NOTE
//     [Collectives in flight] in cleave/runtime/executor.h) and spent running communicating ops
//     inline, summed over the executor's life into communication_wait_seconds();
//   - placed-graph statistics (a placed graph: Executor::placed()): per run, the kernel seconds
//     of computing ops, and of communicating ops plus the waits on cut edges outside kernels
//     (claiming a mailbox slot, the sends still in flight at the end), go to
//     add_placed_run_stats (cleave/runtime/context.h) and the computing seconds to
//     note_placed_run (cleave/runtime/core_binding.h); while placed_op_profiling() is on, each
//     op's thread CPU time goes to add_placed_op_times.
// An op is "timed" while node timing is on or the graph is placed: a steady-clock read on each
// side of its kernel (and the thread's CPU time for placed op times). Otherwise only
// communicating ops read the clock, and run() calls nothing around a computing op's kernel.
// A communicating op that runs inline while ops are timed counts in node_seconds() (and, in a
// placed graph, the placed statistics), not in communication_wait_seconds().
class ExecutorProfiler {
 public:
  using Clock = std::chrono::steady_clock;
  // When an op's kernel started, if it is measured: the steady clock and the thread's CPU
  // seconds (0 unless placed op times are on).
  struct OpStart {
    bool measured = false;
    Clock::time_point wall{};
    double cpu_seconds = 0;
  };

  // Turns node timing on (clearing the sums, one per node of a graph of `num_nodes`) or off
  // (keeping them).
  void set_node_timing(bool on, size_t num_nodes);
  // Per node, the kernel seconds summed while node timing was on; empty if it never was.
  const std::vector<double>& node_seconds() const { return node_seconds_; }
  double communication_wait_seconds() const { return communication_wait_seconds_; }

  // Starts one run of a graph of `num_nodes` nodes; `placed`: the graph is one worker's part of
  // a placed step (its run is added to the placed statistics by end_run).
  void begin_run(size_t num_nodes, bool placed);
  // Whether this run times every op (node timing on, or a placed graph). When not, start_op and
  // end_op measure only communicating ops: a computing op may skip them.
  bool times_ops() const { return times_ops_; }
  // Around the kernel of op node `node` (not a view, not started asynchronously): start_op right
  // before it, end_op right after it. The timed path is marked unlikely: it keeps the code of
  // training runs (nothing timed) compact; a timed run pays a taken jump beside two clock reads.
  OpStart start_op(const ir::OpDef& op) const {
    if (times_ops_) [[unlikely]] {
      return start_timed_op();
    }
    if (op.communicates) return {.measured = true, .wall = Clock::now()};
    return {};
  }
  void end_op(size_t node, const ir::OpDef& op, const OpStart& start) {
    if (!start.measured) return;  // the common case, decided once per op by start_op
    if (times_ops_) [[unlikely]] {
      end_timed_op(node, op.communicates, start);
    } else {
      communication_wait_seconds_ += seconds_since(start.wall);
    }
  }
  // A wait for collectives in flight that began at `start` and ends now.
  void add_collective_wait(Clock::time_point start) {
    communication_wait_seconds_ += seconds_since(start);
  }
  // A placed graph's wait on its cut edges outside any kernel that began at `start` and ends now
  // (claiming mailbox slots, the sends in flight at the end of the run).
  void add_cut_edge_wait(Clock::time_point start) { run_comm_seconds_ += seconds_since(start); }
  // Ends a run that completed: a placed graph's run goes to the placed statistics (NOTE
  // [Executor profiling]). A run that threw calls nothing.
  void end_run(const ir::Graph& graph);

 private:
  static double seconds_since(Clock::time_point start) {
    return std::chrono::duration<double>(Clock::now() - start).count();
  }
  // CPU time of the calling thread (CLOCK_THREAD_CPUTIME_ID): unlike a wall clock it does not
  // count time the thread was descheduled (ranks of a placed job time-share the cores).
  static double thread_cpu_seconds();
  OpStart start_timed_op() const {
    OpStart start{.measured = true, .wall = Clock::now()};
    if (op_cpu_times_) start.cpu_seconds = thread_cpu_seconds();
    return start;
  }
  void end_timed_op(size_t node, bool communicates, const OpStart& start) {
    if (op_cpu_times_) op_cpu_seconds_[node] = thread_cpu_seconds() - start.cpu_seconds;
    const double seconds = seconds_since(start.wall);
    if (node_timing_) node_seconds_[node] += seconds;
    (communicates ? run_comm_seconds_ : run_compute_seconds_) += seconds;
  }

  bool node_timing_ = false;
  std::vector<double> node_seconds_;
  double communication_wait_seconds_ = 0;
  // This run.
  bool placed_ = false;
  bool times_ops_ = false;     // node timing or placed
  bool op_cpu_times_ = false;  // placed and placed_op_profiling()
  double run_compute_seconds_ = 0, run_comm_seconds_ = 0;
  std::vector<double> op_cpu_seconds_;  // per node
};

}  // namespace cleave::runtime

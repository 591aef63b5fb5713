// The execution context (MindSpore's set_context): GRAPH_MODE or PYNATIVE_MODE, IR dumps.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace cleave::ir {
struct Graph;
}

namespace cleave::runtime {

// GRAPH_MODE (the default, as in the seeds) traces a training step into a graph, compiles it once
// per input signature and executes the compiled graph; PYNATIVE_MODE runs each op at once.
enum Mode { GRAPH_MODE = 0, PYNATIVE_MODE = 1 };

struct Context {
  Mode mode = GRAPH_MODE;
  // >= 1: write the graph after each compiler stage as NN_<stage>.ir and NN_<stage>.dot under
  // save_graphs_path/<graph name>/ (NOTE [Compile pipeline] in cleave/runtime/compile.h).
  int save_graphs = 0;
  std::string save_graphs_path = ".";
};

// Replaces the process-wide context. save_graphs must be >= 0.
void set_context(const Context& context);
const Context& get_context();

// MindSpore's set_auto_parallel_context, for the parts cleave supports.
struct AutoParallelContext {
  // For a placed network (Cell::place / Primitive::place after cleave::init()): > 1 splits each
  // training batch into this many micro-batches (the batch size must be divisible by it) that run
  // through the placed stages on a 1F1B schedule, so that ranks compute at the same time;
  // gradients and the loss are averaged over the micro-batches, which equals the unpipelined step
  // when the loss is a mean over the batch. 1 (the default): no micro-batching.
  int pipeline_micro_batches = 1;
};

// Replaces the process-wide auto-parallel context. pipeline_micro_batches must be >= 1.
void set_auto_parallel_context(const AutoParallelContext& context);
const AutoParallelContext& get_auto_parallel_context();

// What this process spent running placed (partitioned) graphs since it started or since
// reset_placed_run_stats(): time inside op kernels, time blocked waiting for data from other
// ranks (RpcRecv), and the number of graph runs.
struct PlacedRunStats {
  double compute_seconds = 0;
  double recv_wait_seconds = 0;
  int64_t runs = 0;
};
PlacedRunStats placed_run_stats();
// Adds one run (the executor of placed graphs calls it).
void add_placed_run_stats(double compute_seconds, double recv_wait_seconds);
void reset_placed_run_stats();

// Per-op times of the placed graphs, for measuring what a perfect schedule would take (bench/run.sh
// place): off by default; while on, the executor of each placed graph adds every op's time to
// these sums (reset_placed_run_stats() clears them). One entry per op of each graph, in the order
// the graph runs them. `seconds` is the CPU time of the thread running the op (not counting the
// time it was descheduled); for RpcSend/RpcRecv, the CPU time spent sending or waiting. Costs
// two clock_gettime calls per op: for a separate measuring run.
struct PlacedOpTime {
  std::string graph;  // the graph's name
  std::string op;     // the primitive
  std::string node;   // the node's name
  int tag = -1;       // RpcSend/RpcRecv: the cut edge's tag
  double seconds = 0;
  int64_t runs = 0;
};
void set_placed_op_profiling(bool on);
bool placed_op_profiling();
std::vector<PlacedOpTime> placed_op_times();
// The executor adds one run of `graph` with the given time per node (0 for nodes that are not ops).
void add_placed_op_times(const ir::Graph& graph, const std::vector<double>& node_seconds);

}  // namespace cleave::runtime

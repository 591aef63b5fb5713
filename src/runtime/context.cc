#include "cleave/runtime/context.h"

#include <mutex>

#include "cleave/core/error.h"

namespace cleave::runtime {
namespace {
Context& global_context() {
  static Context context;
  return context;
}
}  // namespace

void set_context(const Context& context) {
  CLEAVE_CHECK_ARG(context.mode == GRAPH_MODE || context.mode == PYNATIVE_MODE,
                   "set_context: mode is {}; expected GRAPH_MODE or PYNATIVE_MODE",
                   static_cast<int>(context.mode));
  CLEAVE_CHECK_ARG(context.save_graphs >= 0, "set_context: save_graphs is {}; expected >= 0",
                   context.save_graphs);
  global_context() = context;
}

const Context& get_context() { return global_context(); }

namespace {
AutoParallelContext& global_auto_parallel_context() {
  static AutoParallelContext context;
  return context;
}
}  // namespace

void set_auto_parallel_context(const AutoParallelContext& context) {
  CLEAVE_CHECK_ARG(context.pipeline_micro_batches >= 1,
                   "set_auto_parallel_context: pipeline_micro_batches is {}; expected >= 1",
                   context.pipeline_micro_batches);
  global_auto_parallel_context() = context;
}

const AutoParallelContext& get_auto_parallel_context() { return global_auto_parallel_context(); }

}  // namespace cleave::runtime

namespace cleave::runtime {
namespace {
std::mutex g_stats_mutex;
PlacedRunStats g_stats;
}  // namespace

void add_placed_run_stats(double compute_seconds, double recv_wait_seconds) {
  std::lock_guard<std::mutex> lock(g_stats_mutex);
  g_stats.compute_seconds += compute_seconds;
  g_stats.recv_wait_seconds += recv_wait_seconds;
  ++g_stats.runs;
}

PlacedRunStats placed_run_stats() {
  std::lock_guard<std::mutex> lock(g_stats_mutex);
  return g_stats;
}

void reset_placed_run_stats() {
  std::lock_guard<std::mutex> lock(g_stats_mutex);
  g_stats = {};
}

}  // namespace cleave::runtime

#include "cleave/runtime/context.h"

#include <atomic>
#include <mutex>
#include <unordered_map>

#include "cleave/core/error.h"
#include "cleave/ir/graph.h"

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
std::atomic<bool> g_op_profiling{false};
std::vector<PlacedOpTime> g_op_times;                  // every graph's ops, graph after graph
std::unordered_map<std::string, size_t> g_op_entries;  // graph name#nodes -> its first entry
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
  for (PlacedOpTime& t : g_op_times) t.seconds = 0, t.runs = 0;
}

void set_placed_op_profiling(bool on) { g_op_profiling = on; }
bool placed_op_profiling() { return g_op_profiling; }

std::vector<PlacedOpTime> placed_op_times() {
  std::lock_guard<std::mutex> lock(g_stats_mutex);
  return g_op_times;
}

void add_placed_op_times(const ir::Graph& graph, const std::vector<double>& node_seconds) {
  std::lock_guard<std::mutex> lock(g_stats_mutex);
  // Keyed by name and size: two different graphs of one name (not made by compile_distributed,
  // whose names are unique) get entries of their own.
  const std::string key = graph.name + "#" + std::to_string(graph.nodes.size());
  auto [it, added] = g_op_entries.try_emplace(key, g_op_times.size());
  if (added) {
    for (const ir::Node& n : graph.nodes) {
      if (!n.is_op() || n.op->output_is_view) continue;
      const int tag =
          n.op->communicates ? static_cast<int>(n.attrs.get_or<int64_t>("tag", -1)) : -1;
      g_op_times.push_back({graph.name, n.op->name, n.name, tag});
    }
  }
  size_t entry = it->second;
  for (size_t i = 0; i < graph.nodes.size(); ++i) {
    const ir::Node& n = graph.nodes[i];
    if (!n.is_op() || n.op->output_is_view) continue;
    CLEAVE_ASSERT(entry < g_op_times.size() && g_op_times[entry].node == n.name,
                  "placed op times of graph '{}' do not match its ops", graph.name);
    g_op_times[entry].seconds += node_seconds[i];
    ++g_op_times[entry].runs;
    ++entry;
  }
}

}  // namespace cleave::runtime

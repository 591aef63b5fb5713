// The executor's profiler (NOTE [Executor profiling]) and the process-wide statistics of placed
// graphs it feeds (declared in cleave/runtime/context.h).
#include "cleave/runtime/profiling.h"

#include <atomic>
#include <ctime>
#include <mutex>
#include <string>
#include <unordered_map>

#include "cleave/core/error.h"
#include "cleave/runtime/context.h"
#include "cleave/runtime/core_binding.h"

namespace cleave::runtime {

double ExecutorProfiler::thread_cpu_seconds() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

void ExecutorProfiler::set_node_timing(bool on, size_t num_nodes) {
  node_timing_ = on;
  if (on) node_seconds_.assign(num_nodes, 0.0);
}

void ExecutorProfiler::begin_run(size_t num_nodes, bool placed) {
  placed_ = placed;
  times_ops_ = node_timing_ || placed;
  op_cpu_times_ = placed && placed_op_profiling();
  run_compute_seconds_ = 0;
  run_comm_seconds_ = 0;
  if (op_cpu_times_) op_cpu_seconds_.assign(num_nodes, 0.0);
}

void ExecutorProfiler::end_run(const ir::Graph& graph) {
  if (!placed_) return;
  add_placed_run_stats(run_compute_seconds_, run_comm_seconds_);
  note_placed_run(run_compute_seconds_);
  if (op_cpu_times_) add_placed_op_times(graph, op_cpu_seconds_);
}

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
  // Keyed by name and size: two different graphs of one name (not made by the compile pipeline,
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

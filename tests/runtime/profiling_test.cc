// The executor's profiler (NOTE [Executor profiling]) on its own: what each measurement sums,
// when, and what a placed run reports to the process-wide statistics. The ops are timed around
// a busy wait, so every measured time is positive; no test depends on how long anything takes.
#include "cleave/runtime/profiling.h"

#include <gtest/gtest.h>

#include <chrono>
#include <cstdint>
#include <ctime>

#include "cleave/runtime/context.h"

namespace cleave::runtime {
namespace {

const ir::OpDef kCompute{.name = "Compute"};
const ir::OpDef kView{.name = "View", .output_is_view = true};
const ir::OpDef kSend{.name = "Send", .communicates = true};

// Spins until this thread has used 20 us of CPU time (so the steady clock moved as much).
void busy() {
  auto cpu_ns = [] {
    timespec ts{};
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return static_cast<int64_t>(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec;
  };
  const int64_t end = cpu_ns() + 20'000;
  while (cpu_ns() < end) {
  }
}

// input, Compute, View, Send (tag 3)
ir::Graph four_nodes(std::string name) {
  ir::Graph g;
  g.name = std::move(name);
  const ir::TensorMeta meta{Shape{4}, DType::kFloat32};
  g.nodes.push_back({.kind = ir::NodeKind::kInput, .outputs = {meta}, .name = "x"});
  g.inputs = {0};
  g.nodes.push_back({.op = &kCompute, .inputs = {{0, 0}}, .outputs = {meta}, .name = "compute"});
  g.nodes.push_back({.op = &kView, .inputs = {{1, 0}}, .outputs = {meta}, .name = "view"});
  g.nodes.push_back(
      {.op = &kSend, .attrs = {{"tag", int64_t{3}}}, .inputs = {{2, 0}}, .name = "send"});
  return g;
}

// One run of four_nodes(): the two ops timed around a busy wait, as Executor::run does.
void run_once(ExecutorProfiler& profiler, const ir::Graph& g, bool placed) {
  profiler.begin_run(g.nodes.size(), placed);
  for (size_t i : {1u, 3u}) {
    const ExecutorProfiler::OpStart start = profiler.start_op(*g.nodes[i].op);
    busy();
    profiler.end_op(i, *g.nodes[i].op, start);
  }
  profiler.end_run(g);
}

TEST(ExecutorProfiler, NodeTimingSumsEachOpsTimeOnlyWhileOnAndTurningItOnClears) {
  const ir::Graph g = four_nodes("timed");
  ExecutorProfiler profiler;
  run_once(profiler, g, false);
  EXPECT_TRUE(profiler.node_seconds().empty());  // off by default
  profiler.set_node_timing(true, g.nodes.size());
  run_once(profiler, g, false);
  const std::vector<double> once = profiler.node_seconds();
  ASSERT_EQ(once.size(), 4u);
  EXPECT_EQ(once[0], 0.0);  // the input
  EXPECT_GT(once[1], 0.0);
  EXPECT_EQ(once[2], 0.0);  // the view: no kernel
  EXPECT_GT(once[3], 0.0);
  run_once(profiler, g, false);
  EXPECT_GT(profiler.node_seconds()[1], once[1]);  // summed over runs
  profiler.set_node_timing(false, g.nodes.size());
  const std::vector<double> kept = profiler.node_seconds();
  run_once(profiler, g, false);
  EXPECT_EQ(profiler.node_seconds(), kept);
  profiler.set_node_timing(true, g.nodes.size());
  EXPECT_EQ(profiler.node_seconds(), std::vector<double>(4, 0.0));
}

TEST(ExecutorProfiler, OpsAreTimedWhileNodeTimingIsOnOrTheGraphIsPlaced) {
  ExecutorProfiler profiler;
  profiler.begin_run(4, false);
  EXPECT_FALSE(profiler.times_ops());
  EXPECT_FALSE(profiler.start_op(kCompute).measured);
  EXPECT_TRUE(profiler.start_op(kSend).measured);  // communication is always measured
  profiler.begin_run(4, true);
  EXPECT_TRUE(profiler.times_ops());
  EXPECT_TRUE(profiler.start_op(kCompute).measured);
  profiler.set_node_timing(true, 4);
  profiler.begin_run(4, false);
  EXPECT_TRUE(profiler.times_ops());
}

TEST(ExecutorProfiler, UntimedCommunicatingOpsAndCollectiveWaitsAddToTheCommunicationWait) {
  const ir::Graph g = four_nodes("untimed");
  ExecutorProfiler profiler;
  EXPECT_EQ(profiler.communication_wait_seconds(), 0.0);
  profiler.begin_run(g.nodes.size(), false);
  ExecutorProfiler::OpStart start = profiler.start_op(kCompute);
  busy();
  profiler.end_op(1, kCompute, start);
  EXPECT_EQ(profiler.communication_wait_seconds(), 0.0);  // computing
  start = profiler.start_op(kSend);
  busy();
  profiler.end_op(3, kSend, start);
  const double inline_op = profiler.communication_wait_seconds();
  EXPECT_GT(inline_op, 0.0);
  const ExecutorProfiler::Clock::time_point wait = ExecutorProfiler::Clock::now();
  busy();
  profiler.add_collective_wait(wait);
  EXPECT_GT(profiler.communication_wait_seconds(), inline_op);
  profiler.end_run(g);
}

TEST(ExecutorProfiler, APlacedRunAddsItsComputeAndCommunicationSecondsToThePlacedStats) {
  const ir::Graph g = four_nodes("placed");
  reset_placed_run_stats();
  ExecutorProfiler profiler;
  run_once(profiler, g, false);
  EXPECT_EQ(placed_run_stats().runs, 0);                        // not placed: nothing reported
  const double waited = profiler.communication_wait_seconds();  // the unplaced run's Send
  profiler.begin_run(g.nodes.size(), true);
  const ExecutorProfiler::OpStart start = profiler.start_op(kCompute);
  busy();
  profiler.end_op(1, kCompute, start);
  const PlacedRunStats computed = placed_run_stats();
  EXPECT_EQ(computed.runs, 0);  // reported at the end of the run
  const ExecutorProfiler::Clock::time_point sends = ExecutorProfiler::Clock::now();
  busy();
  profiler.add_cut_edge_wait(sends);
  profiler.end_run(g);
  const PlacedRunStats stats = placed_run_stats();
  EXPECT_EQ(stats.runs, 1);
  EXPECT_GT(stats.compute_seconds, 0.0);
  EXPECT_GT(stats.recv_wait_seconds, 0.0);
  EXPECT_EQ(profiler.communication_wait_seconds(), waited);  // a cut edge is not a collective
  run_once(profiler, g, true);                               // the Send counts as communication
  EXPECT_EQ(placed_run_stats().runs, 2);
  EXPECT_GT(placed_run_stats().recv_wait_seconds, stats.recv_wait_seconds);
  reset_placed_run_stats();
}

TEST(ExecutorProfiler, PlacedOpTimesHaveOneEntryPerOpWhileOn) {
  const ir::Graph g = four_nodes("op_times");
  reset_placed_run_stats();
  ExecutorProfiler profiler;
  run_once(profiler, g, true);  // off: no entries for this graph
  for (const PlacedOpTime& t : placed_op_times()) EXPECT_NE(t.graph, "op_times");
  set_placed_op_profiling(true);
  run_once(profiler, g, true);
  run_once(profiler, g, true);
  set_placed_op_profiling(false);
  std::vector<PlacedOpTime> mine;
  for (const PlacedOpTime& t : placed_op_times()) {
    if (t.graph == "op_times") mine.push_back(t);
  }
  ASSERT_EQ(mine.size(), 2u);  // the input and the view have none
  EXPECT_EQ(mine[0].node, "compute");
  EXPECT_EQ(mine[0].tag, -1);
  EXPECT_EQ(mine[1].node, "send");
  EXPECT_EQ(mine[1].op, "Send");
  EXPECT_EQ(mine[1].tag, 3);
  for (const PlacedOpTime& t : mine) {
    EXPECT_EQ(t.runs, 2) << t.node;
    EXPECT_GT(t.seconds, 0.0) << t.node;  // CPU time of the busy waits
  }
  reset_placed_run_stats();
}

}  // namespace
}  // namespace cleave::runtime

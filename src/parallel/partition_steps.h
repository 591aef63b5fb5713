// The steps of partition() (src/parallel/partition.cc) that live in their own files: where every
// node runs (placement.cc), the expansion over micro-batches (micro_batch.cc) and the schedule
// simulation (schedule.cc). Internal to parallel.
#pragma once

#include <vector>

#include "cleave/ir/graph.h"
#include "cleave/parallel/partition.h"

namespace cleave::parallel {

// The rank of inputs and constants: every rank holds them.
inline constexpr int kEverywhere = -1;

// The index of the first node of the per-step part; the node count when there is none.
inline int step_begin_of(const ir::Graph& g, const PartitionOptions& o) {
  return o.step_begin < 0 ? static_cast<int>(g.nodes.size()) : o.step_begin;
}

// For every node of `g`, the rank it runs on (NOTE [Distributed graph partition]); kEverywhere
// for inputs and constants. Throws Error for a placement whose role is not MS_WORKER or whose
// rank is outside [0, world_size), naming the op and its scope.
std::vector<int> resolve_ranks(const ir::Graph& g, const PartitionOptions& o);

// The graph expanded over the micro-batches (NOTE [Micro-batches]), with for each of its nodes:
struct ExpandedGraph {
  ir::Graph g;
  std::vector<int> rank;
  std::vector<int> micro;   // -1: once per step before the micro-batches; M: after them
  std::vector<int> origin;  // the node of the input graph it comes from (schedule priority)
  std::vector<bool> step;   // the per-step part
};

// Copies the per-micro-batch part of `g` micro_batches times (a plain copy with one
// micro-batch) and averages what the per-step part and the outputs read of it. `rank` is
// resolve_ranks(g, o). Throws Error when a non-floating value would need averaging.
ExpandedGraph expand_micro_batches(const ir::Graph& g, const std::vector<int>& rank,
                                   const PartitionOptions& o);

struct SimulatedSchedule {
  std::vector<int> order;  // the op nodes of the expanded graph, by simulated start time
  double makespan = 0;     // the estimated step time (cost units of estimate_op_cost)
  double serial = 0;       // the sum of all op costs
};

// The global schedule all ranks derive their order from (NOTE [A deadlock-free order]).
SimulatedSchedule simulate_schedule(const ExpandedGraph& e, int world_size);

}  // namespace cleave::parallel

// The schedule simulation: NOTE [A deadlock-free order] in cleave/parallel/partition.h.
#include <algorithm>
#include <tuple>

#include "cleave/parallel/cost_model.h"
#include "parallel/partition_steps.h"

namespace cleave::parallel {
namespace {

using ir::Graph;
using ir::Node;
using ir::ValueRef;

constexpr double kLatency = 20;  // estimated cost of a cut edge, in the units of estimate_op_cost

}  // namespace

SimulatedSchedule simulate_schedule(const ExpandedGraph& e, int world_size) {
  const Graph& g = e.g;
  const int n = static_cast<int>(g.nodes.size());
  std::vector<int> deps(n, 0);
  std::vector<std::vector<int>> succ(n);
  std::vector<double> ready(n, 0), finish(n, 0), start(n, 0), cost(n, 0);
  auto edge = [&](int from, int to) {
    succ[from].push_back(to);
    ++deps[to];
  };
  std::vector<int> nonstep_left(world_size, 0), first_step(world_size, -1),
      last_step(world_size, -1);
  for (int j = 0; j < n; ++j) {
    const Node& node = g.nodes[j];
    if (!node.is_op()) continue;
    cost[j] = estimate_op_cost(g, node);
    const int r = e.rank[j];
    for (const ValueRef& v : node.inputs) {
      if (g.nodes[v.node].is_op()) {
        edge(v.node, j);
      } else if (e.rank[v.node] >= 0 && e.rank[v.node] != r) {
        ready[j] = std::max(ready[j], kLatency);  // a parameter sent at the start of the step
      }
    }
    if (!e.step[j]) {
      ++nonstep_left[r];
    } else if (last_step[r] < 0) {
      first_step[r] = j;
      last_step[r] = j;
      ++deps[j];  // released when the rank's other work is scheduled
    } else {
      edge(last_step[r], j);
      last_step[r] = j;
    }
  }
  std::vector<int> eligible;
  for (int j = 0; j < n; ++j) {
    if (g.nodes[j].is_op() && deps[j] == 0) eligible.push_back(j);
  }
  for (int r = 0; r < world_size; ++r) {
    if (nonstep_left[r] == 0 && first_step[r] >= 0 && --deps[first_step[r]] == 0) {
      eligible.push_back(first_step[r]);
    }
  }
  std::vector<double> free_at(world_size, 0);
  std::vector<int> seq;
  SimulatedSchedule s;
  while (!eligible.empty()) {
    size_t best = 0;
    auto key = [&](int j) {
      return std::make_tuple(std::max(free_at[e.rank[j]], ready[j]), e.micro[j], e.origin[j], j);
    };
    for (size_t k = 1; k < eligible.size(); ++k) {
      if (key(eligible[k]) < key(eligible[best])) best = k;
    }
    const int j = eligible[best];
    eligible[best] = eligible.back();
    eligible.pop_back();
    const int r = e.rank[j];
    start[j] = std::max(free_at[r], ready[j]);
    finish[j] = start[j] + cost[j];
    free_at[r] = finish[j];
    s.serial += cost[j];
    s.makespan = std::max(s.makespan, finish[j]);
    seq.push_back(j);
    for (int t : succ[j]) {
      ready[t] = std::max(ready[t], finish[j] + (e.rank[t] == r ? 0 : kLatency));
      if (--deps[t] == 0) eligible.push_back(t);
    }
    if (!e.step[j] && --nonstep_left[r] == 0 && first_step[r] >= 0) {
      ready[first_step[r]] = std::max(ready[first_step[r]], finish[j]);
      if (--deps[first_step[r]] == 0) eligible.push_back(first_step[r]);
    }
  }
  const auto ops =
      std::count_if(g.nodes.begin(), g.nodes.end(), [](const Node& x) { return x.is_op(); });
  CLEAVE_ASSERT(static_cast<int64_t>(seq.size()) == ops,
                "partition: the schedule placed {} of {} ops (a cycle?)", seq.size(), ops);
  // Every dependency finishes before its successor starts and costs are positive, so ordering
  // by start time keeps dependencies in order; ties keep the simulation's order.
  s.order = seq;
  std::stable_sort(s.order.begin(), s.order.end(),
                   [&](int a, int b) { return start[a] < start[b]; });
  return s;
}

}  // namespace cleave::parallel

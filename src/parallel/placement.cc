// Where every node runs: NOTE [Distributed graph partition] in cleave/parallel/partition.h.
#include <fmt/format.h>

#include <algorithm>

#include "parallel/partition_steps.h"

namespace cleave::parallel {
namespace {

using ir::Graph;
using ir::Node;
using ir::NodeKind;
using ir::ValueRef;

constexpr int kUnset = -2;

std::string describe(const Node& n) {
  return fmt::format("op {} ('{}', scope {})", n.op->name, n.name, n.scope);
}

// For every node, the nodes that read one of its outputs, in order, each once.
std::vector<std::vector<int>> users_of(const Graph& g) {
  std::vector<std::vector<int>> users(g.nodes.size());
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    for (const ValueRef& v : g.nodes[i].inputs) {
      std::vector<int>& u = users[v.node];
      if (u.empty() || u.back() != static_cast<int>(i)) u.push_back(static_cast<int>(i));
    }
  }
  return users;
}

}  // namespace

bool has_placement(const ir::Graph& graph) {
  return std::any_of(graph.nodes.begin(), graph.nodes.end(),
                     [](const Node& n) { return n.is_op() && !n.placement.empty(); });
}

std::vector<int> resolve_ranks(const Graph& g, const PartitionOptions& o) {
  const int n = static_cast<int>(g.nodes.size());
  const int step_begin = step_begin_of(g, o);
  std::vector<int> rank(n, kUnset);
  for (int i = 0; i < n; ++i) {
    const Node& node = g.nodes[i];
    if (node.kind == NodeKind::kInput || node.kind == NodeKind::kConstant) {
      rank[i] = kEverywhere;
      continue;
    }
    if (!node.is_op()) continue;  // parameters: below
    if (o.use_placement && !node.placement.empty()) {
      const ir::Placement& p = node.placement;
      CLEAVE_CHECK_ARG(p.role == kWorkerRole,
                       "{} is placed on role '{}' (rank {}); only workers run graph ops (the "
                       "scheduler runs none): place it with role \"{}\"",
                       describe(node), p.role, p.rank, kWorkerRole);
      CLEAVE_CHECK_ARG(p.rank >= 0 && p.rank < o.world_size,
                       "{} is placed on {} rank {}; expected a rank in [0, {}): the job has {} "
                       "worker(s) (MS_WORKER_NUM)",
                       describe(node), kWorkerRole, p.rank, o.world_size, o.world_size);
      rank[i] = static_cast<int>(p.rank);
    } else if (i < step_begin) {
      rank[i] = 0;
    }
  }
  const std::vector<std::vector<int>> users = users_of(g);
  for (int i = 0; i < n; ++i) {
    if (g.nodes[i].kind != NodeKind::kParameter) continue;
    for (int u : users[i]) {
      if (rank[u] >= 0) {
        rank[i] = rank[u];
        break;
      }
    }
    if (rank[i] == kUnset) rank[i] = 0;
  }
  // The per-step part, last to first: an update runs where its parameter lives, another
  // unlabelled op with the op that consumes its result.
  for (int i = n - 1; i >= step_begin; --i) {
    if (rank[i] != kUnset) continue;
    const Node& node = g.nodes[i];
    int r = kUnset;
    if (node.op->mutates_inputs && !node.inputs.empty()) {
      r = rank[node.inputs[0].node];
    } else {
      for (int u : users[i]) {
        if (rank[u] >= 0) {
          r = rank[u];
          break;
        }
      }
    }
    rank[i] = r >= 0 ? r : 0;
  }
  return rank;
}

}  // namespace cleave::parallel

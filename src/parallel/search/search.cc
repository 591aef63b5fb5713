// The search on a traced graph, its report, and the exhaustive reference
// (cleave/parallel/search.h).
#include "cleave/parallel/search.h"

#include <fmt/format.h>

#include <cmath>
#include <limits>

#include "cleave/core/error.h"

namespace cleave::parallel {

SearchResult solve_exhaustive(const CostGraph& graph, double max_combinations) {
  graph.check();
  double combinations = 1;
  for (const CostNode& n : graph.nodes) combinations *= static_cast<double>(n.num_candidates());
  CLEAVE_CHECK_ARG(combinations <= max_combinations,
                   "exhaustive search: {} nodes whose candidates combine in {:.3g} ways, more "
                   "than the {:.3g} allowed",
                   graph.nodes.size(), combinations, max_combinations);
  const bool limited = graph.memory_capacity_bytes > 0;
  std::vector<int> choice(graph.nodes.size(), 0), best;
  double best_cost = std::numeric_limits<double>::infinity();
  double least_memory = best_cost;
  for (;;) {
    const double cost = graph.cost(choice);
    if (std::isfinite(cost)) {
      const double memory = graph.memory(choice);
      least_memory = std::min(least_memory, memory);
      if ((!limited || memory <= graph.memory_capacity_bytes) && cost < best_cost) {
        best_cost = cost;
        best = choice;
      }
    }
    size_t i = 0;
    for (; i < choice.size(); ++i) {
      if (++choice[i] < graph.nodes[i].num_candidates()) break;
      choice[i] = 0;
    }
    if (i == choice.size()) break;
  }
  CLEAVE_CHECK_ARG(std::isfinite(least_memory),
                   "exhaustive search: every plan of the cost graph uses a forbidden pair of "
                   "candidates");
  CLEAVE_CHECK_ARG(!best.empty(),
                   "exhaustive search: no plan fits the memory capacity of {:.0f} bytes per rank; "
                   "the smallest memory any plan needs is {:.0f} bytes",
                   graph.memory_capacity_bytes, least_memory);
  SearchResult r;
  r.choice = std::move(best);
  r.cost = best_cost;
  r.memory_bytes = graph.memory(r.choice);
  r.exact_nodes = static_cast<int>(graph.nodes.size());
  r.exact_combinations = combinations;
  return r;
}

std::string SearchReport::summary() const {
  const EliminationCounts& e = result.eliminations;
  return fmt::format(
      "dynamic programming: {} ops, {} parameters, {} candidates, {} eliminations (operator {}, "
      "edge {}, merge {}, contract {}, triangle {}, star {}), {} node{} left to the exact "
      "solver; predicted step cost {:.4g} ms, memory {:.4g} MiB per rank",
      ops, parameters, candidates, e.total(), e.op, e.edge, e.merge, e.contract, e.triangle, e.star,
      result.exact_nodes, result.exact_nodes == 1 ? "" : "s", result.cost * 1e3,
      result.memory_bytes / (1 << 20));
}

SearchReport search_strategies(ir::Graph& global, const SearchOptions& options) {
  const CostGraph graph = build_cost_graph(global, options);
  SearchReport report;
  for (const CostNode& n : graph.nodes) {
    ++(n.kind == CostNode::Kind::kOperator ? report.ops : report.parameters);
    report.candidates += n.num_candidates();
  }
  report.result = solve_dynamic_programming(graph, options);
  for (size_t i = 0; i < graph.nodes.size(); ++i) {
    const CostNode& n = graph.nodes[i];
    if (n.kind != CostNode::Kind::kOperator) continue;
    ir::Node& node = global.nodes[static_cast<size_t>(n.graph_node)];
    if (!node.strategy.empty()) continue;  // given: its only candidate
    node.strategy = n.strategies[static_cast<size_t>(report.result.choice[i])];
    node.strategy_derived = true;
  }
  return report;
}

}  // namespace cleave::parallel

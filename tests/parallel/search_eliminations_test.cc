// The dynamic-programming search on hand-made cost graphs (NOTE [Dynamic programming search] in
// cleave/parallel/search.h): each elimination, the exact fallback, the errors, and random graphs
// of every shape held to exhaustive enumeration.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>

#include "cleave/parallel/search.h"
#include "testing/gradcheck.h"

namespace cleave::parallel {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

CostNode node(std::vector<double> cost, std::vector<double> memory = {}) {
  CostNode n;
  n.name = "n";
  if (memory.empty()) memory.assign(cost.size(), 0);
  n.cost = std::move(cost);
  n.memory_bytes = std::move(memory);
  return n;
}

// Names the nodes n0, n1, ... for the errors.
CostGraph graph_of(std::vector<CostNode> nodes, std::vector<CostEdge> edges) {
  CostGraph g;
  for (size_t i = 0; i < nodes.size(); ++i) nodes[i].name = fmt::format("n{}", i);
  g.nodes = std::move(nodes);
  g.edges = std::move(edges);
  return g;
}

void expect_optimal(const CostGraph& g, const SearchResult& r) {
  const SearchResult best = solve_exhaustive(g);
  EXPECT_NEAR(r.cost, best.cost, 1e-9 * std::max(1.0, best.cost));
  EXPECT_DOUBLE_EQ(r.cost, g.cost(r.choice));
  if (g.memory_capacity_bytes > 0) {
    EXPECT_LE(r.memory_bytes, g.memory_capacity_bytes);
  }
}

TEST(SearchEliminations, ParallelEdgesBecomeOneEdge) {
  // Two edges between n0 and n1: alone each prefers another pair; summed, (1, 0) wins.
  const CostGraph g =
      graph_of({node({0, 0}), node({0, 0})}, {{0, 1, {0, 5, 3, 5}}, {1, 0, {5, 0, 5, 5}}});
  const SearchResult r = solve_dynamic_programming(g);
  EXPECT_EQ(r.eliminations.edge, 1);
  EXPECT_EQ(r.choice, (std::vector<int>{1, 0}));
  EXPECT_DOUBLE_EQ(r.cost, 3);
  expect_optimal(g, r);
}

TEST(SearchEliminations, ALeafProducerIsMergedAndALeafConsumerContracted) {
  // n0 -> n1: n0 is the first leaf taken, and it produces: merge.
  const CostGraph produced = graph_of({node({1, 4}), node({3.5, 1})}, {{0, 1, {0, 2, 2, 0}}});
  const SearchResult m = solve_dynamic_programming(produced);
  EXPECT_EQ(m.eliminations.merge, 1);
  EXPECT_EQ(m.eliminations.contract, 0);
  EXPECT_EQ(m.choice, (std::vector<int>{0, 1}));  // 1 + 1 + 2 beats 1 + 3.5 and 4 + 1
  EXPECT_DOUBLE_EQ(m.cost, 4);
  // n1 -> n0: n0 consumes: contract.
  const CostGraph consumed = graph_of({node({1, 4}), node({3.5, 1})}, {{1, 0, {0, 2, 2, 0}}});
  const SearchResult c = solve_dynamic_programming(consumed);
  EXPECT_EQ(c.eliminations.contract, 1);
  EXPECT_EQ(c.eliminations.merge, 0);
  EXPECT_DOUBLE_EQ(c.cost, 4);
}

TEST(SearchEliminations, ASquareTakesAnOperatorThenATriangleElimination) {
  // n0 - n1 - n2 - n3 - n0: n0 (two edges) becomes the edge n1 - n3; n1 then has edges to n2 and
  // n3, which are joined already: a triangle, whose new edge meets n2 - n3 (edge elimination).
  const std::vector<double> agree = {0, 2, 2, 0}, differ = {2, 0, 0, 2};
  const CostGraph g = graph_of({node({0, 1}), node({1, 0}), node({0, 0}), node({0, 0})},
                               {{0, 1, agree}, {1, 2, differ}, {2, 3, agree}, {3, 0, agree}});
  const SearchResult r = solve_dynamic_programming(g);
  EXPECT_EQ(r.eliminations.op, 1);
  EXPECT_EQ(r.eliminations.triangle, 1);
  EXPECT_EQ(r.eliminations.edge, 1);
  EXPECT_EQ(r.exact_nodes, 0);
  expect_optimal(g, r);
}

// The complete graph on four nodes: every node has three edges, so only a star applies.
CostGraph complete4() {
  std::mt19937 rng(7);
  std::uniform_real_distribution<double> u(0, 1);
  std::vector<CostNode> nodes;
  for (int i = 0; i < 4; ++i) nodes.push_back(node({u(rng), u(rng), u(rng)}));
  std::vector<CostEdge> edges;
  for (int a = 0; a < 4; ++a) {
    for (int b = a + 1; b < 4; ++b) {
      CostEdge e{a, b, {}};
      for (int k = 0; k < 9; ++k) e.cost.push_back(u(rng));
      edges.push_back(e);
    }
  }
  return graph_of(std::move(nodes), std::move(edges));
}

TEST(SearchEliminations, AStarMergesANodeOfThreeEdgesWithANeighbour) {
  const CostGraph g = complete4();
  const SearchResult r = solve_dynamic_programming(g);
  EXPECT_EQ(r.eliminations.star, 1);
  EXPECT_EQ(r.exact_nodes, 0);
  expect_optimal(g, r);
}

TEST(SearchEliminations, WhatNoEliminationReducesIsSolvedExactly) {
  const CostGraph g = complete4();
  SearchOptions o;
  o.max_star_candidates = 1;  // no star
  const SearchResult r = solve_dynamic_programming(g, o);
  EXPECT_EQ(r.eliminations.total(), 0);
  EXPECT_EQ(r.exact_nodes, 4);
  EXPECT_DOUBLE_EQ(r.exact_combinations, 81);
  expect_optimal(g, r);
}

TEST(SearchEliminations, TooLargeARemainderIsAnErrorNamingItsNodes) {
  SearchOptions o;
  o.max_star_candidates = 1;
  o.max_exact_combinations = 80;
  EXPECT_ERROR(solve_dynamic_programming(complete4(), o), "4 nodes", "n0, n1, n2, n3",
               "combine in 81 ways", "max_exact_combinations", "shard()");
}

TEST(SearchEliminations, AMemoryCapacityPicksTheCheapestPlanThatFits) {
  // A chain whose cheap candidates hold much memory.
  CostGraph g = graph_of({node({1, 3}, {10, 2}), node({1, 2}, {10, 3}), node({1, 5}, {10, 1})},
                         {{0, 1, {0, 1, 1, 0}}, {1, 2, {0, 1, 1, 0}}});
  EXPECT_DOUBLE_EQ(solve_dynamic_programming(g).cost, 3);
  g.memory_capacity_bytes = 21;
  const SearchResult r = solve_dynamic_programming(g);
  expect_optimal(g, r);
  EXPECT_LE(r.memory_bytes, 21);
  EXPECT_GT(r.cost, 3);
}

TEST(SearchEliminations, AnInfeasibleCapacityNamesTheSmallestMemoryAnyPlanNeeds) {
  CostGraph g = graph_of({node({1, 3}, {10, 2}), node({1, 2}, {10, 3})}, {{0, 1, {0, 1, 1, 0}}});
  g.memory_capacity_bytes = 4;
  EXPECT_ERROR(solve_dynamic_programming(g), "memory capacity of 4 bytes",
               "the smallest memory any plan needs is 5 bytes");
  EXPECT_ERROR(solve_exhaustive(g), "the smallest memory any plan needs is 5 bytes");
}

TEST(SearchEliminations, ForbiddenPairsEverywhereAreAnError) {
  const CostGraph g = graph_of({node({0}), node({0})}, {{0, 1, {kInf}}});
  EXPECT_ERROR(solve_dynamic_programming(g), "forbidden pair");
  // One allowed pair is enough.
  const CostGraph h = graph_of({node({0, 1}), node({0, 0})}, {{0, 1, {kInf, kInf, 2, kInf}}});
  const SearchResult r = solve_dynamic_programming(h);
  EXPECT_EQ(r.choice, (std::vector<int>{1, 0}));
  EXPECT_DOUBLE_EQ(r.cost, 3);
}

TEST(SearchEliminations, MalformedCostGraphsAreErrors) {
  EXPECT_ERROR(solve_dynamic_programming(graph_of({node({1}), node({1})}, {{0, 2, {0}}})),
               "edge 0 joins nodes 0 and 2");
  EXPECT_ERROR(solve_dynamic_programming(graph_of({node({1}), node({1, 2})}, {{0, 1, {0}}})),
               "has 1 costs; expected 2");
  EXPECT_ERROR(solve_dynamic_programming(graph_of({node({})}, {})), "node 0 (n0) has no candidate");
  EXPECT_ERROR(solve_dynamic_programming(graph_of({node({-1})}, {})), "has cost -1");
}

// Random cost graphs of every shape (forests, cycles, dense parts, parallel edges, forbidden
// pairs, memory limits): the dynamic programming's cost is exhaustive enumeration's minimum.
TEST(SearchEliminations, RandomGraphsMatchExhaustiveEnumeration) {
  std::mt19937 rng(2026);
  int solved = 0, stars = 0, exact = 0, limited = 0;
  for (int round = 0; round < 600; ++round) {
    const int n = 1 + static_cast<int>(rng() % 7);
    std::vector<CostNode> nodes;
    for (int i = 0; i < n; ++i) {
      const int k = 1 + static_cast<int>(rng() % 4);
      std::vector<double> cost, memory;
      for (int c = 0; c < k; ++c) {
        cost.push_back(static_cast<double>(rng() % 100) / 10);
        memory.push_back(static_cast<double>(rng() % 50));
      }
      nodes.push_back(node(cost, memory));
    }
    std::vector<CostEdge> edges;
    // Every fifth graph is dense and left to the exact solver (no star).
    const bool dense = round % 5 == 0;
    const auto spread = static_cast<unsigned>(2 * n + 1);
    const int m = n == 1 ? 0 : static_cast<int>(rng() % spread) + (dense ? 2 * n : 0);
    for (int k = 0; k < m; ++k) {
      const int a = static_cast<int>(rng() % static_cast<unsigned>(n));
      int b = static_cast<int>(rng() % static_cast<unsigned>(n - 1));
      if (b >= a) ++b;
      CostEdge e{a, b, {}};
      const size_t cells =
          nodes[static_cast<size_t>(a)].cost.size() * nodes[static_cast<size_t>(b)].cost.size();
      for (size_t c = 0; c < cells; ++c) {
        e.cost.push_back(rng() % 8 == 0 ? kInf : static_cast<double>(rng() % 100) / 10);
      }
      edges.push_back(e);
    }
    CostGraph g = graph_of(std::move(nodes), std::move(edges));
    if (round % 3 == 0) {
      g.memory_capacity_bytes = 1 + static_cast<double>(rng() % 150);
      ++limited;
    }
    SearchOptions o;
    if (dense) o.max_star_candidates = 1;
    bool feasible = true;
    try {
      solve_exhaustive(g);
    } catch (const Error&) {
      feasible = false;
    }
    if (!feasible) {
      EXPECT_THROW(solve_dynamic_programming(g, o), Error) << "round " << round;
      continue;
    }
    const SearchResult r = solve_dynamic_programming(g, o);
    expect_optimal(g, r);
    ++solved;
    stars += r.eliminations.star;
    exact += r.exact_nodes > 0;
  }
  EXPECT_GT(solved, 300);
  EXPECT_GT(stars, 10);  // the generator reaches every path of the search
  EXPECT_GT(exact, 10);
  EXPECT_GT(limited, 150);
}

}  // namespace
}  // namespace cleave::parallel

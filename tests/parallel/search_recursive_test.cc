// The recursive-programming search (NOTE [Recursive programming search] in
// cleave/parallel/search.h) and the algorithm parameters both searches honour (NOTE [Algorithm
// parameters]): on random small networks (chains, diamonds, shared weights) and seed 000's LeNet
// for 2, 3, 4, 6 and 8 devices every strategy it chooses is valid and its plan costs at most a
// bounded factor more than the dynamic programming's optimum.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <limits>
#include <random>

#include "cleave/cleave.h"
#include "cleave/ir/parse.h"
#include "cleave/parallel/search.h"

namespace cleave::parallel {
namespace {

using Body = std::function<std::vector<Tensor>(const std::vector<Tensor>&)>;

ir::Graph trace(const std::vector<Shape>& shapes, const Body& body) {
  ir::Graph g;
  g.name = "net";
  ir::Tracer tracer(g);
  std::vector<Tensor> inputs;
  for (size_t k = 0; k < shapes.size(); ++k) {
    inputs.push_back(tracer.add_input({shapes[k], DType::kFloat32}, fmt::format("in{}", k)));
  }
  for (const Tensor& t : body(inputs)) g.outputs.push_back(tracer.value_of(t));
  return g;
}

Tensor parameter(const Shape& shape, const std::string& name) {
  // Trainable: a training step pays the reduction of its gradient (NOTE [Cost graph]).
  return ir::Tracer::current()->add_parameter(Tensor::ones(shape).set_requires_grad(true), name);
}

Tensor call(const char* op, std::vector<Tensor> in) {
  return ir::Primitive(op).call1(std::move(in));
}

// A random network of 2 to 6 ops on a (batch, features) input: MatMul by a new or an earlier
// weight (shared parameters), ReLU, Tanh, Add of two earlier values of one shape (diamonds), Mul
// by a vector parameter; `chain` reads the last value, otherwise any earlier one.
ir::Graph random_network(std::mt19937& rng, bool chain, bool shared, int64_t batch) {
  const std::vector<int64_t> dims = {2, 3, 4, 6, 8, 12};
  auto pick = [&](const std::vector<int64_t>& v) { return v[rng() % v.size()]; };
  return trace({{batch, pick(dims)}}, [&](const std::vector<Tensor>& in) {
    std::vector<Tensor> values = {in[0]}, weights;
    const int ops = 2 + static_cast<int>(rng() % 5);
    for (int k = 0; k < ops; ++k) {
      const Tensor x = chain ? values.back() : values[rng() % values.size()];
      const int64_t h = x.shape()[1];
      Tensor y;
      switch (shared && rng() % 2 == 0 ? 0 : rng() % 5) {
        case 0: {
          Tensor w;
          for (const Tensor& old : weights) {
            if (old.shape()[0] == h && (shared || rng() % 2 == 0)) w = old;
          }
          if (!w.defined()) {
            w = parameter({h, shared ? h : pick(dims)}, fmt::format("w{}", weights.size()));
            weights.push_back(w);
          }
          y = call("MatMul", {x, w});
          break;
        }
        case 1:
          y = call("ReLU", {x});
          break;
        case 2: {
          Tensor other = x;
          for (const Tensor& v : values) {
            if (v.shape() == x.shape() && rng() % 2 == 0) other = v;
          }
          y = call("Add", {x, other});
          break;
        }
        case 3:
          y = call("Mul", {x, parameter({h}, fmt::format("scale{}", k))});
          break;
        default:
          y = call("Tanh", {x});
          break;
      }
      values.push_back(y);
    }
    return std::vector<Tensor>{values.back()};
  });
}

RuleContext rule_context(const ir::Graph& g, const ir::Node& n, std::vector<ir::TensorMeta>& metas,
                         int64_t devices) {
  metas.clear();
  for (const ir::ValueRef& v : n.inputs) metas.push_back(g.meta(v));
  return RuleContext{*n.op, n.attrs, metas, n.outputs, n.name, n.scope, devices};
}

// Every op's strategy is one its rule's infer accepts on `devices` devices.
void expect_valid(const ir::Graph& g, const std::vector<ir::Strategy>& strategies,
                  int64_t devices) {
  ASSERT_EQ(strategies.size(), g.nodes.size());
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    const ir::Node& n = g.nodes[i];
    if (!n.is_op()) continue;
    std::vector<ir::TensorMeta> metas;
    const RuleContext ctx = rule_context(g, n, metas, devices);
    EXPECT_NO_THROW(rule_of(*n.op).infer(ctx, strategies[i]))
        << n.name << " " << ir::strategy_to_string(strategies[i]) << " on " << devices;
  }
}

int64_t used(const ir::Graph& g, const ir::Node& n, const ir::Strategy& s, int64_t devices) {
  std::vector<ir::TensorMeta> metas;
  const OpSharding sharding = rule_of(*n.op).infer(rule_context(g, n, metas, devices), s);
  int64_t product = 1;
  for (int64_t split : sharding.loop_splits) product *= split;
  return product;
}

// The ratio of the recursive plan's cost to the dynamic programming's optimum over every
// strategy (fully_use_devices off: a superset of the recursive search's space), after checking
// the plan's validity and that its own cost is the cost graph's.
double ratio_to_optimum(const ir::Graph& net, SearchOptions o) {
  const RecursivePlan plan = recursive_programming_plan(net, o);
  expect_valid(net, plan.strategies, o.step_parallel.device_num);
  o.fully_use_devices = false;
  const CostGraph graph = build_cost_graph(net, o);
  const SearchResult optimum = solve_dynamic_programming(graph, o);
  const SearchResult mine = cost_of_strategies(graph, net, plan.strategies);
  EXPECT_TRUE(std::isfinite(mine.cost)) << ir::dump_text(net);
  EXPECT_NEAR(plan.cost, mine.cost, 1e-9 * std::max(1e-9, mine.cost));
  EXPECT_NEAR(plan.memory_bytes, mine.memory_bytes, 1e-6 * std::max(1.0, mine.memory_bytes));
  EXPECT_GE(mine.cost, optimum.cost * (1 - 1e-9));
  return mine.cost / optimum.cost;
}

// Over these 1500 networks the worst ratio observed was 4.68 and the mean 1.018 (printed by the
// test): the plans that lose are tiny chains at the collectives' latency floor, where splitting
// a weight's columns and replicating cost the same to one op and differ only along the chain.
// The bound leaves room for cost-model changes without hiding a broken search.
constexpr double kBound = 6.0;

TEST(RecursiveSearch, RandomNetworksGetValidPlansWithinABoundOfTheOptimum) {
  std::mt19937 rng(2501);
  double worst = 1, sum = 0;
  int tested = 0;
  for (int64_t devices : {2, 3, 4, 6, 8}) {
    for (int round = 0; round < 300; ++round) {
      SearchOptions o;
      o.step_parallel.device_num = devices;
      int64_t batch = devices * (1 + round % 3);
      if (round % 5 == 4) {
        o.step_parallel.dataset = DatasetSplit::kFullBatch;
        batch = 12;
      }
      o.training = round % 2 == 0;
      o.beta = round % 4 < 2 ? 1.0 : 0.25;
      o.fully_use_devices = false;  // the same space as the optimum's
      const ir::Graph net = random_network(rng, round % 3 != 1, round % 3 == 2, batch);
      const double r = ratio_to_optimum(net, o);
      worst = std::max(worst, r);
      sum += r;
      ++tested;
      EXPECT_LE(r, kBound) << devices << " devices, round " << round << "\n" << ir::dump_text(net);
      if (r > kBound) {  // what each search chose, to see why
        const RecursivePlan plan = recursive_programming_plan(net, o);
        const CostGraph graph = build_cost_graph(net, o);
        const SearchResult opt = solve_dynamic_programming(graph, o);
        const SearchResult mine = cost_of_strategies(graph, net, plan.strategies);
        for (size_t i = 0; i < graph.nodes.size(); ++i) {
          const CostNode& n = graph.nodes[i];
          std::printf("  %s: optimum %s (%g) recursive %s (%g)\n", n.name.c_str(),
                      n.labels[opt.choice[i]].c_str(), n.cost[opt.choice[i]],
                      n.labels[mine.choice[i]].c_str(), n.cost[mine.choice[i]]);
        }
      }
    }
  }
  std::printf("recursive / optimum over %d networks: worst %.4f, mean %.4f\n", tested, worst,
              sum / tested);
}

ir::Graph lenet() {
  return ir::parse_file(std::string(CLEAVE_TESTS_DIR) +
                        "/runtime/golden/seeds/000_lenet_place/forward/01_trace.ir")
      .graph;
}

TEST(RecursiveSearch, LeNetGetsValidPlansWithinTheBoundOnTwoToEightDevices) {
  for (int64_t devices : {2, 3, 4, 6, 8}) {
    for (bool training : {true, false}) {
      SearchOptions o{.step_parallel = {.device_num = devices}, .training = training};
      // A batch of 32 divides among 2, 4 and 8; 3 and 6 ranks read the whole batch.
      if (32 % devices != 0) o.step_parallel.dataset = DatasetSplit::kFullBatch;
      const double r = ratio_to_optimum(lenet(), o);
      std::printf("LeNet on %lld devices (%s): recursive / optimum %.4f\n",
                  static_cast<long long>(devices), training ? "training" : "forward", r);
      EXPECT_LE(r, kBound) << devices;
    }
  }
}

// Seed 001's traced ResNet-50 (batch 2, read whole): its BatchNorms' moving statistics are read
// by the BatchNorm and by the update's Mul, whose options stop meeting on many devices; the
// repair after the last level gives each parameter one layout (a finite cost) up to 1024.
TEST(RecursiveSearch, SeedOnesResNet50GetsAConsistentPlanUpTo1024Devices) {
  const ir::Graph net =
      ir::parse_file(std::string(CLEAVE_TESTS_DIR) +
                     "/runtime/golden/seeds/001_resnet50_data_parallel/train_step/01_trace.ir")
          .graph;
  for (int64_t devices : {8, 1024}) {
    SearchOptions o{.step_parallel = {.device_num = devices, .dataset = DatasetSplit::kFullBatch}};
    const RecursivePlan plan = recursive_programming_plan(net, o);
    EXPECT_TRUE(std::isfinite(plan.cost)) << devices;
    expect_valid(net, plan.strategies, devices);
    // The dynamic programming finds a plan too (its users widened, NOTE [Algorithm parameters]).
    const double optimum = solve_dynamic_programming(build_cost_graph(net, o), o).cost;
    std::printf("ResNet-50 on %lld devices: recursive / optimum %.4f\n",
                static_cast<long long>(devices), plan.cost / optimum);
    EXPECT_GE(plan.cost, optimum * (1 - 1e-9));
  }
}

// A parameter read by ops whose strategies using every device never read it alike: the Mul of
// x (8, 4) by s (4,) splits s 4 ways over the last axis of [2, 4], the ReLU of s 4 ways over the
// first of [4, 2]. Under fully_use_devices both get back their other candidates, so the dynamic
// programming has a plan (MindSpore reports a failed edge there).
TEST(AlgoParameters, FullyUseDevicesWidensTheUsersOfAParameterTheyCannotShare) {
  const ir::Graph net = trace({{8, 4}}, [](const std::vector<Tensor>& in) {
    const Tensor s = parameter({4}, "s");
    return std::vector<Tensor>{call("Mul", {in[0], s}), call("ReLU", {s})};
  });
  SearchOptions o{.step_parallel = {.device_num = 8}};
  const CostGraph graph = build_cost_graph(net, o);
  // The Mul was widened: some of its candidates use fewer than 8 devices.
  const ir::Node& mul = net.nodes[static_cast<size_t>(graph.nodes[0].graph_node)];
  ASSERT_EQ(mul.op->name, "Mul");
  EXPECT_TRUE(std::any_of(graph.nodes[0].strategies.begin(), graph.nodes[0].strategies.end(),
                          [&](const ir::Strategy& st) { return used(net, mul, st, 8) < 8; }));
  const SearchResult r = solve_dynamic_programming(graph, o);
  EXPECT_TRUE(std::isfinite(r.cost));
  EXPECT_TRUE(std::isfinite(recursive_programming_plan(net, o).cost));
}

TEST(RecursiveSearch, SplitsAnyDeviceCountByItsPrimeFactors) {
  ir::Graph net = lenet();
  for (int64_t devices : {1, 2, 3, 4, 6, 8, 12, 16, 5, 7}) {
    SearchOptions o{.step_parallel = {.device_num = devices, .dataset = DatasetSplit::kFullBatch}};
    const RecursivePlan plan = recursive_programming_plan(net, o);
    expect_valid(net, plan.strategies, devices);
    int64_t product = 1;
    for (int64_t p : plan.levels) product *= p;
    EXPECT_EQ(product, devices);
    EXPECT_TRUE(std::is_sorted(plan.levels.begin(), plan.levels.end()));
  }
  EXPECT_EQ(recursive_programming_plan(
                net, {.step_parallel = {.device_num = 12, .dataset = DatasetSplit::kFullBatch}})
                .levels,
            (std::vector<int64_t>{2, 2, 3}));
}

// MatMul (x: (16, 32), w: (32, 16)) -> ReLU -> MatMul (w2: (16, 16)).
ir::Graph seed_net(const ir::Strategy& first = {}) {
  return trace({{16, 32}}, [&](const std::vector<Tensor>& in) {
    ir::Primitive matmul("MatMul"), relu("ReLU"), matmul2("MatMul");
    matmul.set_name("matmul");
    relu.set_name("relu");
    matmul2.set_name("matmul2");
    if (!first.empty()) matmul.shard(first);
    const Tensor h = relu.call1({matmul.call1({in[0], parameter({32, 16}, "w")})});
    return std::vector<Tensor>{matmul2.call1({h, parameter({16, 16}, "w2")})};
  });
}

const ir::Node& op_named(const ir::Graph& g, const std::string& name) {
  for (const ir::Node& n : g.nodes) {
    if (n.is_op() && n.name == name) return n;
  }
  throw std::runtime_error("no op " + name);
}

TEST(RecursiveSearch, AppliesStrategiesAsTheDynamicProgrammingDoesAndKeepsTheGivenOnes) {
  ir::Graph g = seed_net({{2, 4}, {4, 1}});
  const RecursivePlan plan = search_strategies_recursive(g, {.step_parallel = {.device_num = 8}});
  EXPECT_EQ(plan.ops, 2);
  EXPECT_EQ(op_named(g, "matmul").strategy, (ir::Strategy{{2, 4}, {4, 1}}));
  EXPECT_FALSE(op_named(g, "matmul").strategy_derived);
  for (const char* name : {"relu", "matmul2"}) {
    EXPECT_FALSE(op_named(g, name).strategy.empty()) << name;
    EXPECT_TRUE(op_named(g, name).strategy_derived) << name;
  }
  EXPECT_NE(plan.summary().find("recursive programming: 2 ops, 3 levels (2 x 2 x 2), predicted "
                                "step cost "),
            std::string::npos)
      << plan.summary();
}

TEST(RecursiveSearch, AnInfeasibleMemoryCapacityNamesTheLeastAnyPlanNeeds) {
  ir::Graph g = seed_net();
  try {
    search_strategies_recursive(g,
                                {.step_parallel = {.device_num = 4}, .memory_capacity_bytes = 8});
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("recursive programming: no plan fits the memory capacity "
                                         "of 8 bytes per rank; the smallest memory any plan needs "
                                         "is "),
              std::string::npos)
        << e.what();
  }
}

// ---- the algorithm parameters, in both searches ----

// A (4, 4) product read whole by every rank of 8: splitting anything only adds communication.
ir::Graph tiny_matmul() {
  return trace({{4, 4}}, [](const std::vector<Tensor>& in) {
    ir::Primitive matmul("MatMul");
    matmul.set_name("matmul");
    return std::vector<Tensor>{matmul.call1({in[0], parameter({4, 4}, "w")})};
  });
}

TEST(AlgoParameters, FullyUseDevicesOffAdmitsAStrategyUsingFewerDevices) {
  for (bool full : {true, false}) {
    SearchOptions o{.step_parallel = {.device_num = 8, .dataset = DatasetSplit::kFullBatch},
                    .fully_use_devices = full};
    ir::Graph dp = tiny_matmul(), rec = tiny_matmul();
    const CostGraph graph = build_cost_graph(dp, o);
    for (const ir::Strategy& s : graph.nodes[0].strategies) {
      if (full) {
        EXPECT_EQ(used(dp, op_named(dp, "matmul"), s, 8), 8) << ir::strategy_to_string(s);
      }
    }
    search_strategies(dp, o);
    search_strategies_recursive(rec, o);
    for (const ir::Graph* g : {&dp, &rec}) {
      const ir::Node& n = op_named(*g, "matmul");
      const int64_t u = used(*g, n, n.strategy, 8);
      if (full) {
        EXPECT_EQ(u, 8) << ir::strategy_to_string(n.strategy);
      } else {
        EXPECT_LT(u, 8) << ir::strategy_to_string(n.strategy);
      }
    }
  }
}

// The elementwise ops of `g` (strategies applied) that read their first producer's output as it
// is produced, and those that could (some candidate on `devices` does).
std::pair<int, int> following(const ir::Graph& g, int64_t devices) {
  int follow = 0, could = 0;
  for (const ir::Node& n : g.nodes) {
    if (!n.is_op() || !rule_of(*n.op).summary().starts_with("elementwise")) continue;
    for (size_t k = 0; k < n.inputs.size(); ++k) {
      const ir::Node& producer = g.nodes[static_cast<size_t>(n.inputs[k].node)];
      if (!producer.is_op()) continue;
      std::vector<ir::TensorMeta> m1, m2;
      const Layout out = rule_of(*producer.op)
                             .infer(rule_context(g, producer, m1, devices), producer.strategy)
                             .outputs[static_cast<size_t>(n.inputs[k].output)]
                             .completed();
      const RuleContext ctx = rule_context(g, n, m2, devices);
      follow += out.same_distribution(rule_of(*n.op).infer(ctx, n.strategy).inputs[k]);
      const std::vector<OpSharding> all = rule_of(*n.op).shardings(ctx);
      could += std::any_of(all.begin(), all.end(),
                           [&](const OpSharding& s) { return out.same_distribution(s.inputs[k]); });
      break;
    }
  }
  return {follow, could};
}

TEST(AlgoParameters, ElementwiseOpStrategyFollowMakesElementwiseOpsTakeTheirProducersLayout) {
  std::mt19937 rng(7);
  int follow[2][2] = {}, could = 0;  // [search][flag]
  for (int round = 0; round < 120; ++round) {
    const int64_t devices = round % 2 == 0 ? 4 : 8;
    const ir::Graph net = random_network(rng, round % 3 != 1, false, devices * 2);
    for (int flag = 0; flag < 2; ++flag) {
      SearchOptions o{.step_parallel = {.device_num = devices},
                      .fully_use_devices = false,
                      .elementwise_op_strategy_follow = flag == 1};
      ir::Graph dp = net, rec = net;
      search_strategies(dp, o);
      search_strategies_recursive(rec, o);
      const auto [f_dp, c_dp] = following(dp, devices);
      follow[0][flag] += f_dp;
      follow[1][flag] += following(rec, devices).first;
      if (flag == 1) {
        // The dynamic programming follows wherever a candidate can.
        EXPECT_EQ(f_dp, c_dp) << ir::dump_text(dp);
        could += c_dp;
      }
    }
  }
  std::printf(
      "elementwise ops following their producer (of %d that could): dynamic programming "
      "%d without, %d with; recursive %d without, %d with\n",
      could, follow[0][0], follow[0][1], follow[1][0], follow[1][1]);
  EXPECT_GT(follow[0][1], follow[0][0]);
  EXPECT_GT(follow[1][1], follow[1][0]);
}

TEST(AlgoParameters, EnableAlgoApproxiThinsTheCandidates) {
  const ir::Graph net = lenet();
  SearchOptions o{.step_parallel = {.device_num = 8}, .fully_use_devices = false};
  const CostGraph exact = build_cost_graph(net, o);
  o.enable_algo_approxi = true;
  o.algo_approxi_epsilon = 0.5;
  const CostGraph approx = build_cost_graph(net, o);
  int64_t a = 0, b = 0;
  for (const CostNode& n : exact.nodes) a += n.num_candidates();
  for (const CostNode& n : approx.nodes) b += n.num_candidates();
  EXPECT_LT(b, a);
  const double optimum = solve_dynamic_programming(exact, o).cost;
  EXPECT_GE(solve_dynamic_programming(approx, o).cost, optimum * (1 - 1e-9));
  EXPECT_TRUE(std::isfinite(recursive_programming_plan(net, o).cost));
  o.algo_approxi_epsilon = 0;
  EXPECT_THROW(build_cost_graph(net, o), Error);
}

TEST(AlgoParameters, TensorSliceAlignKeepsMatMulSlicesMultiplesOfTheSize) {
  // x (64, 64) . w (64, 64) on 8 devices: a dimension cut 8 ways leaves 8 elements.
  auto net = [] {
    return trace({{64, 64}}, [](const std::vector<Tensor>& in) {
      ir::Primitive matmul("MatMul");
      matmul.set_name("matmul");
      return std::vector<Tensor>{matmul.call1({in[0], parameter({64, 64}, "w")})};
    });
  };
  auto aligned = [](const ir::Strategy& s) {
    for (const auto& input : s) {
      for (int64_t split : input) {
        if (split > 1 && (64 / split) % 16 != 0) return false;
      }
    }
    return true;
  };
  for (bool align : {false, true}) {
    SearchOptions o{.step_parallel = {.device_num = 8, .dataset = DatasetSplit::kFullBatch},
                    .tensor_slice_align_enable = align};
    ir::Graph g = net(), rec = net();
    const CostGraph graph = build_cost_graph(g, o);
    const auto& cands = graph.nodes[0].strategies;
    EXPECT_EQ(std::all_of(cands.begin(), cands.end(), aligned), align);
    search_strategies_recursive(rec, o);
    if (align) {
      EXPECT_TRUE(aligned(op_named(rec, "matmul").strategy));
    }
  }
  SearchOptions bad{.step_parallel = {.device_num = 8}, .tensor_slice_align_size = 0};
  EXPECT_THROW(build_cost_graph(net(), bad), Error);
}

}  // namespace
}  // namespace cleave::parallel

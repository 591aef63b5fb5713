// The strategy search on traced graphs (NOTE [Cost graph], [Dynamic programming search] in
// cleave/parallel/search.h): the cost graph's nodes and edges, the errors, and random small
// networks on 4, 6 and 8 devices whose searched plan costs what exhaustive enumeration's best
// does.
#include "cleave/parallel/search.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <map>
#include <random>

#include "cleave/cleave.h"
#include "cleave/ir/parse.h"
#include "cleave/parallel/plan_estimate.h"
#include "cleave/parallel/redistribution.h"
#include "cleave/parallel/sharding_rule.h"
#include "testing/gradcheck.h"

namespace cleave::parallel {
namespace {

using Body = std::function<std::vector<Tensor>(const std::vector<Tensor>&)>;

// Traces `body` on Float32 inputs of `shapes`.
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

// A random network of 2 to 4 ops on a (batch, features) input: MatMul by a new or an earlier
// weight (shared parameters), ReLU, Tanh, Add of two earlier values of one shape (diamonds),
// Mul by a vector parameter. A chain always reads the last value, a fan-out any earlier one; a
// network of shared weights is a chain whose MatMuls (half its ops) reuse one square weight.
enum class Family { kChain, kFanOut, kSharedWeights };

ir::Graph random_network(std::mt19937& rng, Family family, int64_t batch) {
  const bool chain = family != Family::kFanOut, shared = family == Family::kSharedWeights;
  const std::vector<int64_t> dims = {2, 3, 4, 6};
  auto pick = [&](const std::vector<int64_t>& v) { return v[rng() % v.size()]; };
  return trace({{batch, pick(dims)}}, [&](const std::vector<Tensor>& in) {
    std::vector<Tensor> values = {in[0]}, weights;
    const int ops = 2 + static_cast<int>(rng() % 3);
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

// The least memory of a plan of `g` without forbidden pairs, by enumeration.
double least_memory(const CostGraph& g) {
  std::vector<int> choice(g.nodes.size(), 0);
  double least = std::numeric_limits<double>::infinity();
  for (;;) {
    if (std::isfinite(g.cost(choice))) least = std::min(least, g.memory(choice));
    size_t i = 0;
    for (; i < choice.size(); ++i) {
      if (++choice[i] < g.nodes[i].num_candidates()) break;
      choice[i] = 0;
    }
    if (i == choice.size()) return least;
  }
}

double combinations(const CostGraph& g) {
  double n = 1;
  for (const CostNode& node : g.nodes) n *= static_cast<double>(node.num_candidates());
  return n;
}

// The outcome of a search as text: its cost, or the least memory its error names.
std::string outcome(const std::function<SearchResult()>& solve) {
  try {
    return fmt::format("cost {:.12g}", solve().cost);
  } catch (const Error& e) {
    const std::string what = e.what();
    const size_t at = what.find("the smallest memory any plan needs is");
    return at == std::string::npos ? what : what.substr(at, what.find(" bytes", at) - at);
  }
}

TEST(Search, RandomNetworksCostWhatExhaustiveEnumerationsBestCosts) {
  std::mt19937 rng(25);
  for (int64_t devices : {4, 6, 8}) {
    int tested = 0, fitting = 0, binding = 0, shared = 0;
    for (int round = 0; tested < 120 && round < 2000; ++round) {
      // Data parallel input (a batch of 1 or 2 per device), or every rank reading the batch.
      SearchOptions o;
      o.step_parallel.device_num = devices;
      int64_t batch = devices * (1 + round % 2);
      if (round % 5 == 4) {
        o.step_parallel.dataset = DatasetSplit::kFullBatch;
        batch = 6;
      }
      const ir::Graph net = random_network(rng, static_cast<Family>(round % 3), batch);
      o.training = round % 2 == 0;
      o.beta = round % 4 < 2 ? 1.0 : 0.25;
      CostGraph g = build_cost_graph(net, o);
      if (combinations(g) > 2e5) continue;
      const SearchResult best = solve_exhaustive(g);
      const SearchResult dp = solve_dynamic_programming(g, o);
      ASSERT_NEAR(dp.cost, best.cost, 1e-9 * best.cost)
          << devices << " devices, round " << round << "\n"
          << ir::dump_text(net);
      ++tested;
      std::vector<int> users(g.nodes.size(), 0);
      for (const CostEdge& e : g.edges) {
        if (g.nodes[static_cast<size_t>(e.from)].kind == CostNode::Kind::kParameter) {
          ++users[static_cast<size_t>(e.from)];
        }
      }
      shared += std::count_if(users.begin(), users.end(), [](int n) { return n > 1; }) > 0;
      // Under a memory capacity below the unconstrained plan's memory: the same plan cost, or
      // the same error (with the same smallest memory).
      // Under a memory capacity between the least any plan needs and the best plan's (a plan
      // fits; a cheaper one may not), or below the least (none fits): the same plan cost, or an
      // error naming the same smallest memory.
      const double least = least_memory(g);
      const double u = static_cast<double>(rng() % 1000) / 1000;
      g.memory_capacity_bytes =
          round % 4 == 1 ? std::floor(least * 0.9) : least + u * (best.memory_bytes - least);
      const std::string expected = outcome([&] { return solve_exhaustive(g); });
      EXPECT_EQ(outcome([&] { return solve_dynamic_programming(g, o); }), expected)
          << devices << " devices, round " << round;
      const bool fits = expected.rfind("cost", 0) == 0;
      fitting += fits;
      binding += fits && expected != fmt::format("cost {:.12g}", best.cost);
    }
    EXPECT_EQ(tested, 120) << devices << " devices";
    EXPECT_GT(fitting, 60);  // some capacities leave a plan, others none
    EXPECT_LT(fitting, tested);
    EXPECT_GT(binding, 10);  // some cost more than the unconstrained best
    EXPECT_GT(shared, 5);    // networks with a parameter read by several ops
  }
}

// Every op-to-op cell of `g` (built from `net` with `o`) against the plain loop the builder
// replaced (NOTE [Edge costs] in cost_graph.cc): beta * m times the redistribution from the
// producer candidate's completed output to the consumer candidate's input, 0 where they
// distribute alike, bit for bit. Returns the cells checked.
int64_t expect_plain_edge_costs(const ir::Graph& net, const CostGraph& g, const SearchOptions& o) {
  const CostModel& model = o.cost_model != nullptr ? *o.cost_model : default_cost_model();
  const double m = o.training ? 2.0 : 1.0;
  // The shardings of an op's candidates, from its strategies.
  const auto shardings = [&](const CostNode& c) {
    const ir::Node& n = net.nodes[static_cast<size_t>(c.graph_node)];
    std::vector<ir::TensorMeta> metas;
    for (const ir::ValueRef& v : n.inputs) metas.push_back(net.meta(v));
    const RuleContext ctx{
        *n.op, n.attrs, metas, n.outputs, n.name, n.scope, o.step_parallel.device_num};
    std::vector<OpSharding> out;
    for (const ir::Strategy& s : c.strategies) out.push_back(find_rule(*n.op)->infer(ctx, s));
    return out;
  };
  // The edges of each (producer, consumer) pair, in the order the builder adds them: by the
  // consumer's inputs.
  std::map<std::pair<int, int>, int> seen;
  int64_t cells = 0;
  for (const CostEdge& e : g.edges) {
    const CostNode& from = g.nodes[static_cast<size_t>(e.from)];
    const CostNode& to = g.nodes[static_cast<size_t>(e.to)];
    if (from.kind != CostNode::Kind::kOperator) continue;
    const ir::Node& consumer = net.nodes[static_cast<size_t>(to.graph_node)];
    int skip = seen[{e.from, e.to}]++;
    size_t k = 0;
    for (; k < consumer.inputs.size(); ++k) {
      if (consumer.inputs[k].node == from.graph_node && skip-- == 0) break;
    }
    EXPECT_LT(k, consumer.inputs.size());
    if (k == consumer.inputs.size()) return cells;
    const ir::ValueRef v = consumer.inputs[k];
    const ir::TensorMeta meta = net.meta(v);
    const DType dtype = meta.dtype == DType::kBool ? DType::kInt32 : meta.dtype;
    const std::vector<OpSharding> rows = shardings(from), cols = shardings(to);
    for (size_t a = 0; a < rows.size(); ++a) {
      const Layout produced = rows[a].outputs[static_cast<size_t>(v.output)].completed();
      for (size_t b = 0; b < cols.size(); ++b) {
        const Layout& read = cols[b].inputs[k];
        const double s =
            produced.same_distribution(read)
                ? 0
                : model.redistribution_s(plan_redistribution(produced, read, meta.shape, dtype));
        if (e.cost[a * cols.size() + b] != o.beta * m * s) {
          ADD_FAILURE() << from.name << " -> " << to.name << ", candidates " << a << " and " << b
                        << ": " << e.cost[a * cols.size() + b] << ", expected " << o.beta * m * s;
          return cells;
        }
        ++cells;
      }
    }
  }
  return cells;
}

TEST(Search, EveryEdgeCellIsTheRedistributionBetweenItsCandidatesLayouts) {
  std::mt19937 rng(2025);
  int64_t cells = 0;
  for (int64_t devices : {4, 6, 8}) {
    for (int round = 0; round < 30; ++round) {
      SearchOptions o;
      o.step_parallel.device_num = devices;
      o.training = round % 2 == 0;
      o.beta = round % 4 < 2 ? 1.0 : 0.25;
      const ir::Graph net = random_network(rng, static_cast<Family>(round % 3), devices * 2);
      cells += expect_plain_edge_costs(net, build_cost_graph(net, o), o);
    }
  }
  // Large enough that the builder plans on several threads (4096 different cells or more):
  // MatMul and ReLU layers of changing widths on 1024 devices.
  const ir::Graph wide = trace({{1024, 256}}, [](const std::vector<Tensor>& in) {
    Tensor x = in[0];
    int64_t width = 256;
    for (int64_t next : {512, 128, 1024, 256, 2048, 64, 512, 2048, 128, 1024, 64, 256}) {
      const Tensor w = parameter({width, next}, fmt::format("w{}_{}", width, next));
      x = call("ReLU", {call("MatMul", {x, w})});
      width = next;
    }
    return std::vector<Tensor>{x};
  });
  const SearchOptions o{.step_parallel = {.device_num = 1024}};
  const CostGraph g = build_cost_graph(wide, o);
  const int64_t wide_cells = expect_plain_edge_costs(wide, g, o);
  EXPECT_GT(wide_cells, 12000);
  EXPECT_GT(cells + wide_cells, 0);
  // The dynamic programming on it still equals the plain replay of its choice.
  const SearchResult r = solve_dynamic_programming(g, o);
  EXPECT_EQ(r.cost, g.cost(r.choice));
}

// Seed 003's Net on 8 devices: x (16, 32) · w (32, 16), ReLU, · w2 (16, 16), MSELoss.
ir::Graph seed_net() {
  return trace({{16, 32}, {16, 16}}, [](const std::vector<Tensor>& in) {
    ir::Primitive matmul("MatMul"), relu("ReLU"), matmul2("MatMul");
    matmul.set_name("matmul");
    relu.set_name("relu");
    matmul2.set_name("matmul2");
    const Tensor h = relu.call1({matmul.call1({in[0], parameter({32, 16}, "w")})});
    const Tensor out = matmul2.call1({h, parameter({16, 16}, "w2")});
    return std::vector<Tensor>{nn::MSELoss()(out, in[1])};
  });
}

TEST(Search, TheCostGraphHasANodePerOpAndParameterAndAnEdgePerTensor) {
  const ir::Graph net = seed_net();
  const CostGraph g = build_cost_graph(net, {.step_parallel = {.device_num = 8}});
  int ops = 0, params = 0, op_edges = 0, param_edges = 0;
  for (const CostNode& n : g.nodes) {
    ++(n.kind == CostNode::Kind::kOperator ? ops : params);
    EXPECT_EQ(n.labels.size(), n.cost.size());
    if (n.kind == CostNode::Kind::kOperator) EXPECT_EQ(n.strategies.size(), n.cost.size());
  }
  for (const CostEdge& e : g.edges) {
    ++(g.nodes[static_cast<size_t>(e.from)].kind == CostNode::Kind::kParameter ? param_edges
                                                                               : op_edges);
  }
  int tensors = 0;
  for (const ir::Node& n : net.nodes) {
    if (!n.is_op()) continue;
    for (const ir::ValueRef& v : n.inputs)
      tensors += net.nodes[static_cast<size_t>(v.node)].is_op();
  }
  EXPECT_EQ(ops, static_cast<int>(net.num_ops()));
  EXPECT_EQ(params, 2);
  EXPECT_EQ(param_edges, 2);
  EXPECT_EQ(op_edges, tensors);
  // MatMul (16, 32) x (32, 16) on 8 devices: every split of its three loops whose product is 8
  // (fully_use_devices, MindSpore's default), or, with fully_use_devices off, divides 8.
  const CostNode& matmul = g.nodes[0];
  EXPECT_EQ(matmul.name, "MatMul 'matmul' (scope Default)");
  EXPECT_EQ(matmul.num_candidates(), 10);
  EXPECT_EQ(matmul.labels[0], "((1, 1), (1, 8))");
  const CostGraph all =
      build_cost_graph(net, {.step_parallel = {.device_num = 8}, .fully_use_devices = false});
  EXPECT_EQ(all.nodes[0].num_candidates(), 20);
  EXPECT_EQ(all.nodes[0].labels[0], "((1, 1), (1, 1))");
}

TEST(Search, AParameterOfSeveralOpsIsReadInOneLayout) {
  // w is read by both MatMuls: whatever the search picks, they read it alike.
  ir::Graph net = trace({{64, 16}}, [](const std::vector<Tensor>& in) {
    const Tensor w = parameter({16, 16}, "w");
    const Tensor h = call("ReLU", {call("MatMul", {in[0], w})});
    return std::vector<Tensor>{call("MatMul", {h, w})};
  });
  const SearchReport r = search_strategies(net, {.step_parallel = {.device_num = 8}});
  EXPECT_EQ(r.parameters, 1);
  const ParallelPlan plan = plan_step_parallel(net, {.device_num = 8});
  std::vector<Layout> reads;
  for (size_t i = 0; i < net.nodes.size(); ++i) {
    const ir::Node& n = net.nodes[i];
    if (n.is_op() && n.op->name == "MatMul") reads.push_back(plan.ops[i].inputs[1]);
  }
  ASSERT_EQ(reads.size(), 2u);
  EXPECT_TRUE(reads[0].same_distribution(reads[1]))
      << reads[0].to_string() << " vs " << reads[1].to_string();
}

ir::Node& named(ir::Graph& g, const std::string& name) {
  for (ir::Node& n : g.nodes) {
    if (n.name == name) return n;
  }
  throw std::runtime_error("no node " + name);
}

TEST(Search, SetsEveryStrategyButTheGivenOnes) {
  ir::Graph net = seed_net();
  named(net, "matmul").strategy = {{2, 4}, {4, 1}};
  const SearchReport r = search_strategies(net, {.step_parallel = {.device_num = 8}});
  for (const ir::Node& n : net.nodes) {
    if (!n.is_op()) continue;
    EXPECT_FALSE(n.strategy.empty()) << n.name;
    EXPECT_EQ(n.strategy_derived, n.name != "matmul") << n.name;
  }
  EXPECT_EQ(named(net, "matmul").strategy, (ir::Strategy{{2, 4}, {4, 1}}));
  EXPECT_EQ(r.ops, static_cast<int>(net.num_ops()));
  EXPECT_NE(r.summary().find("dynamic programming: " + std::to_string(r.ops) + " ops"),
            std::string::npos)
      << r.summary();
}

TEST(Search, ALargeBatchIsSplitAndALargeWeightIsSharded) {
  // (4096, 8) x (8, 8): the batch dwarfs the weight, data parallel is cheapest.
  ir::Graph wide = trace({{4096, 8}}, [](const std::vector<Tensor>& in) {
    return std::vector<Tensor>{call("MatMul", {in[0], parameter({8, 8}, "w")})};
  });
  search_strategies(wide, {.step_parallel = {.device_num = 4}});
  const ir::Node& a = wide.nodes.back();
  EXPECT_EQ(a.strategy, (ir::Strategy{{4, 1}, {1, 1}}));
  // (4, 4096) x (4096, 4096), fed replicated: a weight of 64 MiB whose gradient data parallel
  // would all-reduce; splitting it is cheaper.
  ir::Graph deep = trace({{4, 4096}}, [](const std::vector<Tensor>& in) {
    return std::vector<Tensor>{call("MatMul", {in[0], parameter({4096, 4096}, "w")})};
  });
  search_strategies(deep,
                    {.step_parallel = {.device_num = 4, .dataset = DatasetSplit::kFullBatch}});
  const ir::Strategy& s = deep.nodes.back().strategy;
  EXPECT_EQ(s[1][0] * s[1][1], 4) << ir::strategy_to_string(s);
}

// NOTE [Search objectives]: on the same network, each level's plan is the best of the three by
// its own measure (time, bytes held, communication), costed by the same plan estimate.
TEST(Search, EachObjectivesPlanIsTheBestByItsOwnMeasure) {
  // (256, 512) x (512, 1024) -> ReLU -> x (1024, 512): large weights and a large batch, where
  // time, memory and communication pull apart.
  const ir::Graph net = trace({{256, 512}}, [](const std::vector<Tensor>& in) {
    const Tensor h = call("ReLU", {call("MatMul", {in[0], parameter({512, 1024}, "w1")})});
    return std::vector<Tensor>{call("MatMul", {h, parameter({1024, 512}, "w2")})};
  });
  const ConstantCostModel model;
  struct Measured {
    double time, bytes, comm;
  };
  std::vector<Measured> got;
  std::vector<std::string> plans;
  for (SearchObjective objective : {SearchObjective::kComputationOverCommunication,
                                    SearchObjective::kMemory, SearchObjective::kSpeed}) {
    ir::Graph g = net;
    search_strategies(
        g, {.step_parallel = {.device_num = 8}, .cost_model = &model, .objective = objective});
    EstimateOptions eo;
    eo.search = {.step_parallel = {.device_num = 8}, .cost_model = &model};
    const PlanEstimate e = estimate_plan(g, eo);
    got.push_back({e.cost, e.memory_bytes(), e.communication_s});
    std::string plan;
    for (const ir::Node& n : g.nodes) {
      if (n.is_op()) plan += ir::strategy_to_string(n.strategy) + " ";
    }
    plans.push_back(plan);
  }
  const Measured &ratio = got[0], &memory = got[1], &speed = got[2];
  EXPECT_LE(speed.time, memory.time * (1 + 1e-12));
  EXPECT_LE(speed.time, ratio.time * (1 + 1e-12));
  EXPECT_LE(memory.bytes, speed.bytes);
  EXPECT_LE(memory.bytes, ratio.bytes);
  EXPECT_LE(ratio.comm, speed.comm * (1 + 1e-12));
  EXPECT_LE(ratio.comm, memory.comm * (1 + 1e-12));
  // They do pull apart here: not every level picks the same plan.
  EXPECT_TRUE(plans[0] != plans[2] || plans[1] != plans[2]) << "every objective chose " << plans[2];
  std::printf(
      "level 0 (computation / communication): %s\nlevel 1 (memory): %s\nlevel 2 (speed): "
      "%s\n",
      plans[0].c_str(), plans[1].c_str(), plans[2].c_str());
  SearchOptions bad{.step_parallel = {.device_num = 8}};
  bad.objective = static_cast<SearchObjective>(3);
  ir::Graph g = net;
  EXPECT_ERROR(search_strategies(g, bad), "objective (level) is 3");
}

TEST(Search, AnOpWithoutASharingRuleIsNamed) {
  static ir::OpDef no_rule = [] {
    ir::OpDef op;
    op.name = "MyOp";
    return op;
  }();
  ir::Graph g;
  ir::Node in{.kind = ir::NodeKind::kInput, .outputs = {{Shape{8, 4}, DType::kFloat32}}};
  in.name = "x";
  g.nodes.push_back(in);
  g.inputs.push_back(0);
  ir::Node op{.kind = ir::NodeKind::kOp,
              .op = &no_rule,
              .inputs = {{0, 0}},
              .outputs = {{Shape{8, 4}, DType::kFloat32}}};
  op.name = "mine";
  g.nodes.push_back(op);
  EXPECT_ERROR(build_cost_graph(g, {.step_parallel = {.device_num = 2}}), "MyOp 'mine'",
               "no sharding rule");
}

TEST(Search, AnInfeasibleMemoryCapacityNamesTheLeastAnyPlanNeeds) {
  ir::Graph net = seed_net();
  SearchOptions o{.step_parallel = {.device_num = 8}, .memory_capacity_bytes = 64};
  EXPECT_ERROR(search_strategies(net, o), "no plan fits the memory capacity of 64 bytes",
               "the smallest memory any plan needs is");
  // A capacity the least plan fits: a plan within it.
  CostGraph g = build_cost_graph(net, o);
  g.memory_capacity_bytes = 0;
  const double free_memory = solve_dynamic_programming(g).memory_bytes;
  o.memory_capacity_bytes = free_memory - 1;
  const SearchReport r = search_strategies(net, o);
  EXPECT_LT(r.result.memory_bytes, free_memory);
  EXPECT_GE(r.result.cost, solve_dynamic_programming(g).cost);
}

TEST(Search, BadOptionsAreErrors) {
  const ir::Graph net = seed_net();
  EXPECT_ERROR(build_cost_graph(net, {.step_parallel = {.device_num = 8}, .beta = -1}),
               "beta is -1");
  EXPECT_ERROR(build_cost_graph(net, {.step_parallel = {.device_num = 0}}), "device_num is 0");
  EXPECT_ERROR(
      build_cost_graph(net, {.step_parallel = {.device_num = 8}, .memory_capacity_bytes = -5}),
      "memory_capacity_bytes is -5");
}

}  // namespace
}  // namespace cleave::parallel

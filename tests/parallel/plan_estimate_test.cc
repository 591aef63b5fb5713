// The estimate of a plan and the runner-up plans (NOTE [Plan estimate] in
// cleave/parallel/plan_estimate.h): the estimate of the searched plan is the cost the search
// minimised, the first runner-up is the second-best plan of exhaustive enumeration, only
// parameters with a gradient pay its reduction, and exposed communication follows the schedule.
#include "cleave/parallel/plan_estimate.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <map>
#include <optional>
#include <random>
#include <set>

#include "cleave/cleave.h"

namespace cleave::parallel {
namespace {

using Body = std::function<Tensor(const Tensor&)>;

ir::Graph trace(const Shape& input, const Body& body) {
  ir::Graph g;
  g.name = "net";
  ir::Tracer tracer(g);
  const Tensor x = tracer.add_input({input, DType::kFloat32}, "x");
  g.outputs.push_back(tracer.value_of(body(x)));
  return g;
}

Tensor parameter(const Shape& shape, const std::string& name, bool trainable = true) {
  return ir::Tracer::current()->add_parameter(Tensor::ones(shape).set_requires_grad(trainable),
                                              name);
}

Tensor call(const char* op, std::vector<Tensor> in) {
  return ir::Primitive(op).call1(std::move(in));
}

// x (batch, 8) -> MatMul w1 (8, 16) -> ReLU -> MatMul w2 (16, 16) -> Add (a diamond with the
// ReLU) -> MatMul w2 again (a shared weight) -> ReduceSum to a scalar.
ir::Graph network(int64_t batch) {
  return trace({batch, 8}, [](const Tensor& x) {
    const Tensor w1 = parameter({8, 16}, "w1"), w2 = parameter({16, 16}, "w2");
    const Tensor h = call("ReLU", {call("MatMul", {x, w1})});
    const Tensor d = call("Add", {h, call("MatMul", {h, w2})});
    return ops::reduce_sum(call("MatMul", {d, w2}), {.axes = {0, 1}});
  });
}

TEST(PlanEstimate, TheSearchedPlansEstimateIsTheCostTheSearchMinimised) {
  const ConstantCostModel model;
  for (int64_t devices : {1, 2, 4, 6, 8}) {
    for (bool training : {true, false}) {
      for (double beta : {1.0, 0.25}) {
        SCOPED_TRACE(fmt::format("{} devices, training {}, beta {}", devices, training, beta));
        ir::Graph g = network(24);
        EstimateOptions o;
        o.search = {.cost_model = &model, .beta = beta, .training = training};
        o.search.step_parallel.device_num = devices;
        const CostGraph cg = build_cost_graph(g, o.search);
        const SearchResult best = solve_dynamic_programming(cg, o.search);
        apply_choice(g, cg, best.choice);
        const PlanEstimate e = estimate_plan(g, o);
        EXPECT_NEAR(e.cost, best.cost, 1e-9 * best.cost);
        EXPECT_NEAR(e.activation_bytes, best.memory_bytes, 1e-6);
        EXPECT_EQ(e.ops.size(), 6u);
        EXPECT_EQ(e.parameters.size(), 2u);
        // Its parts add up.
        double ops_cost = 0;
        for (const OpEstimate& op : e.ops) ops_cost += op.cost;
        double gradients = 0, updates = 0;  // NOTE [Optimizer updates in the cost]
        for (const ParameterEstimate& p : e.parameters) {
          gradients += p.gradient_s;
          updates += p.update_s;
          if (training) EXPECT_GT(p.update_s, 0) << p.name;
        }
        EXPECT_NEAR(e.cost, ops_cost + beta * gradients + updates, 1e-9 * e.cost);
        EXPECT_NEAR(e.gradient_s, gradients, 1e-15);
        if (!training) {
          EXPECT_EQ(e.gradient_s, 0);
          EXPECT_EQ(updates, 0);
        }
      }
    }
  }
}

// A random cost graph of `n` nodes (2 to 4 candidates each, a tree plus one extra edge).
CostGraph random_cost_graph(std::mt19937& rng, int n) {
  std::uniform_real_distribution<double> cost(0, 10), memory(0, 5);
  CostGraph g;
  for (int i = 0; i < n; ++i) {
    CostNode node;
    node.name = fmt::format("op{}", i);
    const int candidates = 2 + static_cast<int>(rng() % 3);
    for (int c = 0; c < candidates; ++c) {
      node.cost.push_back(cost(rng));
      node.memory_bytes.push_back(memory(rng));
      node.labels.push_back(fmt::format("s{}", c));
    }
    g.nodes.push_back(std::move(node));
  }
  const auto add_edge = [&](int a, int b) {
    CostEdge e{a, b, {}};
    const int64_t cells = g.nodes[static_cast<size_t>(a)].num_candidates() *
                          g.nodes[static_cast<size_t>(b)].num_candidates();
    for (int64_t k = 0; k < cells; ++k) e.cost.push_back(cost(rng));
    g.edges.push_back(std::move(e));
  };
  for (int i = 1; i < n; ++i) add_edge(static_cast<int>(rng() % static_cast<unsigned>(i)), i);
  if (n >= 3) add_edge(0, n - 1);
  return g;
}

TEST(PlanEstimate, TheFirstRunnerUpIsTheSecondBestPlan) {
  std::mt19937 rng(7);
  int checked = 0;
  for (int trial = 0; trial < 300; ++trial) {
    const int n = 2 + trial % 5;
    CostGraph g = random_cost_graph(rng, n);
    if (trial % 3 == 0) g.memory_capacity_bytes = 2.0 * n;  // some plans do not fit
    // Every plan's cost, by enumeration.
    std::vector<double> costs;
    std::vector<int> choice(g.nodes.size(), 0);
    for (;;) {
      if (g.memory_capacity_bytes == 0 || g.memory(choice) <= g.memory_capacity_bytes) {
        costs.push_back(g.cost(choice));
      }
      size_t i = 0;
      for (; i < choice.size(); ++i) {
        if (++choice[i] < g.nodes[i].num_candidates()) break;
        choice[i] = 0;
      }
      if (i == choice.size()) break;
    }
    if (costs.size() < 2) continue;
    std::sort(costs.begin(), costs.end());
    const SearchResult best = solve_dynamic_programming(g);
    ASSERT_NEAR(best.cost, costs[0], 1e-9);
    const std::vector<RunnerUp> ups = runner_up_plans(g, best, {}, 3, 100);
    ASSERT_FALSE(ups.empty()) << "trial " << trial;
    EXPECT_NEAR(ups[0].result.cost, costs[1], 1e-9) << "trial " << trial;
    EXPECT_NE(ups[0].result.choice, best.choice);
    // Cheapest first, all different, each a real plan of `g` with the cost it claims.
    for (size_t k = 0; k < ups.size(); ++k) {
      EXPECT_NEAR(g.cost(ups[k].result.choice), ups[k].result.cost, 1e-9);
      if (k > 0) EXPECT_LE(ups[k - 1].result.cost, ups[k].result.cost);
      for (size_t j = 0; j < k; ++j) EXPECT_NE(ups[j].result.choice, ups[k].result.choice);
      EXPECT_NE(ups[k].from, ups[k].to);
    }
    ++checked;
  }
  EXPECT_GT(checked, 200);
}

TEST(PlanEstimate, OnlyParametersWithAGradientPayItsReduction) {
  // Two replicated weights of the same shape, read by data-parallel ops: one trainable, one not
  // (as BatchNorm's moving statistics).
  ir::Graph g = trace({8, 4}, [](const Tensor& x) {
    const Tensor w = parameter({4, 4}, "w"), frozen = parameter({4, 4}, "frozen", false);
    return ops::reduce_sum(call("MatMul", {call("MatMul", {x, w}), frozen}), {.axes = {0, 1}});
  });
  const ConstantCostModel model;
  EstimateOptions o;
  o.search = {.cost_model = &model};
  o.search.step_parallel.device_num = 4;
  const PlanEstimate e = estimate_plan(g, o);  // the default strategies: data parallel
  ASSERT_EQ(e.parameters.size(), 2u);
  EXPECT_TRUE(e.parameters[0].trainable);
  EXPECT_FALSE(e.parameters[1].trainable);
  EXPECT_EQ(e.parameters[0].replicas, 4);
  EXPECT_GT(e.parameters[0].gradient_s, 0);
  EXPECT_EQ(e.parameters[1].gradient_s, 0);
  EXPECT_DOUBLE_EQ(e.gradient_bytes, 64);
  EXPECT_DOUBLE_EQ(e.parameter_bytes, 128);
  EXPECT_DOUBLE_EQ(e.optimizer_state_bytes, 64);  // Momentum: one slice per trainable one
  // The search agrees: only the trainable weight's node has a cost.
  const CostGraph cg = build_cost_graph(g, o.search);
  int charged = 0;
  for (const CostNode& n : cg.nodes) {
    if (n.kind != CostNode::Kind::kParameter) continue;
    for (double c : n.cost) charged += c > 0 ? 1 : 0;
  }
  EXPECT_GT(charged, 0);
  for (const CostNode& n : cg.nodes) {
    if (n.kind == CostNode::Kind::kParameter && n.name.find("frozen") != std::string::npos) {
      for (double c : n.cost) EXPECT_EQ(c, 0) << n.name;
    }
  }
}

TEST(PlanEstimate, GradientReductionsHideBehindTheBackwardWhereTheScheduleLetsThem) {
  ir::Graph g = network(32);
  const ConstantCostModel model;
  EstimateOptions o;
  o.search = {.cost_model = &model};
  o.search.step_parallel.device_num = 4;
  o.overlap_gradients = false;
  const PlanEstimate sharded = estimate_plan(g, o);
  ASSERT_GT(sharded.gradient_s, 0);
  EXPECT_DOUBLE_EQ(sharded.exposed_communication_s, sharded.communication_s);
  o.overlap_gradients = true;
  const PlanEstimate overlapped = estimate_plan(g, o);
  double backward = 0;  // NOTE [Backward of an op]: each op's (c - 1) times its forward
  for (const OpEstimate& op : overlapped.ops) backward += (op.compute_factor - 1) * op.compute_s;
  const double hidden = std::min(overlapped.gradient_s, backward);
  EXPECT_NEAR(overlapped.exposed_communication_s, overlapped.communication_s - hidden, 1e-15);
  EXPECT_LT(overlapped.predicted_step_s(), sharded.predicted_step_s());
  EXPECT_DOUBLE_EQ(overlapped.cost, sharded.cost);  // the search's objective does not change
}

// NOTE [Backward of an op] in src/parallel/search/candidates.h: a product costs 1 plus one per
// operand needing a gradient, another op 3 when any input needs one, an op of the data and of
// frozen parameters 1, an op without a gradient rule (Equal) and what reads only its output 1,
// and every op 1 in an evaluation step; the step's computation is their sum.
TEST(PlanEstimate, EachOpCostsItsForwardAndTheGradientsItsInputsNeed) {
  ir::Graph g = trace({4, 8}, [](const Tensor& x) {
    const Tensor w1 = parameter({8, 16}, "w1"), w2 = parameter({16, 16}, "w2");
    const Tensor frozen = parameter({8, 16}, "frozen", /*trainable=*/false);
    const Tensor frozen2 = parameter({16, 16}, "frozen2", /*trainable=*/false);
    const Tensor data_only = call("ReLU", {call("MatMul", {x, frozen})});  // no backward at all
    const Tensor h = call("ReLU", {call("MatMul", {x, w1})});  // dW1 only: the data needs none
    const Tensor both = call("MatMul", {h, w2});               // dH and dW2
    const Tensor one = call("MatMul", {h, frozen2});           // dH only
    const Tensor mask = call("Equal", {both, one});            // no gradient rule: no backward
    const Tensor sum = call("Add", {call("Add", {both, one}), data_only});
    return ops::reduce_sum(call("Mul", {sum, ops::cast(mask, DType::kFloat32)}), {.axes = {0, 1}});
  });
  const ConstantCostModel model;
  EstimateOptions o;
  o.search = {.cost_model = &model};
  o.search.step_parallel.device_num = 1;
  std::vector<std::pair<std::string, double>> factors;
  const PlanEstimate e = estimate_plan(g, o);
  double step = 0;
  for (const OpEstimate& op : e.ops) {
    factors.emplace_back(op.op, op.compute_factor);
    step += op.compute_factor * op.compute_s;
  }
  const std::vector<std::pair<std::string, double>> want = {
      {"MatMul", 1}, {"ReLU", 1}, {"MatMul", 2}, {"ReLU", 3}, {"MatMul", 3}, {"MatMul", 2},
      {"Equal", 1},  {"Add", 3},  {"Add", 3},    {"Cast", 1}, {"Mul", 3},    {"ReduceSum", 3}};
  EXPECT_EQ(factors, want);
  double updates = 0;
  for (const ParameterEstimate& p : e.parameters) updates += p.update_s;
  EXPECT_NEAR(e.compute_s, step + updates, 1e-15);
  o.search.training = false;
  for (const OpEstimate& op : estimate_plan(g, o).ops) EXPECT_EQ(op.compute_factor, 1) << op.name;
}

// A constant model that also holds timed op slices (NOTE [Measured op slices]).
class TimedModel : public ConstantCostModel {
 public:
  std::map<std::string, double> times;
  std::optional<double> measured_s(const std::string& key) const override {
    const auto it = times.find(key);
    return it == times.end() ? std::nullopt : std::optional<double>(it->second);
  }
  bool has_measured_ops() const override { return !times.empty(); }
};

// The key of the first MatMul's slice under `strategy` in the network's graph g.
std::string first_matmul_key(const std::vector<OpSlice>& slices, const std::string& strategy) {
  for (const OpSlice& s : slices) {
    if (s.example.starts_with("matmul ") && s.example.ends_with(strategy)) return s.key;
  }
  return "";
}

TEST(MeasuredOpSlices, EveryProductSliceIsListedOnceWithTheGradientsItsInputsNeed) {
  const ir::Graph g = network(24);
  SearchOptions o;
  o.step_parallel.device_num = 2;
  const std::vector<OpSlice> slices = op_slices(g, o);
  std::set<std::string> keys;
  for (const OpSlice& s : slices) {
    EXPECT_TRUE(keys.insert(s.key).second) << s.key;
    EXPECT_EQ(s.op->name, "MatMul") << s.key;  // ReLU, Add, ReduceSum: memory-bound, not timed
    EXPECT_EQ(s.key, op_slice_key(*s.op, s.attrs, s.inputs, s.grads));
    // The first product reads the data: only its weight (input 1) gets a gradient.
    EXPECT_EQ(s.grads, s.example.starts_with("matmul ") ? 0b10u : 0b11u) << s.key;
  }
  // x (24, 8) by w1 (8, 16): the batch split, the output columns split, the reduction split.
  const std::string batch = first_matmul_key(slices, "((2, 1), (1, 1))");
  EXPECT_NE(batch.find("(Float32(12, 8), Float32(8, 16)) grads 01"), std::string::npos) << batch;
  EXPECT_NE(first_matmul_key(slices, "((1, 1), (1, 2))"), "");
  EXPECT_NE(first_matmul_key(slices, "((1, 2), (2, 1))"), "");
  // An evaluation step's slices have no gradients; a given strategy gives its one slice.
  o.training = false;
  for (const OpSlice& s : op_slices(g, o)) EXPECT_EQ(s.grads, 0u) << s.key;
  ir::Graph given = g;
  for (ir::Node& n : given.nodes) {
    if (n.is_op() && n.op->name == "MatMul") n.strategy = {{2, 1}, {1, 1}};
  }
  o.training = true;
  // Three products, each of one slice; h by w2 and d by w2 compute the same one.
  EXPECT_EQ(op_slices(given, o).size(), 2u);
}

TEST(MeasuredOpSlices, ATimedSliceCostsItsTimingOnceAndTheSearchesAvoidAnExpensiveOne) {
  SearchOptions o;
  o.step_parallel.device_num = 2;
  const std::string batch = first_matmul_key(op_slices(network(24), o), "((2, 1), (1, 1))");
  ASSERT_NE(batch, "");
  TimedModel model;
  model.times[batch] = 3e-4;
  EstimateOptions eo;
  eo.search = o;
  eo.search.cost_model = &model;
  ir::Graph g = network(24);  // every op its default strategy: the first product's batch split
  const PlanEstimate e = estimate_plan(g, eo);
  ASSERT_EQ(e.ops.at(0).op, "MatMul");
  EXPECT_TRUE(e.ops[0].measured);
  EXPECT_EQ(e.ops[0].compute_factor, 1);
  EXPECT_EQ(e.ops[0].compute_s, 3e-4);
  for (size_t k = 1; k < e.ops.size(); ++k) EXPECT_FALSE(e.ops[k].measured) << e.ops[k].name;

  // Timed far above its flops, the batch split loses to another strategy in both searches; the
  // dynamic programming's cost is still the estimate of its plan.
  model.times[batch] = 1.0;
  for (const bool recursive : {false, true}) {
    SCOPED_TRACE(recursive ? "recursive programming" : "dynamic programming");
    ir::Graph searched = network(24);
    if (recursive) {
      search_strategies_recursive(searched, eo.search);
    } else {
      const SearchReport r = search_strategies(searched, eo.search);
      EXPECT_NEAR(estimate_plan(searched, eo).cost, r.result.cost, 1e-9 * r.result.cost);
    }
    const PlanEstimate chosen = estimate_plan(searched, eo);
    EXPECT_NE(chosen.ops.at(0).strategy, "((2, 1), (1, 1))");
    EXPECT_LT(chosen.cost, 0.5);
  }
}

TEST(PlanEstimate, NamesOpsByTheirCellPath) {
  ir::Node n;
  n.name = "conv2.conv2d";
  n.scope =
      "Default/network-WithLossCell/_backbone-ResNet/layer1-SequentialCell/0-ResidualBlock/"
      "conv2-Conv2d";
  EXPECT_EQ(path_name(n), "_backbone.layer1.0.conv2.conv2d");
  n.scope = "Default";
  n.name = "matmul";
  EXPECT_EQ(path_name(n), "matmul");
}

TEST(PlanEstimate, BadArgumentsAreErrors) {
  ir::Graph g = network(8);
  EstimateOptions o;
  o.search.step_parallel.device_num = 2;
  o.search.beta = -1;
  EXPECT_THROW(estimate_plan(g, o), Error);
  o.search.beta = 1;
  o.optimizer_state_per_parameter = -1;
  EXPECT_THROW(estimate_plan(g, o), Error);
  const CostGraph cg = build_cost_graph(g, {.step_parallel = {.device_num = 2}});
  EXPECT_THROW(apply_choice(g, cg, std::vector<int>{0}), Error);
  EXPECT_THROW(runner_up_plans(cg, SearchResult{}, {}), Error);
}

}  // namespace
}  // namespace cleave::parallel

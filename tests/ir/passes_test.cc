// The verifier (one test per error), DCE, CSE, constant folding, scopes, instance names and
// placement annotations.
#include <gtest/gtest.h>

#include <memory>

#include "cleave/cleave.h"
#include "testing/gradcheck.h"
#include "testing/models.h"

namespace cleave::ir {
namespace {

// x (2, 3) · w (3, 4) -> relu, w a parameter.
struct Small {
  Graph g;
  Tensor w = Tensor::ones({3, 4}).set_requires_grad(true);
  Small() {
    Tracer tracer(g);
    const Tensor x = tracer.add_input({Shape{2, 3}, DType::kFloat32}, "x");
    tracer.add_parameter(w, "w");
    g.outputs = {tracer.value_of(ops::relu(ops::matmul(x, w)))};
    tracer.finish();
  }
  int matmul() const { return 2; }
  int relu() const { return 3; }
};

TEST(Verify, AcceptsATracedGraph) {
  Small s;
  ASSERT_EQ(s.g.nodes[s.matmul()].op->name, "MatMul");
  ASSERT_EQ(s.g.nodes[s.relu()].op->name, "ReLU");
  verify(s.g);
}

TEST(ReorderNodes, MovesNodesAndRenumbersEveryReference) {
  Small s;
  // x, w, matmul, relu -> w, x, matmul, relu.
  reorder_nodes(s.g, {1, 0, 2, 3});
  verify(s.g);
  EXPECT_EQ(s.g.inputs, std::vector<int>{1});
  EXPECT_EQ(s.g.nodes[2].inputs[0].node, 1);
  EXPECT_EQ(s.g.nodes[2].inputs[1].node, 0);
  EXPECT_EQ(s.g.outputs[0].node, 3);
}

TEST(ReorderNodes, AnOrderThatIsNotTopologicalOrNotAPermutationIsNamedAndChangesNothing) {
  Small s;
  EXPECT_ERROR(reorder_nodes(s.g, {0, 1, 3, 2}), "%3 (ReLU 'relu') would come before its input",
               "%2 (MatMul 'matmul')");
  EXPECT_ERROR(reorder_nodes(s.g, {0, 1, 2, 2}), "entry 3 is %2, which is listed twice");
  EXPECT_ERROR(reorder_nodes(s.g, {0, 1, 2}), "the order has 3 entries; the graph has 4 nodes");
  EXPECT_ERROR(reorder_nodes(s.g, {0, 1, 2, 7}), "entry 3 is %7, which is not a node");
  verify(s.g);
  EXPECT_EQ(s.g.nodes[s.relu()].op->name, "ReLU");
}

TEST(Verify, DanglingNodeIsNamed) {
  Small s;
  s.g.nodes[s.relu()].inputs[0] = {99, 0};
  EXPECT_ERROR(verify(s.g), "%3 (ReLU 'relu')", "input 0 refers to node %99",
               "does not exist (a dangling value");
}

TEST(Verify, DanglingOutputIndexIsNamed) {
  Small s;
  s.g.nodes[s.relu()].inputs[0] = {s.matmul(), 2};
  EXPECT_ERROR(verify(s.g), "%3 (ReLU 'relu')", "refers to output 2 of %2 (MatMul 'matmul')",
               "has 1 output(s)");
}

TEST(Verify, CycleIsNamed) {
  Small s;
  s.g.nodes[s.matmul()].inputs[0] = {s.relu(), 0};
  EXPECT_ERROR(verify(s.g), "%2 (MatMul 'matmul') input 0 refers to %3 (ReLU 'relu')",
               "does not come before it", "cycle");
}

TEST(Verify, ShapeInconsistentWithInferIsNamed) {
  Small s;
  s.g.nodes[s.relu()].outputs[0].shape = Shape{2, 5};
  EXPECT_ERROR(verify(s.g), "%3 (ReLU 'relu') records outputs (Float32 (2, 5))",
               "give (Float32 (2, 4))");
}

TEST(Verify, DTypeInconsistentWithInferIsNamed) {
  Small s;
  s.g.nodes[s.relu()].outputs[0].dtype = DType::kFloat64;
  EXPECT_ERROR(verify(s.g), "%3 (ReLU 'relu') records outputs (Float64 (2, 4))",
               "give (Float32 (2, 4))");
}

TEST(Verify, OpThatNoLongerTypeChecksIsNamed) {
  Small s;
  s.g.nodes[0].outputs[0].shape = Shape{2, 5};  // the input x
  EXPECT_ERROR(verify(s.g), "%2 (MatMul 'matmul') does not type-check", "MatMul");
}

TEST(Verify, ParameterThatDoesNotMatchItsTensorIsNamed) {
  Small s;
  s.g.nodes[1].outputs[0].shape = Shape{3, 5};
  EXPECT_ERROR(verify(s.g), "%para2_w is recorded as (Float32 (3, 5))",
               "bound tensor is (Float32 (3, 4))");
}

TEST(Verify, DanglingGraphOutputIsNamed) {
  Small s;
  s.g.outputs = {{42, 0}};
  EXPECT_ERROR(verify(s.g), "output 0 refers to node %42", "dangling");
}

TEST(Verify, GraphInputThatIsNotAnInputNodeIsNamed) {
  Small s;
  s.g.inputs = {s.relu()};
  EXPECT_ERROR(verify(s.g), "graph input %3 is not an input node");
}

TEST(Verify, WrongArityIsNamed) {
  Small s;
  s.g.nodes[s.relu()].inputs.push_back({0, 0});
  EXPECT_ERROR(verify(s.g), "%3 (ReLU 'relu') has 2 inputs", "ReLU takes 1");
}

TEST(DeadCode, RemovesUnusedOpsAndKeepsSideEffects) {
  Graph g;
  Tensor p = Tensor::ones({4}).set_requires_grad(true);
  Tensor accum = Tensor::zeros({4});
  {
    Tracer tracer(g);
    const Tensor x = tracer.add_input({Shape{4}, DType::kFloat32}, "x");
    tracer.add_parameter(p, "p");
    ops::neg(x);  // unused
    const Tensor y = ops::relu(x);
    call(Registry::global().get("ApplyMomentum"), {p, accum, ops::exp(x)},
         {{"lr", 0.5}, {"momentum", 0.0}, {"use_nesterov", false}});
    g.outputs = {tracer.value_of(y)};
    tracer.finish();
  }
  EXPECT_EQ(g.num_ops(), 4);
  EXPECT_EQ(dead_code_elimination(g), 1);
  EXPECT_EQ(g.num_ops(), 3);
  verify(g);
  runtime::Executor exec(std::move(g));
  const Tensor y = exec.run({Tensor::full({4}, -2.0)})[0];
  EXPECT_EQ(y.to_double_vector(), std::vector<double>(4, 0.0));
  // The update ran on the real parameter: p -= 0.5 * exp(-2).
  EXPECT_NEAR(p.at({0}), 1.0 - 0.5 * std::exp(-2.0), 1e-6);
}

TEST(CommonSubexpression, MergesEqualOpsButNotAcrossSideEffects) {
  Graph g;
  Tensor p = Tensor::ones({3}).set_requires_grad(true);
  Tensor accum = Tensor::zeros({3});
  {
    Tracer tracer(g);
    const Tensor x = tracer.add_input({Shape{3}, DType::kFloat32}, "x");
    tracer.add_parameter(p, "p");
    const Tensor a = ops::add(ops::neg(x), ops::neg(x));  // merged
    const Tensor before = ops::neg(p);
    call(Registry::global().get("ApplyMomentum"), {p, accum, x},
         {{"lr", 1.0}, {"momentum", 0.0}, {"use_nesterov", false}});
    const Tensor after = ops::neg(p);  // p changed: not the same value as `before`
    g.outputs = {tracer.value_of(a), tracer.value_of(before), tracer.value_of(after)};
    tracer.finish();
  }
  EXPECT_EQ(common_subexpression_elimination(g), 1);
  verify(g);
  runtime::Executor exec(std::move(g));
  const std::vector<Tensor> out = exec.run({Tensor::full({3}, 2.0)});
  EXPECT_EQ(out[0].to_double_vector(), std::vector<double>(3, -4.0));
  EXPECT_EQ(out[1].to_double_vector(), std::vector<double>(3, -1.0));
  EXPECT_EQ(out[2].to_double_vector(), std::vector<double>(3, 1.0));  // -(1 - 2)
}

TEST(ConstantFolding, FoldsLiteralsButNotCapturedTensors) {
  Graph g;
  const Tensor captured = Tensor::full({2}, 3.0);  // still referenced here: may change
  {
    Tracer tracer(g);
    const Tensor x = tracer.add_input({Shape{2}, DType::kFloat32}, "x");
    const Tensor two = ops::add(Tensor::ones({2}), Tensor::ones({2}));  // literals: folded
    const Tensor scaled = ops::mul(ops::neg(captured), two);            // captured: kept
    g.outputs = {tracer.value_of(ops::add(x, scaled))};
  }
  // Literal marking happens once the tracing code dropped its tensors.
  {
    Tracer tracer(g);
    tracer.finish();
  }
  EXPECT_EQ(constant_folding(g), 1);
  EXPECT_EQ(g.num_ops(), 3);  // Neg, Mul, Add
  verify(g);
  runtime::Executor exec(std::move(g));
  EXPECT_EQ(exec.run({Tensor::ones({2})})[0].to_double_vector(), std::vector<double>(2, -5.0));
  captured.fill(1.0);
  EXPECT_EQ(exec.run({Tensor::ones({2})})[0].to_double_vector(), std::vector<double>(2, -1.0));
}

TEST(Scopes, LeNetOpsGetScopesAndUniqueInstanceNames) {
  set_seed(1);
  auto net = std::make_shared<testing::LeNet5>();
  nn::WithLossCell with_loss(net, std::make_shared<nn::CrossEntropyLoss>());
  Graph g;
  {
    Tracer tracer(g);
    const Tensor x = tracer.add_input({Shape{2, 1, 32, 32}, DType::kFloat32}, "data");
    const Tensor y = tracer.add_input({Shape{2}, DType::kInt32}, "label");
    g.outputs = {tracer.value_of(with_loss(x, y))};
  }
  std::vector<std::string> relus;
  bool saw_fc1 = false;
  for (const Node& n : g.nodes) {
    if (!n.is_op()) continue;
    if (n.op->name == "ReLU") {
      relus.push_back(n.name);
      EXPECT_EQ(n.scope, "Default/network-WithLossCell/_backbone-LeNet5/relu-ReLU");
    }
    if (n.name == "fc1.matmul") {
      saw_fc1 = true;
      EXPECT_EQ(n.scope, "Default/network-WithLossCell/_backbone-LeNet5/fc1-Dense");
    }
  }
  EXPECT_TRUE(saw_fc1);
  EXPECT_EQ(relus,
            (std::vector<std::string>{"relu.relu", "relu.relu_1", "relu.relu_2", "relu.relu_3"}));
}

TEST(Placement, CellPlacementAppliesInsideAndAnOpsOwnTakesPrecedence) {
  set_seed(1);
  testing::Mlp net;
  net.fc2->place("MS_WORKER", 1);
  Graph g;
  {
    Tracer tracer(g);
    const Tensor x = tracer.add_input({Shape{2, 784}, DType::kFloat32}, "x");
    Tensor h = net(x);
    AnnotationGuard op_level({"server", 0}, {{2, 1}, {1, 1}});
    h = ops::matmul(h, Tensor::ones({10, 3}));
    g.outputs = {tracer.value_of(h)};
  }
  int placed = 0;
  for (const Node& n : g.nodes) {
    if (!n.is_op()) continue;
    if (n.scope.find("fc2-Dense") != std::string::npos) {
      EXPECT_EQ(n.placement, (Placement{"MS_WORKER", 1})) << n.name;
      ++placed;
    } else if (n.strategy.empty()) {
      EXPECT_TRUE(n.placement.empty()) << n.name;
    } else {
      EXPECT_EQ(n.placement, (Placement{"server", 0}));
    }
  }
  EXPECT_EQ(placed, 2);  // MatMul and BiasAdd
  const std::string text = dump_text(g);
  EXPECT_NE(text.find("{placement: (role: MS_WORKER, rank: 1)}"), std::string::npos);
  EXPECT_NE(text.find("{in_strategy: ((2, 1), (1, 1))} {placement: (role: server, rank: 0)}"),
            std::string::npos);
  EXPECT_ERROR(net.place("MS_WORKER", -1),
               "Mlp: place: rank_id is -1; expected a worker rank in [0, MS_WORKER_NUM)");
  EXPECT_ERROR(net.place("MS_SCHED", 0),
               "Mlp: place: role is 'MS_SCHED'; only workers run graph ops");
}

TEST(Tracing, TracedTensorsCannotBeUsedInAnotherTraceOrViewed) {
  Graph first, second;
  Tensor kept;
  {
    Tracer tracer(first);
    kept = ops::neg(tracer.add_input({Shape{2}, DType::kFloat32}, "x"));
    EXPECT_ERROR(kept.view({1, 2}), "traced (GRAPH_MODE)", "use ops::reshape");
    EXPECT_ERROR(Tracer nested(second), "already being traced");
  }
  Tracer tracer(second);
  EXPECT_ERROR(ops::relu(kept), "from another graph", "valid only inside their own trace");
}

// Seed 003's net: x·w1 -> relu -> ·w2 with a sharded first MatMul.
class ShardedNet : public nn::Cell {
 public:
  ShardedNet() : Cell("Net") {
    w1 = register_parameter("w", Tensor::ones({32, 16}));
    w2 = register_parameter("w2", Tensor::ones({16, 16}));
    matmul.shard({{2, 4}, {4, 1}});
    matmul2.place("MS_WORKER", 3);
  }
  Tensor construct(const Tensor& x) override {
    return matmul2.call1({ops::relu(matmul.call1({x, w1})), w2});
  }
  Tensor w1, w2;
  Primitive matmul{"MatMul", {{"transpose_a", false}, {"transpose_b", false}}};
  Primitive matmul2{"MatMul", {{"transpose_a", false}, {"transpose_b", false}}};
};

TEST(Primitive, ShardAndPlaceAreRecordedAndPrinted) {
  ShardedNet net;
  net.place("MS_WORKER", 1);
  Graph g;
  {
    Tracer tracer(g);
    const Tensor x = tracer.add_input({Shape{16, 32}, DType::kFloat32}, "x");
    g.outputs = {tracer.value_of(net(x))};
  }
  std::vector<const Node*> matmuls;
  for (const Node& n : g.nodes) {
    if (n.is_op() && n.op->name == "MatMul") matmuls.push_back(&n);
  }
  ASSERT_EQ(matmuls.size(), 2u);
  EXPECT_EQ(matmuls[0]->strategy, (Strategy{{2, 4}, {4, 1}}));
  EXPECT_EQ(matmuls[0]->placement, (Placement{"MS_WORKER", 1}));  // the cell's
  EXPECT_TRUE(matmuls[1]->strategy.empty());
  EXPECT_EQ(matmuls[1]->placement, (Placement{"MS_WORKER", 3}));  // its own wins
  const std::string text = dump_text(g);
  EXPECT_NE(text.find("= MatMul(%para1_x, %para2_param0) {instance name: network.matmul} "
                      "primitive_attrs: {transpose_a: false, transpose_b: false} {in_strategy: "
                      "((2, 4), (4, 1))}"),
            std::string::npos)
      << text;
  // Eagerly the settings have no effect.
  EXPECT_EQ(net(Tensor::ones({16, 32})).at({0, 0}), 32.0 * 16.0);
}

TEST(Strategy, TextFormIsTheOneOfTheDumps) {
  EXPECT_EQ(strategy_to_string({{2, 4}, {4, 1}}), "((2, 4), (4, 1))");
  EXPECT_EQ(strategy_to_string({{8}}), "((8))");
  EXPECT_EQ(strategy_to_string({{}, {1}}), "((), (1))");
  EXPECT_EQ(strategy_to_string({}), "()");
}

TEST(Primitive, BadStrategiesAreRejectedWithTheOpAndStrategy) {
  Primitive matmul("MatMul", {{"transpose_a", false}, {"transpose_b", false}});
  EXPECT_ERROR(matmul.shard({{2, 4}}), "MatMul: strategy ((2, 4)) has 1 entry",
               "one per input (2)");
  EXPECT_ERROR(matmul.shard({{2, 0}, {1, 1}}), "splits input 0 into 0 slices");
  EXPECT_ERROR(matmul.place("MS_WORKER", -2), "MatMul: place: rank_id is -2");
  EXPECT_ERROR(matmul.place("w", 0), "MatMul: place: role is 'w'; only workers run graph ops");
  EXPECT_ERROR(Primitive("NoSuchOp"), "NoSuchOp");
  matmul.shard({{2, 4, 1}, {4, 1}});
  Graph g;
  Tracer tracer(g);
  const Tensor x = tracer.add_input({Shape{16, 32}, DType::kFloat32}, "x");
  EXPECT_ERROR(matmul.call1({x, Tensor::ones({32, 16})}),
               "strategy ((2, 4, 1), (4, 1)) gives input 0 3 splits", "(16, 32) (rank 2)");
}

}  // namespace
}  // namespace cleave::ir

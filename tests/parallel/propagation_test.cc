// Sharding propagation (NOTE [Sharding propagation]) and strategy files (NOTE [Strategy file]),
// planned without processes; AUTO_PARALLEL training on thread ranks against one device.
#include "cleave/parallel/propagation.h"

#include <fmt/ranges.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>

#include "cleave/cleave.h"
#include "cleave/core/random.h"
#include "cleave/parallel/strategy_file.h"
#include "cleave/runtime/sharded_parameters.h"
#include "testing/gradcheck.h"
#include "testing/ranks.h"

namespace cleave::parallel {
namespace {

using ir::Strategy;

// Traces `body` on inputs of `shapes` (Float32) into a graph named `name`.
ir::Graph trace(const std::vector<Shape>& shapes,
                const std::function<std::vector<Tensor>(const std::vector<Tensor>&)>& body,
                const std::string& name = "net") {
  ir::Graph g;
  g.name = name;
  ir::Tracer tracer(g);
  std::vector<Tensor> inputs;
  for (size_t k = 0; k < shapes.size(); ++k) {
    inputs.push_back(tracer.add_input({shapes[k], DType::kFloat32}, fmt::format("in{}", k)));
  }
  for (const Tensor& t : body(inputs)) g.outputs.push_back(tracer.value_of(t));
  return g;
}

// "MatMul matmul2: ((2, 4), (4, 1)) derived" for every op, by instance name.
std::map<std::string, std::string> strategies(const ir::Graph& g) {
  std::map<std::string, std::string> out;
  for (const ir::Node& n : g.nodes) {
    if (!n.is_op()) continue;
    out[n.name] = fmt::format("{} {}{}", n.op->name, ir::strategy_to_string(n.strategy),
                              n.strategy_derived ? " derived" : "");
  }
  return out;
}

Tensor parameter(const Shape& shape, const std::string& name) {
  return ir::Tracer::current()->add_parameter(Tensor::ones(shape), name);
}

// Seed 003's Net with MSELoss: matmul ((2, 4), (4, 1)) given, the rest propagated.
ir::Graph seed_graph() {
  return trace({{16, 32}, {16, 16}}, [](const std::vector<Tensor>& in) {
    ir::Primitive matmul("MatMul"), relu("ReLU"), matmul2("MatMul");
    matmul.set_name("matmul");
    relu.set_name("relu");
    matmul2.set_name("matmul2");
    matmul.shard({{2, 4}, {4, 1}});
    const Tensor h = relu.call1({matmul.call1({in[0], parameter({32, 16}, "w")})});
    const Tensor out = matmul2.call1({h, parameter({16, 16}, "w2")});
    return std::vector<Tensor>{nn::MSELoss()(out, in[1])};
  });
}

TEST(Propagation, SeedThreeStrategies) {
  ir::Graph g = seed_graph();
  const PropagationReport r = propagate_strategies(g, {.device_num = 8});
  const auto s = strategies(g);
  EXPECT_EQ(s.at("matmul"), "MatMul ((2, 4), (4, 1))");
  EXPECT_EQ(s.at("relu"), "ReLU ((2, 4)) derived");
  EXPECT_EQ(s.at("matmul2"), "MatMul ((2, 4), (4, 1)) derived");
  EXPECT_EQ(r.configured, 1);
  EXPECT_EQ(r.unreached, 0);
  EXPECT_EQ(r.derived, static_cast<int>(s.size()) - 1);
  EXPECT_TRUE(r.inconsistencies.empty()) << fmt::format("{}", fmt::join(r.inconsistencies, "\n"));
  // The loss follows the label's data-parallel layout: no communication on its edges.
  for (const auto& [name, text] : s) {
    if (name != "matmul" && name != "relu" && name != "matmul2") {
      EXPECT_NE(text.find("(8"), std::string::npos) << name << ": " << text;
    }
  }
  // The rewrite then gives seed 003's executed graph on rank 0.
  const ParallelPlan plan = plan_step_parallel(g, {.device_num = 8});
  const LocalStep local = materialize(g, plan, 0);
  std::vector<std::string> lines;
  for (const ir::Node& n : local.graph.nodes) {
    if (!n.is_op()) continue;
    std::vector<std::string> in;
    for (const ir::ValueRef& v : n.inputs) in.push_back(local.graph.meta(v).shape.to_string());
    lines.push_back(fmt::format("{} {} -> {}", n.op->name, fmt::join(in, " x "),
                                n.outputs[0].shape.to_string()));
  }
  const std::vector<std::string> head(lines.begin(), lines.begin() + 6);
  const std::vector<std::string> expected = {
      "AlltoAll (2, 32) -> (8, 8)",   "MatMul (8, 8) x (8, 16) -> (8, 16)",
      "AllReduce (8, 16) -> (8, 16)", "Slice (8, 16) -> (8, 4)",
      "ReLU (8, 4) -> (8, 4)",        "MatMul (8, 4) x (4, 16) -> (8, 16)"};
  EXPECT_EQ(head, expected) << fmt::format("{}", fmt::join(lines, "\n"));
}

// A diamond y -> (exp, neg) -> add, traced in both branch orders: the same strategies.
std::map<std::string, std::string> diamond(bool exp_first) {
  ir::Graph g = trace({{16, 32}}, [&](const std::vector<Tensor>& in) {
    ir::Primitive matmul("MatMul"), e("Exp"), n("Neg"), add("Add");
    ir::Primitive soft("Softmax", {{"axis", int64_t{-1}}});
    matmul.set_name("matmul");
    e.set_name("exp");
    n.set_name("neg");
    add.set_name("add");
    soft.set_name("softmax");
    matmul.shard({{4, 1}, {1, 2}});
    const Tensor y = matmul.call1({in[0], parameter({32, 8}, "w")});
    Tensor a, b;
    if (exp_first) {
      a = e.call1({y});
      b = n.call1({y});
    } else {
      b = n.call1({y});
      a = e.call1({y});
    }
    return std::vector<Tensor>{soft.call1({add.call1({a, b})})};
  });
  propagate_strategies(g, {.device_num = 8});
  return strategies(g);
}

TEST(Propagation, ADiamondGivesTheSameStrategiesInEitherTraceOrder) {
  const auto a = diamond(true);
  const auto b = diamond(false);
  EXPECT_EQ(a, b);
  // matmul's output (16, 8) is (4, 2): the elementwise ops take it as it is; the softmax cannot
  // split its axis, so it gathers it and splits the rows over all 8 devices instead.
  EXPECT_EQ(a.at("exp"), "Exp ((4, 2)) derived");
  EXPECT_EQ(a.at("neg"), "Neg ((4, 2)) derived");
  EXPECT_EQ(a.at("add"), "Add ((4, 2), (4, 2)) derived");
  EXPECT_EQ(a.at("softmax").substr(0, 15), "Softmax ((8, 1)");
}

TEST(Propagation, BackwardFromAConsumer) {
  // neg -> relu -> matmul configured at the end: the strategies flow upstream from it.
  ir::Graph g = trace({{16, 32}}, [](const std::vector<Tensor>& in) {
    ir::Primitive relu("ReLU"), matmul("MatMul");
    relu.set_name("relu");
    matmul.set_name("matmul");
    matmul.shard({{8, 1}, {1, 1}});
    const Tensor h = relu.call1({ops::neg(in[0])});
    return std::vector<Tensor>{matmul.call1({h, parameter({32, 4}, "w")})};
  });
  const PropagationReport r = propagate_strategies(g, {.device_num = 8});
  const auto s = strategies(g);
  EXPECT_EQ(s.at("relu"), "ReLU ((8, 1)) derived");
  EXPECT_EQ(s.at("neg"), "Neg ((8, 1)) derived");
  EXPECT_EQ(r.rounds, 2);
}

TEST(Propagation, ThroughReshapeAndTranspose) {
  // relu (16, 32) configured on rows and columns -> reshape (16, 4, 8) -> transpose (16, 8, 4)
  // -> exp: the split rows and columns follow the values through both.
  ir::Graph g = trace({{16, 32}}, [](const std::vector<Tensor>& in) {
    ir::Primitive relu("ReLU");
    relu.set_name("relu").shard({{4, 2}});
    const Tensor h = ops::reshape(relu.call1({in[0]}), {16, 4, 8});
    return std::vector<Tensor>{ops::exp(ops::transpose(h, {0, 2, 1}))};
  });
  const PropagationReport r = propagate_strategies(g, {.device_num = 8});
  const auto s = strategies(g);
  EXPECT_EQ(s.at("reshape"), "Reshape ((4, 2)) derived");
  EXPECT_EQ(s.at("transpose"), "Transpose ((4, 2, 1)) derived");
  EXPECT_EQ(s.at("exp"), "Exp ((4, 1, 2)) derived");
  EXPECT_TRUE(r.inconsistencies.empty()) << fmt::format("{}", fmt::join(r.inconsistencies, "\n"));
}

TEST(Propagation, ASharedParameterTakesOneLayout) {
  // w feeds two MatMuls; the first is configured to split w's rows 4 ways; the second, on its
  // own input, takes w as the first laid it out instead of moving it.
  ir::Graph g = trace({{16, 32}, {8, 32}}, [](const std::vector<Tensor>& in) {
    ir::Primitive m1("MatMul"), m2("MatMul");
    m1.set_name("m1");
    m2.set_name("m2");
    m1.shard({{2, 4}, {4, 1}});
    const Tensor w = parameter({32, 16}, "w");
    return std::vector<Tensor>{m1.call1({in[0], w}), m2.call1({in[1], w})};
  });
  propagate_strategies(g, {.device_num = 8, .dataset = DatasetSplit::kFullBatch});
  const auto s = strategies(g);
  EXPECT_EQ(s.at("m2").substr(0, 22), "MatMul ((2, 4), (4, 1)");
}

TEST(Propagation, ConflictingGivenStrategiesAreRedistributedAndReported) {
  ir::Graph g = trace({{16, 32}}, [](const std::vector<Tensor>& in) {
    ir::Primitive relu("ReLU"), gelu("Tanh");
    relu.set_name("relu");
    gelu.set_name("tanh");
    relu.shard({{8, 1}});
    gelu.shard({{1, 8}});
    return std::vector<Tensor>{gelu.call1({relu.call1({in[0]})})};
  });
  const PropagationReport r = propagate_strategies(g, {.device_num = 8});
  ASSERT_EQ(r.inconsistencies.size(), 1u);
  EXPECT_NE(r.inconsistencies[0].find("Tanh 'tanh'"), std::string::npos) << r.inconsistencies[0];
  EXPECT_NE(r.inconsistencies[0].find("from ReLU 'relu' (both strategies given)"),
            std::string::npos)
      << r.inconsistencies[0];
  const ParallelPlan plan = plan_step_parallel(g, {.device_num = 8});
  const ir::NodeNotes notes = redistribution_notes(g, plan);
  std::string tanh_note;
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    if (g.nodes[i].is_op() && g.nodes[i].name == "tanh") tanh_note = notes[i];
  }
  EXPECT_NE(tanh_note.find("redistribution of input 0"), std::string::npos) << tanh_note;
  EXPECT_NE(tanh_note.find("AlltoAll"), std::string::npos) << tanh_note;
}

TEST(Propagation, UnreachedOperatorsAreLeftToTheDefaultAndNoStartIsAnError) {
  ir::Graph g = trace({{16, 32}, {16, 8}}, [](const std::vector<Tensor>& in) {
    ir::Primitive relu("ReLU");
    relu.set_name("relu");
    relu.shard({{2, 4}});
    return std::vector<Tensor>{relu.call1({in[0]}), ops::exp(in[1])};
  });
  const PropagationReport r = propagate_strategies(g, {.device_num = 8});
  EXPECT_EQ(r.unreached, 1);
  EXPECT_TRUE(strategies(g).at("exp").find("()") != std::string::npos);
  ir::Graph none = trace({{16, 32}}, [](const std::vector<Tensor>& in) {
    return std::vector<Tensor>{ops::relu(in[0])};
  });
  EXPECT_ERROR(propagate_strategies(none, {.device_num = 8}),
               "needs at least one operator with a strategy to start from", "shard()");
}

TEST(Propagation, AnInvalidGivenStrategyIsTheRewritesError) {
  ir::Graph g = trace({{16, 32}}, [](const std::vector<Tensor>& in) {
    ir::Primitive relu("ReLU");
    relu.set_name("relu");
    relu.shard({{3, 1}});
    return std::vector<Tensor>{relu.call1({in[0]})};
  });
  EXPECT_ERROR(propagate_strategies(g, {.device_num = 8}), "ReLU 'relu'", "((3, 1))");
}

class StrategyFile : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ =
        std::filesystem::temp_directory_path() / fmt::format("cleave_strategy_file_{}", ::getpid());
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::string path(const std::string& name) const { return (dir_ / name).string(); }
  std::filesystem::path dir_;
};

TEST_F(StrategyFile, SavedStrategiesLoadBackIntoAFreshTrace) {
  ir::Graph g = seed_graph();
  propagate_strategies(g, {.device_num = 8});
  const ParallelPlan plan = plan_step_parallel(g, {.device_num = 8});
  save_strategy_file(path("s.json"), g, plan);
  std::ifstream in(path("s.json"));
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_NE(text.find("\"parallel_layout_item\""), std::string::npos);
  EXPECT_NE(text.find("/MatMul-matmul2\""), std::string::npos) << text;

  ir::Graph fresh = seed_graph();  // only matmul configured
  EXPECT_EQ(load_strategy_file(path("s.json"), fresh, 8), static_cast<int>(strategies(g).size()));
  EXPECT_EQ(strategies(fresh), strategies(g));
  // Propagation then has nothing left to decide.
  EXPECT_EQ(propagate_strategies(fresh, {.device_num = 8}).derived, 0);
}

TEST_F(StrategyFile, WrongFilesAreNamedErrors) {
  ir::Graph g = seed_graph();
  const ParallelPlan plan = plan_step_parallel(g, {.device_num = 8});
  save_strategy_file(path("s.json"), g, plan);
  ir::Graph fresh = seed_graph();
  EXPECT_ERROR(load_strategy_file(path("s.json"), fresh, 4), "was saved for device_num 8",
               "this job has 4 devices");
  EXPECT_ERROR(load_strategy_file(path("missing.json"), fresh, 8), "missing.json");
  std::ofstream(path("bad.json")) << "{\"format\": \"cleave-strategy\", \"version\": 1,";
  EXPECT_ERROR(load_strategy_file(path("bad.json"), fresh, 8), "is not valid JSON");
  std::ofstream(path("other.json")) << "{\"a\": 1}";
  EXPECT_ERROR(load_strategy_file(path("other.json"), fresh, 8), "no \"format\"");
  ir::Graph other = trace({{16, 32}}, [](const std::vector<Tensor>& in) {
    return std::vector<Tensor>{ops::exp(in[0])};
  });
  EXPECT_ERROR(load_strategy_file(path("s.json"), other, 8), "none of them in graph",
               "saved for another network");
  EXPECT_ERROR(save_strategy_file(path("no/such/folder/s.json"), g, plan), "does not exist");
}

// Fields of the wrong JSON type (fuzz/regressions/strategy_file/): each was an uncaught
// nlohmann::json::type_error or, for a device matrix whose size overflows, undefined behaviour.
TEST_F(StrategyFile, FieldsOfTheWrongTypeAreNamedErrors) {
  ir::Graph g = seed_graph();
  auto load = [&](const std::string& text) {
    std::ofstream(path("s.json")) << text;
    return load_strategy_file(path("s.json"), g, 8);
  };
  EXPECT_ERROR(load(R"({"format": 7})"), "no \"format\": \"cleave-strategy\" field");
  EXPECT_ERROR(load(R"({"format": "cleave-strategy", "version": "1"})"),
               "version \"1\" is not supported; expected 1");
  EXPECT_ERROR(load(R"({"format": "cleave-strategy", "version": 1, "device_num": "8"})"),
               "\"device_num\" is \"8\"; expected a positive integer");
  const std::string key = strategy_key(g.nodes[static_cast<size_t>(
      std::find_if(g.nodes.begin(), g.nodes.end(), [](const ir::Node& n) { return n.is_op(); }) -
      g.nodes.begin())]);
  EXPECT_ERROR(load(R"({"format": "cleave-strategy", "version": 1, "device_num": 8,
                        "parallel_strategy_item": {")" +
                    key + R"(": {"parallel_strategy": [[1, 1], [1, 1]], "derived": 1}}})"),
               "has \"derived\": 1; expected true or false");
  std::ofstream(path("l.json"))
      << R"({"format": "cleave-strategy", "version": 1, "device_num": 8, "parallel_layout_item":
            {"w": {"dev_matrix": [4294967296, 4294967296], "tensor_map": [[0], [1]],
                   "tensor_shape": [4294967296, 4294967296]}}})";
  EXPECT_ERROR(load_parameter_layouts(path("l.json")), "parameter 'w' has an invalid layout",
               "has more than 2147483647 devices");
  // A number with an exponent where an integer belongs (fuzz/regressions/strategy_file/
  // shape_number_with_exponent.json): nlohmann's conversion was undefined behaviour.
  std::ofstream(path("l.json"))
      << R"({"format": "cleave-strategy", "version": 1, "device_num": 8, "parallel_layout_item":
            {"w": {"dev_matrix": [8], "tensor_map": [[0], []], "tensor_shape": [8, 4.3e54]}}})";
  EXPECT_ERROR(load_parameter_layouts(path("l.json")), "parameter 'w' has an invalid layout",
               "\"tensor_shape\" is [8,4.3e+54]; expected an array of integers");
  std::ofstream(path("l.json"))
      << R"({"format": "cleave-strategy", "version": 1, "device_num": 8, "parallel_layout_item":
            {"w": {"dev_matrix": [8], "tensor_map": [[0.5], []], "tensor_shape": [8, 4]}}})";
  EXPECT_ERROR(load_parameter_layouts(path("l.json")), "\"tensor_map\" is [0.5]");
}

// Seed 003's Net as a Cell, trained by AUTO_PARALLEL with sharding propagation on 8 thread ranks.
class SeedNet : public nn::Cell {
 public:
  SeedNet() : Cell("Net") {
    w = register_parameter("w", nn::Normal(0.5)(Shape{32, 16}));
    w2 = register_parameter("w2", nn::Normal(0.5)(Shape{16, 16}));
    matmul.set_name("matmul").shard({{2, 4}, {4, 1}});
    relu.set_name("relu");
    matmul2.set_name("matmul2");
  }
  Tensor construct(const Tensor& x) override {
    return matmul2.call1({relu.call1({matmul.call1({x, w})}), w2});
  }
  Tensor w, w2;
  ir::Primitive matmul{"MatMul"}, relu{"ReLU"}, matmul2{"MatMul"};
};

std::vector<double> train_seed(const Tensor& x, const Tensor& y, int steps) {
  std::shared_ptr<SeedNet> net;
  {
    const SeededScope seeded(7);  // NOTE [Global generator]
    net = std::make_shared<SeedNet>();
  }
  auto loss = std::make_shared<nn::WithLossCell>(net, std::make_shared<nn::MSELoss>());
  auto opt = std::make_shared<optim::Momentum>(net->trainable_params(), 0.2, 0.1);
  optim::TrainOneStep step(loss, opt);
  std::vector<double> losses;
  for (int s = 0; s < steps; ++s) losses.push_back(step(x, y).item());
  return losses;
}

std::vector<std::vector<double>> train_on_threads(const runtime::AutoParallelContext& context,
                                                  const Tensor& x, const Tensor& y, int steps) {
  const int world = 8;
  runtime::set_auto_parallel_context(context);
  std::vector<std::vector<double>> runs(world);
  testing::run_thread_job(world, [&](int rank) {
    const int64_t rows = x.dim(0) / world;
    runs[rank] = train_seed(x.narrow_rows(rank * rows, rows).clone(),
                            y.narrow_rows(rank * rows, rows).clone(), steps);
  });
  runtime::reset_auto_parallel_context();
  return runs;
}

TEST_F(StrategyFile, AutoParallelTrainsLikeOneDeviceAndItsStrategyFileReplays) {
  const int steps = 5;
  set_seed(1);
  const Tensor x = Tensor::uniform({16, 32});
  const Tensor y = Tensor::uniform({16, 16});
  runtime::reset_auto_parallel_context();
  const std::vector<double> single = train_seed(x, y, steps);
  EXPECT_LT(single.back(), single.front());
  const std::string file = path("seed.json");
  const auto propagated = train_on_threads({.parallel_mode = runtime::AUTO_PARALLEL,
                                            .search_mode = "sharding_propagation",
                                            .strategy_ckpt_save_file = file},
                                           x, y, steps);
  ASSERT_TRUE(std::filesystem::exists(file));
  const auto replayed = train_on_threads({.parallel_mode = runtime::AUTO_PARALLEL,
                                          .search_mode = "sharding_propagation",
                                          .strategy_ckpt_load_file = file},
                                         x, y, steps);
  for (int r = 0; r < 8; ++r) {
    for (int s = 0; s < steps; ++s) {
      EXPECT_NEAR(propagated[r][s], single[s], 1e-5 * std::abs(single[s]))
          << "rank " << r << " step " << s;
      EXPECT_EQ(replayed[r][s], propagated[r][s]) << "rank " << r << " step " << s;
    }
  }
}

}  // namespace
}  // namespace cleave::parallel

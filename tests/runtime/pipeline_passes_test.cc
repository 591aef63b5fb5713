// The passes of the compile pipeline one at a time, text in and text out (NOTE [Compile
// pipeline] in cleave/runtime/pipeline.h, NOTE [IR text] in cleave/ir/parse.h): a graph read from
// text, one pass run on it (runtime::run_pass), the graph printed and compared with the text it
// must give. Inputs and expected outputs are small texts written here or the golden dumps of the
// seeds (tests/runtime/golden/seeds), whose stages the compiled pipeline produced. Every pass of
// the list has a test here or runs from text in seed_graphs_test.cc's *CompilesFromItsTraceText,
// which compiles each seed's trace text through the whole list; the last test plans a 1024-rank
// job from text, with no thread or process.
#include <gtest/gtest.h>

#include <filesystem>
#include <memory>
#include <regex>
#include <set>

#include "cleave/cleave.h"
#include "cleave/core/threads.h"
#include "cleave/ir/parse.h"
#include "cleave/ir/passes.h"
#include "cleave/parallel/machine_profile.h"
#include "cleave/parallel/strategy_file.h"
#include "cleave/runtime/pipeline.h"
#include "testing/failing_world.h"
#include "testing/golden.h"

namespace cleave::runtime {
namespace {

namespace fs = std::filesystem;

const fs::path kSeeds = fs::path(CLEAVE_TESTS_DIR) / "runtime/golden/seeds";

// The golden dumps compared here belong to other tests (tests/ir/golden to graph_dump_test.cc, the
// seeds' to seed_graphs_test.cc): read here, rewritten there (NOTE [Golden files]).
using testing::read_text;

// Per parameter of `optimizer`, its state tensors laid out like it ("<state>.<index>").
std::vector<std::vector<Tensor>> like_parameters(const optim::Optimizer& optimizer) {
  std::vector<std::vector<Tensor>> like(optimizer.parameters().size());
  for (const auto& [name, t] : optimizer.state()) {
    const size_t i = std::stoul(name.substr(name.rfind('.') + 1));
    if (i < like.size()) like[i].push_back(t);
  }
  return like;
}

// A compile state over a graph read from text: the program, options and state of one compile.
struct TextCompile {
  StepProgram program;
  CompileOptions options;
  CompileState state{.program = program, .options = options};
  std::shared_ptr<optim::Optimizer> optimizer;

  // The parameters of the graph, in order: what the optimizer updates.
  std::vector<Tensor> parameters() const {
    std::vector<Tensor> out;
    for (const ir::Node& n : state.graph.nodes) {
      if (n.kind == ir::NodeKind::kParameter) out.push_back(n.value);
    }
    return out;
  }
  // A training step: gradients of every parameter, updated by Momentum(lr, momentum).
  void train_with_momentum(double lr, double momentum) {
    program.wrt = parameters();
    optimizer = std::make_shared<optim::Momentum>(program.wrt, lr, momentum);
    program.wrt_like = like_parameters(*optimizer);
    optim::Optimizer* opt = optimizer.get();
    program.update = [opt](const std::vector<Tensor>& grads) {
      ir::ScopeGuard scope("optimizer", opt->name());
      opt->apply(grads);
    };
  }
  std::string text() const { return ir::dump_text(state.graph); }
};

std::unique_ptr<TextCompile> from_text(std::string_view text, CompileOptions options = {}) {
  auto c = std::make_unique<TextCompile>();
  c->options = options;
  c->program.name = "train_step";
  if (!text.empty()) c->state.graph = ir::parse_text(text).graph;
  return c;
}
std::unique_ptr<TextCompile> from_file(const fs::path& path, CompileOptions options = {}) {
  return from_text(read_text(path), options);
}

// The first node whose name is `name` (or whose scope starts with `scope`), for the indices a
// mid-pipeline pass takes from earlier ones.
int first_named(const ir::Graph& g, const std::string& name) {
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    if (g.nodes[i].name == name) return static_cast<int>(i);
  }
  return -1;
}
int first_in_scope(const ir::Graph& g, const std::string& scope) {
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    if (g.nodes[i].scope.rfind(scope, 0) == 0) return static_cast<int>(i);
  }
  return -1;
}

// ---- the simplifying passes, on small texts ----

constexpr const char* kFoldable = R"(# IR entry: @g
# Total inputs: 1
# Total params: 0
# Total ops: 4
%para1_x: <Tensor[Float32], (2)> : input
%const1: <Tensor[Float32], (2)> : constant (literal) = [1, 2]
%const2: <Tensor[Float32], (2)> : constant (literal) = 3.0
%const3: <Tensor[Float32], (2)> : constant = [5, 6]

subgraph @g(%para1_x) {
  %4(out) = Add(%const1, %const2) {instance name: add}
      : (<Tensor[Float32], (2)>, <Tensor[Float32], (2)>) -> (<Tensor[Float32], (2)>)
      # scope: (Default)
  %5(out) = Mul(%para1_x, %4) {instance name: mul}
      : (<Tensor[Float32], (2)>, <Tensor[Float32], (2)>) -> (<Tensor[Float32], (2)>)
      # scope: (Default)
  %6(out) = Add(%const3, %const1) {instance name: add_1}
      : (<Tensor[Float32], (2)>, <Tensor[Float32], (2)>) -> (<Tensor[Float32], (2)>)
      # scope: (Default)
  %7(out) = Add(%5, %6) {instance name: add_2}
      : (<Tensor[Float32], (2)>, <Tensor[Float32], (2)>) -> (<Tensor[Float32], (2)>)
      # scope: (Default)
  return(%7)
}
)";

TEST(PipelinePasses, ConstantFoldComputesOpsOnLiteralsOnly) {
  auto c = from_text(kFoldable);
  run_pass("constant_fold", c->state);
  // %4 = [1, 2] + 3 becomes the literal %const3 = [4, 5] (and the constant only it read goes);
  // %6 reads the captured %const3 and stays.
  EXPECT_EQ(c->text(), R"(# IR entry: @g
# Total inputs: 1
# Total params: 0
# Total ops: 3
%para1_x: <Tensor[Float32], (2)> : input
%const1: <Tensor[Float32], (2)> : constant (literal)
%const2: <Tensor[Float32], (2)> : constant
%const3: <Tensor[Float32], (2)> : constant (literal)

subgraph @g(%para1_x) {
  %4(out) = Mul(%para1_x, %const3) {instance name: mul}
      : (<Tensor[Float32], (2)>, <Tensor[Float32], (2)>) -> (<Tensor[Float32], (2)>)
      # scope: (Default)
  %5(out) = Add(%const2, %const1) {instance name: add_1}
      : (<Tensor[Float32], (2)>, <Tensor[Float32], (2)>) -> (<Tensor[Float32], (2)>)
      # scope: (Default)
  %6(out) = Add(%4, %5) {instance name: add_2}
      : (<Tensor[Float32], (2)>, <Tensor[Float32], (2)>) -> (<Tensor[Float32], (2)>)
      # scope: (Default)
  return(%6)
}
)");
  EXPECT_EQ(c->state.graph.nodes[3].value.to_vector<float>(), (std::vector<float>{4, 5}));
}

TEST(PipelinePasses, CseMergesIdenticalOpsAndDceRemovesWhatNothingUses) {
  constexpr const char* kText = R"(# IR entry: @g
%para1_x: <Tensor[Float32], (2)> : input

subgraph @g(%para1_x) {
  %1(out) = Neg(%para1_x) {instance name: neg}
      : (<Tensor[Float32], (2)>) -> (<Tensor[Float32], (2)>)
      # scope: (Default)
  %2(out) = Neg(%para1_x) {instance name: neg_1}
      : (<Tensor[Float32], (2)>) -> (<Tensor[Float32], (2)>)
      # scope: (Default)
  %3(out) = Exp(%para1_x) {instance name: exp}
      : (<Tensor[Float32], (2)>) -> (<Tensor[Float32], (2)>)
      # scope: (Default)
  %4(out) = Add(%1, %2) {instance name: add}
      : (<Tensor[Float32], (2)>, <Tensor[Float32], (2)>) -> (<Tensor[Float32], (2)>)
      # scope: (Default)
  return(%4)
}
)";
  auto c = from_text(kText);
  run_pass("cse", c->state);  // the second Neg goes; Exp stays for DCE
  EXPECT_EQ(c->text(), R"(# IR entry: @g
# Total inputs: 1
# Total params: 0
# Total ops: 3
%para1_x: <Tensor[Float32], (2)> : input

subgraph @g(%para1_x) {
  %1(out) = Neg(%para1_x) {instance name: neg}
      : (<Tensor[Float32], (2)>) -> (<Tensor[Float32], (2)>)
      # scope: (Default)
  %2(out) = Exp(%para1_x) {instance name: exp}
      : (<Tensor[Float32], (2)>) -> (<Tensor[Float32], (2)>)
      # scope: (Default)
  %3(out) = Add(%1, %1) {instance name: add}
      : (<Tensor[Float32], (2)>, <Tensor[Float32], (2)>) -> (<Tensor[Float32], (2)>)
      # scope: (Default)
  return(%3)
}
)");
  run_pass("dce", c->state);
  EXPECT_EQ(c->text(), R"(# IR entry: @g
# Total inputs: 1
# Total params: 0
# Total ops: 2
%para1_x: <Tensor[Float32], (2)> : input

subgraph @g(%para1_x) {
  %1(out) = Neg(%para1_x) {instance name: neg}
      : (<Tensor[Float32], (2)>) -> (<Tensor[Float32], (2)>)
      # scope: (Default)
  %2(out) = Add(%1, %1) {instance name: add}
      : (<Tensor[Float32], (2)>, <Tensor[Float32], (2)>) -> (<Tensor[Float32], (2)>)
      # scope: (Default)
  return(%2)
}
)");
}

TEST(PipelinePasses, MarkLiteralsMarksConstantsOnlyTheGraphHolds) {
  auto c = from_text(kFoldable);
  const Tensor held = c->state.graph.nodes[3].value;  // %const3, captured: someone holds it
  c->state.graph.nodes[1].literal = c->state.graph.nodes[2].literal = false;
  run_pass("mark_literals", c->state);
  EXPECT_TRUE(c->state.graph.nodes[1].literal);
  EXPECT_TRUE(c->state.graph.nodes[2].literal);
  EXPECT_FALSE(c->state.graph.nodes[3].literal);
}

TEST(PipelinePasses, VerifyPassesAGoodGraphAndNamesTheBadNode) {
  auto c = from_text(kFoldable);
  run_pass("verify", c->state);
  c->state.graph.nodes[5].outputs[0].shape = Shape{3};
  try {
    run_pass("verify", c->state);
    FAIL() << "verify accepted a wrong shape";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("%5 (Mul 'mul')"), std::string::npos) << e.what();
  }
}

TEST(PipelinePasses, AnUnknownPassIsNamedWithTheList) {
  auto c = from_text(kFoldable);
  try {
    run_pass("fold", c->state);
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("no pass 'fold'; the passes are trace, "),
              std::string::npos)
        << e.what();
  }
}

// ---- training passes on tests/ir/golden (TinyNet: relu(x w), MSE, Momentum(0.1, 0.9)) ----

const fs::path kTiny = fs::path(CLEAVE_TESTS_DIR) / "ir/golden";

TEST(PipelinePasses, TraceTakesATracedGraph) {
  auto c = from_text("");
  c->program.traced = std::make_shared<ir::Graph>(ir::parse_file(kTiny / "01_trace.ir").graph);
  run_pass("trace", c->state);
  EXPECT_EQ(c->text(), read_text(kTiny / "01_trace.ir"));
}

TEST(PipelinePasses, AutodiffThenOptimizerGiveTheCompiledStages) {
  auto c = from_file(kTiny / "01_trace.ir");
  c->train_with_momentum(0.1, 0.9);
  run_pass("autodiff", c->state);
  EXPECT_EQ(c->text(), read_text(kTiny / "08_autodiff.ir"));
  run_pass("optimizer", c->state);
  EXPECT_EQ(c->text(), read_text(kTiny / "11_optimizer.ir"));
}

// ---- the parallel passes on seed 003 (sharding propagation on 8 devices) ----

CompileOptions seed003_options(int64_t rank) {
  CompileOptions o{.world_size = 8,
                   .rank = rank,
                   .mode = AUTO_PARALLEL,
                   .search_mode = "sharding_propagation",
                   .device_num = 8};
  o.step_parallel.device_num = 8;
  return o;
}

TEST(PipelinePasses, PropagationAndStepParallelBeginGiveTheSeedsStrategies) {
  const fs::path seed = kSeeds / "003_sharding_propagation";
  auto c = from_file(seed / "train_step/01_trace.ir", seed003_options(0));
  run_pass("search_strategies", c->state);
  for (const ir::Node& n : c->state.graph.nodes) {
    if (n.is_op()) {
      EXPECT_FALSE(n.strategy.empty()) << n.name << " got no strategy";
    }
  }
  run_pass("step_parallel_begin", c->state);
  EXPECT_EQ(ir::dump_text(c->state.graph, c->state.dump_notes),
            read_text(seed / "train_step/04_step_parallel_begin.ir"));
}

TEST(PipelinePasses, EnableAlltoallReachesTheRewrite) {
  // Seed 003's data-parallel batch moves to the MatMul's blocks with an AlltoAll; with the
  // context's enable_alltoall off, with an AllGather and a Slice instead.
  const fs::path seed = kSeeds / "003_sharding_propagation";
  for (const bool on : {true, false}) {
    CompileOptions options = seed003_options(0);
    options.enable_alltoall = on;
    auto c = from_file(seed / "train_step/01_trace.ir", options);
    for (const char* pass : {"search_strategies", "step_parallel_begin", "step_parallel_end"}) {
      run_pass(pass, c->state);
    }
    int alltoalls = 0;
    for (const ir::Node& n : c->state.graph.nodes) {
      alltoalls += n.is_op() && n.op->name == "AlltoAll" ? 1 : 0;
    }
    EXPECT_EQ(alltoalls > 0, on) << ir::dump_text(c->state.graph);
  }
}

TEST(PipelinePasses, StrategyFilesWrittenAndReadBackGiveTheSameStrategies) {
  const fs::path seed = kSeeds / "003_sharding_propagation";
  const fs::path file = fs::temp_directory_path() / "cleave_pipeline_passes_strategy.json";
  CompileOptions o = seed003_options(0);
  o.strategy_save_file = o.strategy_load_file = file.string();
  auto saved = from_file(seed / "train_step/01_trace.ir", o);
  run_pass("search_strategies", saved->state);
  run_pass("step_parallel_begin", saved->state);
  run_pass("save_strategy_file", saved->state);
  auto loaded = from_file(seed / "train_step/01_trace.ir", o);
  run_pass("load_strategy_file", loaded->state);
  for (size_t i = 0; i < saved->state.graph.nodes.size(); ++i) {
    EXPECT_EQ(loaded->state.graph.nodes[i].strategy, saved->state.graph.nodes[i].strategy) << i;
  }
  fs::remove(file);
}

// ---- the dynamic-programming search (4 devices) ----

// An MLP of small weights on a large batch: x (1024, 16) · w1 (16, 16), ReLU, · w2 (16, 16), MSE
// against the label, and its mean, whose strategy is given. Splitting the batch costs no
// redistribution and all-reduces only the small gradients; any other plan moves (1024, 16)
// activations.
constexpr const char* kSmallWeights = R"(# IR entry: @train_step
%para1_data: <Tensor[Float32], (1024, 16)> : input
%para2_label: <Tensor[Float32], (1024, 16)> : input
%para3_w1: <Tensor[Float32], (16, 16)> : parameter
%para4_w2: <Tensor[Float32], (16, 16)> : parameter

subgraph @train_step(%para1_data, %para2_label, %para3_w1, %para4_w2) {
  %4(out) = MatMul(%para1_data, %para3_w1) {instance name: matmul} primitive_attrs: {transpose_a: false, transpose_b: false}
      : (<Tensor[Float32], (1024, 16)>, <Tensor[Float32], (16, 16)>) -> (<Tensor[Float32], (1024, 16)>)
      # scope: (Default/network-WithLossCell/_backbone-Mlp)
  %5(out) = ReLU(%4) {instance name: relu}
      : (<Tensor[Float32], (1024, 16)>) -> (<Tensor[Float32], (1024, 16)>)
      # scope: (Default/network-WithLossCell/_backbone-Mlp)
  %6(out) = MatMul(%5, %para4_w2) {instance name: matmul2} primitive_attrs: {transpose_a: false, transpose_b: false}
      : (<Tensor[Float32], (1024, 16)>, <Tensor[Float32], (16, 16)>) -> (<Tensor[Float32], (1024, 16)>)
      # scope: (Default/network-WithLossCell/_backbone-Mlp)
  %7(out) = MSE(%6, %para2_label) {instance name: mse}
      : (<Tensor[Float32], (1024, 16)>, <Tensor[Float32], (1024, 16)>) -> (<Tensor[Float32], (1024, 16)>)
      # scope: (Default/network-WithLossCell/_loss_fn-MSELoss)
  %8(out) = ReduceMean(%7) {instance name: reducemean} primitive_attrs: {axis: (), keep_dims: false} {in_strategy: ((4, 1))}
      : (<Tensor[Float32], (1024, 16)>) -> (<Tensor[Float32], ()>)
      # scope: (Default/network-WithLossCell/_loss_fn-MSELoss)
  return(%8)
}
)";

// kSmallWeights trained with Momentum, searched by the dynamic programming on 4 devices under
// `options` (whose world size, mode, search mode and device count are set here): the compile
// state after the search.
std::unique_ptr<TextCompile> searched_small_weights(CompileOptions options) {
  options.world_size = 4;
  options.mode = AUTO_PARALLEL;
  options.search_mode = "dynamic_programming";
  options.device_num = 4;
  auto c = from_text(kSmallWeights, options);
  c->options.step_parallel.device_num = 4;
  c->train_with_momentum(0.1, 0.9);
  run_pass("search_strategies", c->state);
  return c;
}

// Rank 0's summary line of searched_small_weights(options).
std::string search_summary(const CompileOptions& options) {
  const auto c = searched_small_weights(options);
  EXPECT_EQ(c->state.messages.size(), 1u);
  return c->state.messages.empty() ? std::string() : c->state.messages[0];
}

TEST(PipelinePasses, TheDynamicProgrammingSearchGivesEveryOpAStrategy) {
  const auto c = searched_small_weights({});
  EXPECT_EQ(c->text(), R"(# IR entry: @train_step
# Total inputs: 2
# Total params: 2
# Total ops: 5
%para1_data: <Tensor[Float32], (1024, 16)> : input
%para2_label: <Tensor[Float32], (1024, 16)> : input
%para3_w1: <Tensor[Float32], (16, 16)> : parameter
%para4_w2: <Tensor[Float32], (16, 16)> : parameter

subgraph @train_step(%para1_data, %para2_label, %para3_w1, %para4_w2) {
  %4(out) = MatMul(%para1_data, %para3_w1) {instance name: matmul} primitive_attrs: {transpose_a: false, transpose_b: false} {in_strategy: ((4, 1), (1, 1)), derived: true}
      : (<Tensor[Float32], (1024, 16)>, <Tensor[Float32], (16, 16)>) -> (<Tensor[Float32], (1024, 16)>)
      # scope: (Default/network-WithLossCell/_backbone-Mlp)
  %5(out) = ReLU(%4) {instance name: relu} {in_strategy: ((4, 1)), derived: true}
      : (<Tensor[Float32], (1024, 16)>) -> (<Tensor[Float32], (1024, 16)>)
      # scope: (Default/network-WithLossCell/_backbone-Mlp)
  %6(out) = MatMul(%5, %para4_w2) {instance name: matmul2} primitive_attrs: {transpose_a: false, transpose_b: false} {in_strategy: ((4, 1), (1, 1)), derived: true}
      : (<Tensor[Float32], (1024, 16)>, <Tensor[Float32], (16, 16)>) -> (<Tensor[Float32], (1024, 16)>)
      # scope: (Default/network-WithLossCell/_backbone-Mlp)
  %7(out) = MSE(%6, %para2_label) {instance name: mse} {in_strategy: ((4, 1), (4, 1)), derived: true}
      : (<Tensor[Float32], (1024, 16)>, <Tensor[Float32], (1024, 16)>) -> (<Tensor[Float32], (1024, 16)>)
      # scope: (Default/network-WithLossCell/_loss_fn-MSELoss)
  %8(out) = ReduceMean(%7) {instance name: reducemean} primitive_attrs: {axis: (), keep_dims: false} {in_strategy: ((4, 1))}
      : (<Tensor[Float32], (1024, 16)>) -> (<Tensor[Float32], ()>)
      # scope: (Default/network-WithLossCell/_loss_fn-MSELoss)
  return(%8)
}
)");
  // Rank 0 prints what the search did.
  ASSERT_EQ(c->state.messages.size(), 1u);
  EXPECT_TRUE(std::regex_match(
      c->state.messages[0],
      std::regex(R"(dynamic programming: 5 ops, 2 parameters, \d+ candidates, \d+ eliminations )"
                 R"(\(operator \d+, edge \d+, merge \d+, contract \d+, triangle \d+, star 0\), )"
                 R"(0 nodes left to the exact solver; predicted step cost [0-9.]+ ms, memory )"
                 R"([0-9.]+ MiB per rank)")))
      << c->state.messages[0];
}

// The predicted step cost in the search's summary line, in ms.
double predicted_ms(const std::string& summary) {
  std::smatch m;
  EXPECT_TRUE(std::regex_search(summary, m, std::regex(R"(predicted step cost ([0-9.]+) ms)")))
      << summary;
  return m.empty() ? 0 : std::stod(m[1]);
}

TEST(PipelinePasses, TheSearchCostsWithTheContextsMachineProfile) {
  // The shipped profile with every collective 100 times slower: the same graph costs more.
  parallel::MachineProfile slow = parallel::default_machine_profile();
  for (auto& [name, backend] : slow.backends) {
    for (auto& [collective, fits] : backend.collectives) {
      for (parallel::CollectiveFit& fit : fits) {
        fit.latency_s *= 100;
        fit.bandwidth_bytes_per_s /= 100;
        for (parallel::CollectivePoint& point : fit.points) point.seconds *= 100;
      }
    }
  }
  const fs::path path = fs::temp_directory_path() / "cleave_slow_comm_profile.json";
  parallel::save_machine_profile(slow, path.string());
  const double shipped = predicted_ms(search_summary({}));
  const double slow_comm = predicted_ms(search_summary({.cost_model_profile = path.string()}));
  fs::remove(path);
  EXPECT_GT(slow_comm, shipped);
  // A profile that cannot be read is the pass's error, naming the file.
  try {
    searched_small_weights({.cost_model_profile = "/nonexistent/profile.json"});
    ADD_FAILURE() << "no Error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("/nonexistent/profile.json"), std::string::npos)
        << e.what();
  }
}

TEST(PipelinePasses, TheSearchCostsComputationSlowerWhereRanksShareCores) {
  // NOTE [Ranks sharing cores]: compute_slowdown reaches the search's cost model, and rank 0's
  // summary says so; a process that joined no job is costed as it is.
  EXPECT_EQ(shared_cores_slowdown(), 1.0);
  const std::string alone = search_summary({});
  const std::string shared = search_summary({.compute_slowdown = 4});
  EXPECT_GT(predicted_ms(shared), predicted_ms(alone));
  EXPECT_EQ(alone.find("computation costed"), std::string::npos) << alone;
  EXPECT_NE(shared.find(fmt::format(
                "(computation costed 4x: the job's 4 ranks share this host's {} cores; NOTE "
                "[Ranks sharing cores])",
                threads::available_cores())),
            std::string::npos)
      << shared;
}

// ---- DATA_PARALLEL's schedule on seed 002 (8 ranks, SGD) ----

TEST(PipelinePasses, HoistThenOrderTheTailGiveTheCompiledStages) {
  const fs::path seed = kSeeds / "002_manual_parallel/train_step";
  auto c = from_file(seed / "12_mark_literals.ir",
                     {.world_size = 8, .mode = DATA_PARALLEL, .device_num = 8});
  c->state.mirrors_begin = first_named(c->state.graph, "gradients/mirror_op");
  c->state.step_begin = first_in_scope(c->state.graph, "Default/optimizer");
  ASSERT_GT(c->state.mirrors_begin, 0);
  ASSERT_GT(c->state.step_begin, c->state.mirrors_begin);
  run_pass("hoist_collectives", c->state);
  EXPECT_EQ(c->text(), read_text(seed / "13_hoist_collectives.ir"));
  run_pass("order_tail_by_collectives", c->state);
  EXPECT_EQ(c->text(), read_text(seed / "14_order_tail_by_collectives.ir"));
}

// ---- the partition of seed 000 (LeNet placed on workers 0..4 of 8) ----

TEST(PipelinePasses, PartitionCutsTheSeedsPlacedStepIntoItsRankGraphs) {
  const fs::path seed = kSeeds / "000_lenet_place/train_step";
  const fs::path out = fs::temp_directory_path() / "cleave_pipeline_passes_partition";
  fs::remove_all(out);
  for (int rank : {0, 3, 7}) {
    auto c = from_file(
        seed / "12_mark_literals.ir",
        {.world_size = 8, .rank = rank, .save_graphs = 1, .save_graphs_path = out.string()});
    c->state.step_begin = first_in_scope(c->state.graph, "Default/optimizer");
    run_pass("partition", c->state);
    EXPECT_TRUE(c->state.placed);
    EXPECT_EQ(c->text(), read_text(seed / fmt::format("15_partition_rank{}.ir", rank)));
  }
  // Rank 0 also wrote every rank's graph, as the pipeline does.
  for (int r = 0; r < 8; ++r) {
    const std::string name = fmt::format("15_partition_rank{}.ir", r);
    EXPECT_EQ(read_text(out / "train_step" / name), read_text(seed / name)) << name;
  }
  fs::remove_all(out);
}

// ---- planning a 1024-rank job from text ----

// An MLP step traced with global shapes: x (2048, 256) · w1 (256, 512), split ((32, 32), (32, 1))
// by hand (1024 devices: 32 row slices times 32 reduction slices), ReLU, · w2 (512, 64), MSE.
constexpr const char* kMlp1024 = R"(# IR entry: @train_step
%para1_data: <Tensor[Float32], (2048, 256)> : input
%para2_label: <Tensor[Float32], (2048, 64)> : input
%para3_w1: <Tensor[Float32], (256, 512)> : parameter
%para4_w2: <Tensor[Float32], (512, 64)> : parameter

subgraph @train_step(%para1_data, %para2_label, %para3_w1, %para4_w2) {
  %4(out) = MatMul(%para1_data, %para3_w1) {instance name: matmul} primitive_attrs: {transpose_a: false, transpose_b: false} {in_strategy: ((32, 32), (32, 1))}
      : (<Tensor[Float32], (2048, 256)>, <Tensor[Float32], (256, 512)>) -> (<Tensor[Float32], (2048, 512)>)
      # scope: (Default/network-WithLossCell/_backbone-Mlp)
  %5(out) = ReLU(%4) {instance name: relu}
      : (<Tensor[Float32], (2048, 512)>) -> (<Tensor[Float32], (2048, 512)>)
      # scope: (Default/network-WithLossCell/_backbone-Mlp)
  %6(out) = MatMul(%5, %para4_w2) {instance name: matmul2} primitive_attrs: {transpose_a: false, transpose_b: false}
      : (<Tensor[Float32], (2048, 512)>, <Tensor[Float32], (512, 64)>) -> (<Tensor[Float32], (2048, 64)>)
      # scope: (Default/network-WithLossCell/_backbone-Mlp)
  %7(out) = MSE(%6, %para2_label) {instance name: mse}
      : (<Tensor[Float32], (2048, 64)>, <Tensor[Float32], (2048, 64)>) -> (<Tensor[Float32], (2048, 64)>)
      # scope: (Default/network-WithLossCell/_loss_fn-MSELoss)
  %8(out) = ReduceMean(%7) {instance name: reducemean} primitive_attrs: {axis: (), keep_dims: false}
      : (<Tensor[Float32], (2048, 64)>) -> (<Tensor[Float32], ()>)
      # scope: (Default/network-WithLossCell/_loss_fn-MSELoss)
  return(%8)
}
)";

TEST(PipelinePasses, A1024RankJobIsPlannedFromTextWithoutProcesses) {
  const ir::Graph global = ir::parse_text(kMlp1024).graph;
  for (int64_t rank : {0, 513, 1023}) {
    testing::FailingWorld failing(static_cast<int>(rank), 1024);  // nothing may communicate
    StepProgram program;
    program.name = "train_step";
    program.traced = std::make_shared<ir::Graph>(global);
    for (const ir::Node& n : program.traced->nodes) {
      if (n.kind == ir::NodeKind::kParameter) program.wrt.push_back(n.value);
    }
    auto optimizer = std::make_shared<optim::Momentum>(program.wrt, 0.1, 0.9);
    program.wrt_like = like_parameters(*optimizer);
    program.update = [&](const std::vector<Tensor>& grads) { optimizer->apply(grads); };
    CompileOptions options{
        .world_size = 1024, .rank = rank, .mode = SEMI_AUTO_PARALLEL, .device_num = 1024};
    options.step_parallel.device_num = 1024;
    const CompiledPlan plan = compile(program, options);
    const ir::Graph& g = plan.graph;
    EXPECT_EQ(g.name, fmt::format("train_step_rank{}", rank));
    // This rank's batch: 2 of the 2048 rows (dataset_strategy "data_parallel"), redistributed to
    // the 32 x 32 blocks of x the hand-set strategy asks for; w1 in 32 row blocks.
    EXPECT_EQ(g.meta({g.inputs[0], 0}).shape, Shape({2, 256}));
    bool block_matmul = false;
    for (const ir::Node& n : g.nodes) {
      block_matmul = block_matmul || (n.is_op() && n.op->name == "MatMul" &&
                                      g.meta(n.inputs[0]).shape == Shape({64, 8}) &&
                                      g.meta(n.inputs[1]).shape == Shape({8, 512}));
    }
    EXPECT_TRUE(block_matmul) << ir::dump_text(g).substr(0, 4000);
    ASSERT_EQ(plan.parameter_slices.size(), 2u);
    EXPECT_EQ(plan.parameter_slices[0].layout.slice_shape(Shape({256, 512})), Shape({8, 512}));
    // The split reduction's partial sums are all-reduced over the 32 ranks of this rank's row.
    std::set<size_t> groups;
    int all_reduces = 0;
    for (const ir::Node& n : g.nodes) {
      if (!n.is_op() || n.op->name != "AllReduce") continue;
      ++all_reduces;
      const auto& ranks = n.attrs.get<std::vector<int64_t>>("rank_list");
      groups.insert(ranks.size());
      EXPECT_TRUE(std::find(ranks.begin(), ranks.end(), rank) != ranks.end())
          << "rank " << rank << " in an AllReduce over " << ir::attr_to_string(ranks);
    }
    EXPECT_GT(all_reduces, 0);
    EXPECT_TRUE(groups.count(32)) << "no AllReduce over a row of 32 ranks";
  }
}

}  // namespace
}  // namespace cleave::runtime

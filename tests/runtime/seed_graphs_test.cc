// The compiled graphs of the seeds' training steps, stage by stage, against golden dumps
// (tests/runtime/golden/seeds/<seed>/): seed 000's LeNet placed on 8 workers (train and eval
// steps), seed 001's ResNet-50 in DATA_PARALLEL on 2 ranks, seed 002's manual data parallel
// network on 8 ranks, seed 003's sharding propagation on 8 ranks.
//
// Each seed is checked twice:
//   - compiled only (runtime::compile), rank by rank on this thread, in a world whose every
//     communication fails (testing::FailingWorld): compiling is pure (NOTE [Compile pipeline] in
//     cleave/runtime/pipeline.h), so every stage but the load step's execute dump comes out;
//   - compiled, loaded and run for one step on thread ranks over the inproc backend: every stage,
//     the executable graph with its memory plan included.
// The goldens were captured before the compile pipeline became a list of passes; the two must
// give the same graphs. Dumps are compared by folder and stage name, not by the NN_ of their file
// name (a stage's position in the pipeline), and graph names are normalised ("train_step_12" ->
// "train_step": the counter behind them is process-wide). CLEAVE_UPDATE_GOLDEN=1 rewrites the
// goldens from the run instead of comparing; CLEAVE_UPDATE_GOLDEN=new adds the stages without one
// (NOTE [Golden files] in testing/golden.h).
#include <gtest/gtest.h>

#include <filesystem>
#include <regex>
#include <set>

#include "cleave/cleave.h"
#include "cleave/core/random.h"
#include "cleave/ir/parse.h"
#include "common/lenet.h"
#include "common/manual_parallel.h"
#include "common/resnet.h"
#include "common/sharding_propagation.h"
#include "testing/env.h"
#include "testing/failing_world.h"
#include "testing/golden.h"
#include "testing/ranks.h"

namespace cleave {
namespace {

namespace fs = std::filesystem;

std::string normalise(const std::string& text) {
  static const std::regex counter("(train_step|forward)_[0-9]+");
  return std::regex_replace(text, counter, "$1");
}

struct Dump {
  std::string file;  // normalised path relative to the dump folder
  std::string text;  // normalised
};

// Every .ir file under `dir`, keyed by "<folder>/<stage>": its normalised relative path without
// the NN_ of its file name.
std::map<std::string, Dump> dumps(const fs::path& dir) {
  static const std::regex number("/[0-9]+_([^/]+)$");
  std::map<std::string, Dump> out;
  if (!fs::exists(dir)) return out;
  for (const auto& e : fs::recursive_directory_iterator(dir)) {
    if (!e.is_regular_file() || e.path().extension() != ".ir") continue;
    const std::string file = normalise(fs::relative(e.path(), dir).string());
    out[std::regex_replace(file, number, "/$1")] = {file, normalise(testing::read_text(e.path()))};
  }
  return out;
}

bool is_execute(const std::string& stage) { return stage.ends_with("/execute.ir"); }

// Compares the dumps under `out` with the goldens of `seed` whose folder starts with `folders`;
// `loaded` says whether the steps were loaded (an execute dump is expected) or only compiled.
void compare_with_golden(const std::string& seed, const fs::path& out, bool loaded,
                         const std::string& folders = "") {
  const std::map<std::string, Dump> got = dumps(out);
  const fs::path golden = fs::path(CLEAVE_TESTS_DIR) / "runtime/golden/seeds" / seed;
  const testing::GoldenUpdate update = testing::golden_update();
  if (update != testing::GoldenUpdate::kCompare && loaded) {
    // kNew adds the stages that have no golden yet and leaves the others as they are; kAll
    // replaces the seed's goldens (a stage the pipeline no longer writes goes).
    const std::map<std::string, Dump> have = dumps(golden);
    if (update == testing::GoldenUpdate::kAll) fs::remove_all(golden);
    for (const auto& [stage, dump] : got) {
      if (update == testing::GoldenUpdate::kNew && have.count(stage) != 0) continue;
      testing::write_text(golden / dump.file, dump.text);
    }
    return;
  }
  const std::map<std::string, Dump> want = dumps(golden);
  ASSERT_FALSE(want.empty()) << "no goldens in " << golden
                             << " (CLEAVE_UPDATE_GOLDEN=1 writes them)";
  std::set<std::string> stages;
  for (const auto& [stage, dump] : got) stages.insert(stage);
  for (const auto& [stage, dump] : want) {
    if (stage.rfind(folders, 0) == 0) stages.insert(stage);
  }
  int compared = 0;
  for (const std::string& stage : stages) {
    auto g = got.find(stage), w = want.find(stage);
    if (g == got.end()) {
      if (!loaded && is_execute(stage)) continue;  // written by the load step
      ADD_FAILURE() << seed << ": " << stage << " was not written";
    } else if (w == want.end()) {
      ADD_FAILURE() << seed << ": " << stage << " (" << g->second.file << ") has no golden";
    } else {
      EXPECT_EQ(g->second.text, w->second.text)
          << seed << ": " << stage << " (" << g->second.file << ") differs from its golden ("
          << w->second.file << ")";
      ++compared;
    }
  }
  EXPECT_GT(compared, 0);
}

// How a seed's steps are made on each rank: compiled only, or compiled, loaded and run.
enum class Use { kCompile, kRun };

void train_step(optim::TrainOneStep& step, const Tensor& data, const Tensor& label, Use use) {
  if (use == Use::kRun) {
    step(data, label);
    return;
  }
  const runtime::StepProgram program =
      step.program({data.shape(), data.dtype()}, {label.shape(), label.dtype()});
  runtime::compile(program, runtime::compile_options(program));
}

void forward_step(optim::Forward& forward, const Tensor& x, Use use) {
  if (use == Use::kRun) {
    forward(x);
    return;
  }
  const runtime::StepProgram program = forward.program({x.shape(), x.dtype()});
  runtime::compile(program, runtime::compile_options(program));
}

// Makes every rank's steps with save_graphs into a fresh folder and compares the dumps with the
// seed's goldens: compiled rank by rank in a failing world, or run on thread ranks.
void check(const std::string& seed, int world, const runtime::AutoParallelContext& parallel,
           Use use, const std::function<void(int rank, Use use)>& steps) {
  const fs::path out = fs::temp_directory_path() /
                       ("cleave_seed_graphs_" + seed + (use == Use::kRun ? "_run" : "_compile"));
  fs::remove_all(out);
  runtime::set_context(
      {.mode = runtime::GRAPH_MODE, .save_graphs = 1, .save_graphs_path = out.string()});
  runtime::set_auto_parallel_context(parallel);
  if (use == Use::kRun) {
    testing::run_thread_job(world, [&](int rank) { steps(rank, use); });
  } else {
    for (int rank = 0; rank < world; ++rank) {
      testing::FailingWorld failing(rank, world);
      steps(rank, use);
    }
  }
  runtime::reset_auto_parallel_context();
  runtime::set_context({});
  compare_with_golden(seed, out, use == Use::kRun);
  fs::remove_all(out);
}

Tensor zeros(Shape shape, DType dtype = DType::kFloat32) { return Tensor::full(shape, 0.0, dtype); }

template <typename Net, typename... Args>
std::shared_ptr<Net> make_net(uint64_t seed, Args&&... args) {
  const SeededScope seeded(seed);  // NOTE [Global generator]
  return std::make_shared<Net>(std::forward<Args>(args)...);
}

// Seed 000: LeNet with fc1, fc2, fc3, conv1, conv2 placed on workers 0..4 of 8; a training step
// (Momentum) and an evaluation forward, batch 32 of 1x32x32.
void lenet_place(int rank, Use use) {
  auto net = make_net<examples::LeNet>(1);
  net->fc1->place("MS_WORKER", 0);
  net->fc2->place("MS_WORKER", 1);
  net->fc3->place("MS_WORKER", 2);
  net->conv1->place("MS_WORKER", 3);
  net->conv2->place("MS_WORKER", 4);
  auto with_loss = std::make_shared<nn::WithLossCell>(net, examples::get_loss());
  optim::TrainOneStep step(with_loss, examples::get_optimizer(*net));
  train_step(step, zeros({32, 1, 32, 32}), zeros({32}, DType::kInt32), use);
  net->set_train(false);
  optim::Forward forward(net);
  forward_step(forward, zeros({32, 1, 32, 32}), use);
}

// Seed 001: ResNet-50 (32x32 CIFAR-10 images) in DATA_PARALLEL with mirror_mean on 2 ranks,
// batch 2 per rank, the seed's SoftmaxCrossEntropyExpand and Momentum(0.01, 0.9).
const runtime::AutoParallelContext kSeed001{.parallel_mode = runtime::DATA_PARALLEL,
                                            .mirror_mean = true};
void resnet50_data_parallel(int rank, Use use) {
  std::shared_ptr<examples::ResNet> net;
  {
    const SeededScope seeded(1);  // NOTE [Global generator]
    net = examples::resnet50(2, 10);
  }
  auto loss = std::make_shared<examples::SoftmaxCrossEntropyExpand>(/*sparse=*/true);
  auto with_loss = std::make_shared<nn::WithLossCell>(net, loss);
  optim::TrainOneStep step(with_loss,
                           std::make_shared<optim::Momentum>(net->trainable_params(), 0.01, 0.9));
  train_step(step, zeros({2, 3, 32, 32}), zeros({2}, DType::kInt32), use);
}

// Seed 002: each of 8 ranks slices its rows of the global batch of 32 inside construct and
// all-reduces the loss; DATA_PARALLEL with gradients_mean averages the gradients; SGD(0.01).
const runtime::AutoParallelContext kSeed002{.parallel_mode = runtime::DATA_PARALLEL,
                                            .gradients_mean = true};
void manual_parallel(int rank, Use use) {
  auto net = make_net<examples::Network>(1, rank, 8);
  auto with_loss = std::make_shared<examples::NetWithReduceLoss>(net, rank, 8);
  optim::TrainOneStep step(with_loss, std::make_shared<optim::SGD>(net->trainable_params(), 1e-2));
  train_step(step, zeros({32, 1, 28, 28}), zeros({32}, DType::kInt32), use);
}

// Seed 003: AUTO_PARALLEL with sharding propagation from matmul's ((2, 4), (4, 1)) on 8 ranks,
// 2 rows per rank (dataset_strategy "data_parallel"), MSELoss, Momentum(0.2, 0.1).
const runtime::AutoParallelContext kSeed003{.parallel_mode = runtime::AUTO_PARALLEL,
                                            .search_mode = "sharding_propagation",
                                            .dataset_strategy = std::string("data_parallel")};
void sharding_propagation(int rank, Use use) {
  auto net = make_net<examples::Net>(2, 32, 16, 16);
  auto with_loss = std::make_shared<nn::WithLossCell>(net, std::make_shared<nn::MSELoss>());
  optim::TrainOneStep step(with_loss,
                           std::make_shared<optim::Momentum>(net->trainable_params(), 0.2, 0.1));
  train_step(step, zeros({2, 32}), zeros({2, 16}), use);
}

TEST(SeedGraphs, LeNetPlacedOnEightWorkersCompilesWithoutCommunicating) {
  check("000_lenet_place", 8, {}, Use::kCompile, lenet_place);
}
TEST(SeedGraphs, LeNetPlacedOnEightWorkersRuns) {
  // The cut edges over the world group, not shared-memory mailboxes: a mailbox's channel
  // attribute is set when the step is loaded and would differ between the two checks.
  testing::ScopedEnv no_mailboxes("CLEAVE_RPC_SHM", "0");
  check("000_lenet_place", 8, {}, Use::kRun, lenet_place);
}

TEST(SeedGraphs, ResNet50DataParallelCompilesWithoutCommunicating) {
  check("001_resnet50_data_parallel", 2, kSeed001, Use::kCompile, resnet50_data_parallel);
}
TEST(SeedGraphs, ResNet50DataParallelRuns) {
  check("001_resnet50_data_parallel", 2, kSeed001, Use::kRun, resnet50_data_parallel);
}

TEST(SeedGraphs, ManualDataParallelOnEightRanksCompilesWithoutCommunicating) {
  check("002_manual_parallel", 8, kSeed002, Use::kCompile, manual_parallel);
}
TEST(SeedGraphs, ManualDataParallelOnEightRanksRuns) {
  check("002_manual_parallel", 8, kSeed002, Use::kRun, manual_parallel);
}

TEST(SeedGraphs, ShardingPropagationOnEightRanksCompilesWithoutCommunicating) {
  check("003_sharding_propagation", 8, kSeed003, Use::kCompile, sharding_propagation);
}
TEST(SeedGraphs, ShardingPropagationOnEightRanksRuns) {
  check("003_sharding_propagation", 8, kSeed003, Use::kRun, sharding_propagation);
}

// ---- the pipeline from text ----
//
// Each seed's traced forward, read back from its golden 01_trace dump (ir::parse_text), compiled
// by the whole pipeline (runtime::compile with StepProgram::traced) in a failing world: every pass
// reads the text's graph and every stage it dumps equals the golden of that stage. The parameters
// are the text's (zeros); the optimizer is the seed's, made over them.

struct TextStep {
  std::shared_ptr<optim::Optimizer> optimizer;
  runtime::StepProgram program;
};

// `trainable`: the names of the parameters the optimizer updates, in its order.
TextStep step_from_text(
    const ir::Graph& traced, const std::vector<std::string>& trainable,
    const std::function<std::shared_ptr<optim::Optimizer>(const std::vector<Tensor>&)>&
        make_optimizer) {
  TextStep step;
  runtime::StepProgram& p = step.program;
  p.name = "train_step";
  p.traced = std::make_shared<ir::Graph>(std::move(traced));
  std::map<std::string, Tensor> by_name;
  for (const ir::Node& n : p.traced->nodes) {
    if (n.kind == ir::NodeKind::kParameter) {
      p.parameters.emplace_back(n.name, n.value);
      by_name[n.name] = n.value;
    }
  }
  for (const std::string& name : trainable) p.wrt.push_back(by_name.at(name));
  step.optimizer = make_optimizer(p.wrt);
  p.wrt_like.resize(p.wrt.size());
  for (const auto& [name, t] : step.optimizer->state()) {
    const size_t dot = name.rfind('.');
    const size_t i = dot == std::string::npos ? p.wrt.size() : std::stoul(name.substr(dot + 1));
    if (i < p.wrt.size()) p.wrt_like[i].push_back(t);
  }
  optim::Optimizer* optimizer = step.optimizer.get();
  p.update = [optimizer](const std::vector<Tensor>& grads) {
    ir::ScopeGuard scope("optimizer", optimizer->name());
    optimizer->apply(grads);
  };
  return step;
}

std::vector<std::string> trainable_names(const nn::Cell& net_with_loss) {
  std::vector<std::string> names;
  for (const auto& [name, t] : net_with_loss.parameters_and_names()) {
    if (t.requires_grad()) names.push_back(name);
  }
  return names;
}

// Compiles `seed`'s golden trace for `ranks` of `world` and compares every stage of train_step.
void check_from_text(
    const std::string& seed, int world, const std::vector<int>& ranks,
    runtime::CompileOptions options, const std::vector<std::string>& trainable,
    const std::function<std::shared_ptr<optim::Optimizer>(const std::vector<Tensor>&)>&
        make_optimizer) {
  const fs::path golden = fs::path(CLEAVE_TESTS_DIR) / "runtime/golden/seeds" / seed;
  const fs::path out = fs::temp_directory_path() / ("cleave_seed_graphs_" + seed + "_text");
  fs::remove_all(out);
  options.world_size = world;
  options.save_graphs = 1;
  options.save_graphs_path = out.string();
  for (int rank : ranks) {
    testing::FailingWorld failing(rank, world);
    TextStep step = step_from_text(ir::parse_file(golden / "train_step/01_trace.ir").graph,
                                   trainable, make_optimizer);
    options.rank = rank;
    runtime::compile(step.program, options);
  }
  compare_with_golden(seed, out, /*loaded=*/false, "train_step");
  fs::remove_all(out);
}

TEST(SeedGraphs, LeNetPlacedCompilesFromItsTraceText) {
  auto net = make_net<examples::LeNet>(1);
  const nn::WithLossCell with_loss(net, examples::get_loss());
  check_from_text("000_lenet_place", 8, {0, 1, 2, 3, 4, 5, 6, 7}, {}, trainable_names(with_loss),
                  [](const std::vector<Tensor>& params) {
                    return std::make_shared<optim::Momentum>(params, 0.01, 0.9);
                  });
}

TEST(SeedGraphs, ResNet50DataParallelCompilesFromItsTraceText) {
  std::shared_ptr<examples::ResNet> net = examples::resnet50(2, 10);
  const nn::WithLossCell with_loss(
      net, std::make_shared<examples::SoftmaxCrossEntropyExpand>(/*sparse=*/true));
  check_from_text("001_resnet50_data_parallel", 2, {0, 1},
                  {.mode = runtime::DATA_PARALLEL, .device_num = 2, .gradients_mean = true},
                  trainable_names(with_loss), [](const std::vector<Tensor>& params) {
                    return std::make_shared<optim::Momentum>(params, 0.01, 0.9);
                  });
}

TEST(SeedGraphs, ManualDataParallelCompilesFromItsTraceText) {
  auto net = make_net<examples::Network>(1, 0, 8);
  const examples::NetWithReduceLoss with_loss(net, 0, 8);
  check_from_text("002_manual_parallel", 8, {0},
                  {.mode = runtime::DATA_PARALLEL, .device_num = 8, .gradients_mean = true},
                  trainable_names(with_loss), [](const std::vector<Tensor>& params) {
                    return std::make_shared<optim::SGD>(params, 1e-2);
                  });
}

TEST(SeedGraphs, ShardingPropagationCompilesFromItsTraceText) {
  auto net = make_net<examples::Net>(2, 32, 16, 16);
  const nn::WithLossCell with_loss(net, std::make_shared<nn::MSELoss>());
  runtime::CompileOptions options{
      .mode = runtime::AUTO_PARALLEL, .search_mode = "sharding_propagation", .device_num = 8};
  options.step_parallel.device_num = 8;
  check_from_text("003_sharding_propagation", 8, {0, 1, 2, 3, 4, 5, 6, 7}, options,
                  trainable_names(with_loss), [](const std::vector<Tensor>& params) {
                    return std::make_shared<optim::Momentum>(params, 0.2, 0.1);
                  });
}

// The failing world is what the compile tests rely on: it really fails.
TEST(SeedGraphs, TheFailingWorldFailsOnAnyCommunication) {
  testing::FailingWorld failing(0, 2);
  Tensor x = Tensor::full({4}, 1.0);
  EXPECT_THROW(comm::get_group(comm::kWorldGroup)->all_reduce(x), Error);
  EXPECT_THROW(comm::get_group(comm::kWorldGroup)->broadcast(x, 0), Error);
  EXPECT_EQ(comm::world_size(), 2);
}

}  // namespace
}  // namespace cleave

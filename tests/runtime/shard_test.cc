// shard in PYNATIVE_MODE (NOTE [Sharded blocks in PyNative] in cleave/runtime/shard.h) on thread
// ranks: seed 004's Net with block1 sharded (Cell::shard), Net2 (the functional shard on a Cell
// and Cell::shard), and dense_relu (the functional shard on a function, with std::nullopt
// entries) give one process's outputs, gradients and training; the compiled graphs are cached;
// the seed's mistakes and the settings shard needs give clear words.
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>

#include "cleave/cleave.h"
#include "cleave/core/random.h"
#include "common/shard_function.h"
#include "testing/ranks.h"

namespace cleave {
namespace {

using examples::ShardNet;

// Activations, gradients and trained parameters: |a - b| <= 1e-5 * max|b| over the tensor. Their
// elements are sums that the sharded block adds in another order (partial sums over ranks); an
// element near zero is a cancellation whose float32 rounding is relative to its terms, not to
// itself (a parameter near zero after 20 steps was 1.5e-8 from one process's in a build without
// FMA, against 1e-8 when each element was held to 1e-5 of itself).
void expect_close_to_scale(const Tensor& a, const Tensor& b, const std::string& what) {
  ASSERT_EQ(a.shape(), b.shape()) << what;
  const std::vector<double> pa = a.to_double_vector(), pb = b.to_double_vector();
  double scale = 0;
  for (double v : pb) scale = std::max(scale, std::abs(v));
  ASSERT_GT(scale, 1e-4) << what << ": the reference is (nearly) zero, the check would be empty";
  for (size_t i = 0; i < pa.size(); ++i) {
    const double tol = 1e-5 * scale;
    ASSERT_LE(std::abs(pa[i] - pb[i]), tol)
        << what << " element " << i << ": " << pa[i] << " vs " << pb[i];
  }
}

// The contexts a sharded block runs under; restored afterwards.
class ShardContext {
 public:
  explicit ShardContext(const std::string& dataset = "full_batch") {
    runtime::set_context({.mode = runtime::PYNATIVE_MODE});
    runtime::set_auto_parallel_context({.parallel_mode = runtime::AUTO_PARALLEL,
                                        .search_mode = "sharding_propagation",
                                        .dataset_strategy = dataset});
  }
  ~ShardContext() {
    runtime::reset_auto_parallel_context();
    runtime::set_context({});
  }
};

std::shared_ptr<ShardNet> make_net(int64_t width) {
  const SeededScope seeded(7);  // NOTE [Global generator]
  return std::make_shared<ShardNet>(width, "he_uniform");
}

struct Training {
  std::vector<Tensor> first_grads;  // every parameter's gradient of the first loss
  std::vector<double> losses;
  std::vector<Tensor> parameters;
  Tensor output;  // of the first forward, before training
};

// The seed's training: MSE against a fixed target, Momentum(0.01, 0.9), `steps` steps.
Training train(const std::shared_ptr<nn::Cell>& net, const Tensor& x, const Tensor& target,
               int steps) {
  Training t;
  t.output = (*net)(x).detach();
  auto with_loss = std::make_shared<nn::WithLossCell>(net, std::make_shared<nn::MSELoss>());
  t.first_grads = autodiff::grad((*with_loss)(x, target), net->get_parameters());
  optim::TrainOneStep step(with_loss,
                           std::make_shared<optim::Momentum>(net->trainable_params(), 0.01, 0.9));
  for (int s = 0; s < steps; ++s) t.losses.push_back(step(x, target).item());
  for (const Tensor& p : net->get_parameters()) t.parameters.push_back(p.detach().clone());
  return t;
}

void expect_same_training(const Training& got, const Training& want, const std::string& what) {
  expect_close_to_scale(got.output, want.output, what + ": output");
  ASSERT_EQ(got.first_grads.size(), want.first_grads.size());
  for (size_t i = 0; i < want.first_grads.size(); ++i) {
    expect_close_to_scale(got.first_grads[i], want.first_grads[i],
                          what + ": first gradient of parameter " + std::to_string(i));
  }
  ASSERT_EQ(got.losses.size(), want.losses.size());
  for (size_t s = 0; s < want.losses.size(); ++s) {
    EXPECT_LE(std::abs(got.losses[s] - want.losses[s]),
              1e-5 * std::max(std::abs(want.losses[s]), 1e-3))
        << what << " step " << s << ": " << got.losses[s] << " vs " << want.losses[s];
  }
  ASSERT_EQ(got.parameters.size(), want.parameters.size());
  for (size_t i = 0; i < want.parameters.size(); ++i) {
    expect_close_to_scale(got.parameters[i], want.parameters[i],
                          what + ": parameter " + std::to_string(i));
  }
}

// One process, every block eager.
Training train_single(int64_t width, const Tensor& x, const Tensor& y, int steps) {
  runtime::set_context({.mode = runtime::PYNATIVE_MODE});
  Training t = train(make_net(width), x, y, steps);
  runtime::set_context({});
  return t;
}

void seed_net1_trains_as_one_process(int n, int64_t width,
                                     const std::function<void(ShardNet&)>& shard_it = nullptr) {
  const int steps = 20, batch = 32;
  set_seed(11);
  const Tensor x = Tensor::uniform({batch, width});
  const Tensor y = Tensor::uniform({batch, width});
  const Training single = train_single(width, x, y, steps);

  ShardContext context;
  std::vector<Training> runs(static_cast<size_t>(n));
  std::vector<size_t> compiled(static_cast<size_t>(n));
  testing::run_thread_job(n, [&](int rank) {
    std::shared_ptr<ShardNet> net = make_net(width);
    if (shard_it) {
      shard_it(*net);
    } else {
      examples::shard_net1(*net, n);
    }
    runs[static_cast<size_t>(rank)] = train(net, x, y, steps);
    compiled[static_cast<size_t>(rank)] = net->block1->sharded_block()->num_compiled();
  });
  for (int rank = 0; rank < n; ++rank) {
    expect_same_training(runs[static_cast<size_t>(rank)], single,
                         "rank " + std::to_string(rank) + " of " + std::to_string(n));
    // 22 calls in two signatures (the first output and gradient in inference mode, a new Cell's;
    // the 20 steps in training mode), each one forward and one backward program: later calls of
    // a signature compile nothing.
    EXPECT_EQ(compiled[static_cast<size_t>(rank)], 4u) << "rank " << rank;
  }
}

TEST(ShardPyNative, SeedNet1OnTwoRanksTrainsAsOneProcess) {
  seed_net1_trains_as_one_process(2, 32);
}
TEST(ShardPyNative, SeedNet1OnThreeRanksTrainsAsOneProcess) {
  seed_net1_trains_as_one_process(3, 48);
}
TEST(ShardPyNative, SeedNet1OnFourRanksTrainsAsOneProcess) {
  seed_net1_trains_as_one_process(4, 32);
}
TEST(ShardPyNative, SeedNet1WithNamedLayoutsOutOfDeviceOrderTrainsAsOneProcess) {
  // MindSpore 2.x's form of Net1 on (2, 2) named (dp, mp): the input's columns and dense2's
  // weight rows over (mp, dp), the minor axis major.
  const ir::Layout layout({2, 2}, {"dp", "mp"});
  seed_net1_trains_as_one_process(4, 32, [&](ShardNet& net) {
    net.block1->shard(
        {layout("None", {"mp", "dp"})},
        {.parameter_plan = {{"self.block1.dense2.weight", layout({"mp", "dp"}, "None")}}});
  });
}
TEST(ShardPyNative, SeedNet1OnEightRanksTrainsAsOneProcess) {
  seed_net1_trains_as_one_process(8, 32);
}

// The eager gradients of `fn`'s output summed, with respect to `inputs`.
std::vector<Tensor> grads_of_sum(const Tensor& out, const std::vector<Tensor>& inputs) {
  return autodiff::grad(ops::reduce_sum(out), inputs);
}

// The seed's function example in PYNATIVE_MODE: x (32, 128), weight (128, 10) and bias drawn with
// `seed`, and the eager output and gradients of its sum that a sharded run must give.
struct DenseReluCase {
  Tensor x, w, b, want;
  std::vector<Tensor> want_grads;
};
DenseReluCase dense_relu_case(uint64_t seed) {
  set_seed(seed);
  DenseReluCase c{
      .x = Tensor::uniform({32, 128}), .w = Tensor::uniform({128, 10}), .b = Tensor::uniform({10})};
  runtime::set_context({.mode = runtime::PYNATIVE_MODE});
  std::vector<Tensor> leaves{c.x.clone(), c.w.clone(), c.b.clone()};
  for (Tensor& t : leaves) t.set_requires_grad(true);
  c.want = examples::dense_relu(leaves[0], leaves[1], leaves[2]);
  c.want_grads = grads_of_sum(c.want, leaves);
  return c;
}

TEST(ShardPyNative, DenseReluFunctionWithDerivedInputsEqualsOneProcess) {
  // The seed's function example: x (32, 128) split (4, 2) (here (n / 2, 2)), weight and bias
  // derived (std::nullopt); the output and the gradients of x, weight and bias equal eager ones.
  const DenseReluCase c = dense_relu_case(5);
  const Tensor &x = c.x, &w = c.w, &b = c.b, &want = c.want;
  const std::vector<Tensor>& want_grads = c.want_grads;

  for (const int n : {2, 4, 8}) {
    ShardContext context;
    testing::run_thread_job(n, [&](int rank) {
      ShardedFunction f =
          shard(examples::dense_relu,
                {std::vector<int64_t>{std::max(n / 2, 1), 2}, std::nullopt, std::nullopt}, {},
                "dense_relu");
      std::vector<Tensor> in{x.clone(), w.clone(), b.clone()};
      for (Tensor& t : in) t.set_requires_grad(true);
      const Tensor result = f(in[0], in[1], in[2]);
      EXPECT_EQ(result.shape(), Shape({32, 10}));
      expect_close_to_scale(result, want, "dense_relu output, rank " + std::to_string(rank));
      const std::vector<Tensor> got = grads_of_sum(result, in);
      for (size_t i = 0; i < got.size(); ++i) {
        expect_close_to_scale(
            got[i], want_grads[i],
            "dense_relu gradient " + std::to_string(i) + ", rank " + std::to_string(rank));
      }
      // A second call of the same signature compiles nothing.
      EXPECT_EQ(f.num_compiled(), 2u);
      (void)f(in[0], in[1], in[2]);
      EXPECT_EQ(f.num_compiled(), 2u);
    });
  }
}

TEST(ShardPyNative, EveryLevelSearchesTheBlockAndEqualsOneProcess) {
  // level 0, 1, 2: the dynamic programming under that objective gives the operators without a
  // strategy theirs (NOTE [Search objectives]); whatever it picks, the block computes what eager
  // code does. The step_parallel_begin dump of the forward says which search ran.
  const DenseReluCase c = dense_relu_case(6);
  const Tensor &x = c.x, &w = c.w, &b = c.b, &want = c.want;
  const std::vector<Tensor>& want_grads = c.want_grads;
  for (const int level : {0, 1, 2}) {
    ShardContext context;
    ::testing::internal::CaptureStderr();
    testing::run_thread_job(4, [&](int rank) {
      ShardedFunction f =
          shard(examples::dense_relu, {std::vector<int64_t>{2, 2}, std::nullopt, std::nullopt},
                {.level = level}, "dense_relu");
      std::vector<Tensor> in{x.clone(), w.clone(), b.clone()};
      for (Tensor& t : in) t.set_requires_grad(true);
      const Tensor result = f(in[0], in[1], in[2]);
      const std::string what = fmt::format("level {}, rank {}", level, rank);
      expect_close_to_scale(result, want, "output, " + what);
      const std::vector<Tensor> got = grads_of_sum(result, in);
      for (size_t i = 0; i < got.size(); ++i) {
        expect_close_to_scale(got[i], want_grads[i], fmt::format("gradient {}, {}", i, what));
      }
    });
    // Rank 0 printed the dynamic programming's summary line, not propagation's.
    const std::string said = ::testing::internal::GetCapturedStderr();
    EXPECT_NE(said.find("dynamic programming: "), std::string::npos) << "level " << level << said;
  }
}

TEST(ShardPyNative, SeedNet2FunctionalShardOnACellTrainsAsOneProcess) {
  const int n = 4, steps = 5, width = 32;
  set_seed(13);
  const Tensor x = Tensor::uniform({32, width});
  const Tensor y = Tensor::uniform({32, width});
  const Training single = train_single(width, x, y, steps);
  ShardContext context;
  std::vector<Training> runs(n);
  testing::run_thread_job(n, [&](int rank) {
    std::shared_ptr<examples::Net2> net;
    {
      const SeededScope seeded(7);  // NOTE [Global generator]
      net = std::make_shared<examples::Net2>(width, n, "he_uniform");
    }
    runs[static_cast<size_t>(rank)] = train(net, x, y, steps);
    // As in seed_net1_trains_as_one_process: two modes, a forward and a backward each.
    EXPECT_EQ(net->block1_graph.num_compiled(), 4u);
    EXPECT_EQ(net->block2->sharded_block()->num_compiled(), 4u);
  });
  for (int rank = 0; rank < n; ++rank) {
    expect_same_training(runs[static_cast<size_t>(rank)], single,
                         "Net2 rank " + std::to_string(rank));
  }
}

TEST(ShardPyNative, DataParallelInputsAndOutputsAreDimZeroSlices) {
  // dataset_strategy "data_parallel": each rank passes its rows and gets its rows of the output;
  // a parameter inside the block gets the gradient of the whole batch.
  const int n = 2, width = 32;
  set_seed(17);
  const Tensor x = Tensor::uniform({16, width});
  runtime::set_context({.mode = runtime::PYNATIVE_MODE});
  std::shared_ptr<ShardNet> reference = make_net(width);
  const Tensor want = (*reference->block1)(x);
  const Tensor want_grad =
      autodiff::grad(ops::reduce_sum(want), {reference->block1->dense2->weight})[0];
  ShardContext context("data_parallel");
  testing::run_thread_job(n, [&](int rank) {
    std::shared_ptr<ShardNet> net = make_net(width);
    examples::shard_net1(*net, n);
    const Tensor mine = x.narrow_rows(rank * 8, 8).clone();
    const Tensor out = (*net->block1)(mine);
    expect_close_to_scale(out, want.narrow_rows(rank * 8, 8), "data_parallel output rows");
    const Tensor g = autodiff::grad(ops::reduce_sum(out), {net->block1->dense2->weight})[0];
    expect_close_to_scale(g, want_grad, "data_parallel parameter gradient");
  });
}

TEST(ShardPyNative, PerInputDatasetStrategiesAreEachRanksSlices) {
  // dataset_strategy ((2, 1), (1, 1), (1,)) on 4 ranks: x's rows in 2 slices (rank r holds rows
  // of slice r / 2), the weight and bias whole; the outputs whole; each rank gets its slice of
  // x's gradient and the whole gradients of the weight and bias.
  const DenseReluCase c = dense_relu_case(9);
  const Tensor &x = c.x, &w = c.w, &b = c.b, &want = c.want;
  const std::vector<Tensor>& want_grads = c.want_grads;
  ShardContext context;
  runtime::set_auto_parallel_context({.parallel_mode = runtime::AUTO_PARALLEL,
                                      .search_mode = "sharding_propagation",
                                      .dataset_strategy = ir::Strategy{{2, 1}, {1, 1}, {1}}});
  testing::run_thread_job(4, [&](int rank) {
    ShardedFunction f =
        shard(examples::dense_relu, {std::vector<int64_t>{2, 2}, std::nullopt, std::nullopt}, {},
              "dense_relu");
    std::vector<Tensor> in{x.narrow_rows((rank / 2) * 16, 16).clone(), w.clone(), b.clone()};
    for (Tensor& t : in) t.set_requires_grad(true);
    const Tensor result = f(in[0], in[1], in[2]);
    const std::string where = "rank " + std::to_string(rank);
    expect_close_to_scale(result, want, "whole output, " + where);
    const std::vector<Tensor> got = grads_of_sum(result, in);
    expect_close_to_scale(got[0], want_grads[0].narrow_rows((rank / 2) * 16, 16),
                          "x gradient rows, " + where);
    expect_close_to_scale(got[1], want_grads[1], "weight gradient, " + where);
    expect_close_to_scale(got[2], want_grads[2], "bias gradient, " + where);
  });
  // A count that is not the block's inputs says so.
  runtime::set_auto_parallel_context({.parallel_mode = runtime::AUTO_PARALLEL,
                                      .search_mode = "sharding_propagation",
                                      .dataset_strategy = ir::Strategy{{2, 1}}});
  std::string said;
  testing::run_thread_job(2, [&](int rank) {
    ShardedFunction f =
        shard(examples::dense_relu, {std::vector<int64_t>{2, 1}, std::nullopt, std::nullopt}, {},
              "dense_relu");
    try {
      (void)f(x, w, b);
    } catch (const Error& e) {
      if (rank == 0) said = e.what();
    }
  });
  EXPECT_NE(said.find("shard 'dense_relu': dataset_strategy ((2, 1)) has 1 entry but the block "
                      "has 3 inputs"),
            std::string::npos)
      << said;
}

// ---- the settings shard needs and the seed's mistakes ----

std::string error_of(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

TEST(ShardPyNative, OutsidePyNativeModeIsAnErrorNamingTheMode) {
  runtime::set_auto_parallel_context(
      {.parallel_mode = runtime::AUTO_PARALLEL, .search_mode = "sharding_propagation"});
  const std::string said = error_of([] {
    (void)shard(examples::dense_relu, {std::nullopt, std::nullopt, std::nullopt});
  });
  runtime::reset_auto_parallel_context();
  EXPECT_NE(said.find("GRAPH_MODE"), std::string::npos) << said;
  EXPECT_NE(said.find("PYNATIVE_MODE"), std::string::npos) << said;
}

TEST(ShardPyNative, WithoutAutoParallelShardingPropagationIsAnErrorNamingTheSetting) {
  runtime::set_context({.mode = runtime::PYNATIVE_MODE});
  std::string said = error_of([] { (void)make_net(32)->block1->shard({std::nullopt}); });
  EXPECT_NE(said.find("parallel_mode is STAND_ALONE"), std::string::npos) << said;
  EXPECT_NE(said.find("AUTO_PARALLEL"), std::string::npos) << said;
  runtime::set_auto_parallel_context(
      {.parallel_mode = runtime::AUTO_PARALLEL, .search_mode = "dynamic_programming"});
  said = error_of([] { (void)make_net(32)->block1->shard({std::nullopt}); });
  EXPECT_NE(said.find("search_mode \"dynamic_programming\""), std::string::npos) << said;
  EXPECT_NE(said.find("\"sharding_propagation\""), std::string::npos) << said;
  runtime::reset_auto_parallel_context();
  runtime::set_context({});
}

TEST(ShardPyNative, DevicesAndBadLevelsSaySo) {
  ShardContext context;
  auto block = make_net(32)->block1;
  std::string said = error_of([&] { block->shard({std::nullopt}, {.device = "GPU"}); });
  EXPECT_NE(said.find("the GPU backend does not run sharded blocks yet"), std::string::npos)
      << said;
  said = error_of([&] { block->shard({std::nullopt}, {.device = "TPU"}); });
  EXPECT_NE(said.find("device is \"TPU\"; expected \"CPU\""), std::string::npos) << said;
  said = error_of([&] { block->shard({std::nullopt}, {.level = 3}); });
  EXPECT_NE(said.find("level is 3; expected 0 (maximise computation over communication), 1 "
                      "(minimise memory) or 2 (maximise speed)"),
            std::string::npos)
      << said;
  EXPECT_EQ(error_of([&] { block->shard({std::nullopt}, {.level = 1}); }), "(no error)");
  // CPU is accepted.
  EXPECT_EQ(error_of([&] { block->shard({std::nullopt}, {.device = "CPU"}); }), "(no error)");
}

TEST(ShardPyNative, NestedShardIsAnError) {
  ShardContext context;
  ShardedFunction inner = shard([](const Tensor& x) { return ops::relu(x); },
                                {std::vector<int64_t>{1, 1}}, {}, "inner");
  ShardedFunction outer = shard([&](const Tensor& x) { return inner(ops::neg(x)); },
                                {std::vector<int64_t>{1, 1}}, {}, "outer");
  const std::string said = error_of([&] { (void)outer(Tensor::uniform({4, 4})); });
  EXPECT_NE(said.find("shard 'inner': called inside the sharded block 'outer'; nested shard is "
                      "not supported"),
            std::string::npos)
      << said;
}

TEST(ShardPyNative, WrongParameterNameWarnsOnceAndRuns) {
  ShardContext context;
  std::shared_ptr<ShardNet> net = make_net(32);
  ::testing::internal::CaptureStderr();
  net->block1->shard({std::nullopt}, {.parameter_plan = {{"self.block1.dense3.weight", {1, 1}},
                                                         {"self.block1.dense2.weight", {1, 1}}}});
  const Tensor x = Tensor::uniform({4, 32});
  const Tensor a = (*net)(x);
  const Tensor b = (*net)(x);
  const std::string said = ::testing::internal::GetCapturedStderr();
  const std::string warning =
      "cleave: warning: shard 'BasicBlock': parameter_plan names 'self.block1.dense3.weight', "
      "which is not a parameter of the block; the entry is skipped (the block's parameters: "
      "block1.dense1.weight, block1.dense1.bias, block1.dense2.weight, block1.dense2.bias)";
  EXPECT_NE(said.find(warning), std::string::npos) << said;
  EXPECT_EQ(said.find(warning), said.rfind(warning)) << "warned more than once: " << said;
  EXPECT_EQ(said.find("dense2.weight'"), std::string::npos) << said;  // the right name is taken
  expect_close_to_scale(a, b, "the run continues");
}

TEST(ShardPyNative, ParameterWithALayoutAlreadyWarnsAndIsSkipped) {
  // dense2's MatMul has a shard() strategy: its weight's layout comes from it.
  ShardContext context;
  std::shared_ptr<ShardNet> net = make_net(32);
  net->block1->dense2->matmul.shard({{1, 1}, {1, 1}});
  ::testing::internal::CaptureStderr();
  net->block1->shard({std::nullopt}, {.parameter_plan = {{"dense2.weight", {1, 1}}}});
  (void)(*net)(Tensor::uniform({4, 32}));
  const std::string said = ::testing::internal::GetCapturedStderr();
  EXPECT_NE(said.find("parameter_plan entry 'dense2.weight' is skipped: the parameter already "
                      "has a layout"),
            std::string::npos)
      << said;
}

TEST(ShardPyNative, InStrategyOfTheWrongRankIsAnError) {
  ShardContext context;
  std::shared_ptr<ShardNet> net = make_net(32);
  net->block1->shard({std::vector<int64_t>{1, 1, 1}});
  const std::string said = error_of([&] { (void)(*net)(Tensor::uniform({4, 32})); });
  EXPECT_NE(said.find("shard 'BasicBlock': in_strategy[0] is (1, 1, 1) (3 dimensions), but input "
                      "0 is Float32(4, 32)"),
            std::string::npos)
      << said;
}

TEST(ShardPyNative, SaveGraphsDumpsTheBlocksStrategies) {
  // save_graphs writes the block's programs like a step's: step_parallel_end of each rank shows
  // the in_strategy and parameter_plan Casts with their strategies and the inserted communication.
  const std::filesystem::path dir =
      std::filesystem::temp_directory_path() / ("cleave_shard_dump_" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  ShardContext context;
  runtime::set_context(
      {.mode = runtime::PYNATIVE_MODE, .save_graphs = 1, .save_graphs_path = dir.string()});
  const Tensor x = Tensor::uniform({4, 32});  // drawn here: the global generator is one thread's
  testing::run_thread_job(2, [&](int rank) {
    std::shared_ptr<ShardNet> net = make_net(32);
    examples::shard_net1(*net, 2);
    (void)(*net)(x);
  });
  runtime::set_context({.mode = runtime::PYNATIVE_MODE});
  std::string end_rank1;
  for (const auto& entry : std::filesystem::recursive_directory_iterator(dir)) {
    const std::string path = entry.path().string();
    if (path.find("shard_BasicBlock_forward") != std::string::npos &&
        path.find("step_parallel_end") != std::string::npos && path.ends_with(".ir") &&
        path.find("rank1") != std::string::npos) {
      std::ifstream in(entry.path());
      end_rank1.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
    }
  }
  std::filesystem::remove_all(dir);
  ASSERT_FALSE(end_rank1.empty()) << "no step_parallel_end dump of rank 1 under " << dir;
  EXPECT_NE(end_rank1.find("in_strategy: ((1, 2))"), std::string::npos) << end_rank1;
  EXPECT_NE(end_rank1.find("in_strategy: ((2, 1))"), std::string::npos) << end_rank1;
  EXPECT_NE(end_rank1.find("AllReduce"), std::string::npos) << end_rank1;
}

// The rank-1 step_parallel_end dump of program `program` under `dir` ("" when there is none).
std::string rank1_end_dump(const std::filesystem::path& dir, const std::string& program) {
  for (const auto& entry : std::filesystem::recursive_directory_iterator(dir)) {
    const std::string path = entry.path().string();
    if (path.find(program) != std::string::npos &&
        path.find("step_parallel_end") != std::string::npos && path.ends_with(".ir") &&
        path.find("rank1") != std::string::npos) {
      std::ifstream in(entry.path());
      return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
    }
  }
  return {};
}

TEST(ShardPyNative, OutStrategyAndNamedLayoutsEqualOneProcess) {
  // matmul(x, w) with x's reduction dimension split 4 ways: the block's output is a pending sum.
  // out_strategy ((4, 1)) splits its rows over those ranks: a ReduceScatter where the MatMul
  // ends (the dump shows it), and the output and gradients stay those of eager code. The same
  // with named layouts: x over ("dp", "mp") of a (2, 2) device matrix, in both axis orders.
  set_seed(8);
  const Tensor x = Tensor::uniform({16, 32});
  const Tensor w = Tensor::uniform({32, 12});
  runtime::set_context({.mode = runtime::PYNATIVE_MODE});
  std::vector<Tensor> leaves{x.clone(), w.clone()};
  for (Tensor& t : leaves) t.set_requires_grad(true);
  const Tensor want = ops::matmul(leaves[0], leaves[1]);
  const std::vector<Tensor> want_grads = grads_of_sum(want, leaves);
  const ir::Layout layout({2, 2}, {"dp", "mp"});
  const std::vector<std::pair<std::string, std::pair<InStrategy, ShardOptions>>> cases{
      {"splits", {{std::vector<int64_t>{1, 4}, std::nullopt}, {.out_strategy = {{{4, 1}}}}}},
      {"named",
       {{layout("None", {"dp", "mp"}), std::nullopt},
        {.out_strategy = {{layout({"dp", "mp"}, "None")}}}}},
      {"named out of order",
       {{layout("None", {"mp", "dp"}), std::nullopt},
        {.out_strategy = {{layout({"mp", "dp"}, "None")}}}}},
  };
  for (const auto& named_case : cases) {
    // References, not a structured binding: clang 14 cannot capture bindings in a lambda.
    const std::string& what = named_case.first;
    const auto& spec = named_case.second;
    const std::filesystem::path dir =
        std::filesystem::temp_directory_path() / ("cleave_shard_out_" + std::to_string(::getpid()));
    std::filesystem::remove_all(dir);
    ShardContext context;
    runtime::set_context(
        {.mode = runtime::PYNATIVE_MODE, .save_graphs = 1, .save_graphs_path = dir.string()});
    testing::run_thread_job(4, [&](int rank) {
      ShardedFunction f = shard([](const Tensor& a, const Tensor& b) { return ops::matmul(a, b); },
                                spec.first, spec.second, "matmul_block");
      std::vector<Tensor> in{x.clone(), w.clone()};
      for (Tensor& t : in) t.set_requires_grad(true);
      const Tensor result = f(in[0], in[1]);
      const std::string where = fmt::format("{}, rank {}", what, rank);
      expect_close_to_scale(result, want, "output, " + where);
      const std::vector<Tensor> got = grads_of_sum(result, in);
      for (size_t i = 0; i < got.size(); ++i) {
        expect_close_to_scale(got[i], want_grads[i], fmt::format("gradient {}, {}", i, where));
      }
    });
    runtime::set_context({.mode = runtime::PYNATIVE_MODE});
    const std::string dump = rank1_end_dump(dir, "shard_matmul_block_forward");
    std::filesystem::remove_all(dir);
    ASSERT_FALSE(dump.empty()) << what;
    EXPECT_NE(dump.find("ReduceScatter("), std::string::npos) << what << "\n" << dump;
    EXPECT_EQ(dump.find("AllReduce("), std::string::npos) << what << "\n" << dump;
  }
}

TEST(ShardPyNative, TrainingModeIsPartOfTheSignature) {
  // A Cell traces differently in training and inference mode (Dropout, BatchNorm): each mode gets
  // its own program, and going back to a mode compiles nothing.
  ShardContext context;
  std::shared_ptr<ShardNet> net = make_net(32);
  net->block1->shard({std::vector<int64_t>{1, 1}});
  const Tensor x = Tensor::uniform({4, 32});
  NoGradGuard no_grad;
  net->set_train(false);
  (void)(*net)(x);
  EXPECT_EQ(net->block1->sharded_block()->num_compiled(), 1u);
  net->set_train(true);
  (void)(*net)(x);
  EXPECT_EQ(net->block1->sharded_block()->num_compiled(), 2u);
  net->set_train(false);
  (void)(*net)(x);
  (void)(*net)(Tensor::uniform({4, 32}));
  EXPECT_EQ(net->block1->sharded_block()->num_compiled(), 2u);
  // Another shape is another signature.
  (void)(*net)(Tensor::uniform({8, 32}));
  EXPECT_EQ(net->block1->sharded_block()->num_compiled(), 3u);
}

TEST(ShardPyNative, NothingToPropagateFromIsAnErrorSayingWhatToGive) {
  ShardContext context;
  std::shared_ptr<ShardNet> net = make_net(32);
  net->block1->shard({std::nullopt});
  const std::string said = error_of([&] { (void)(*net)(Tensor::uniform({4, 32})); });
  EXPECT_NE(said.find("shard 'BasicBlock': compiling the block failed: "), std::string::npos)
      << said;
  EXPECT_NE(said.find("needs at least one operator with a strategy"), std::string::npos) << said;
  EXPECT_NE(said.find("every in_strategy entry of the block is std::nullopt and parameter_plan "
                      "sets no layout: give at least one input a strategy"),
            std::string::npos)
      << said;
}

TEST(ShardPyNative, ParameterPlanOfTheWrongRankIsAnError) {
  ShardContext context;
  std::shared_ptr<ShardNet> net = make_net(32);
  net->block1->shard({std::vector<int64_t>{1, 1}},
                     {.parameter_plan = {{"block1.dense2.bias", {1, 1}}}});
  const std::string said = error_of([&] { (void)(*net)(Tensor::uniform({4, 32})); });
  EXPECT_EQ(said.rfind("shard 'BasicBlock': parameter_plan gives 'dense2.bias' the strategy (1, 1) "
                       "(2 dimensions), but the parameter is Float32(32); give one number per "
                       "dimension",
                       0),
            0u)
      << said;
}

}  // namespace
}  // namespace cleave

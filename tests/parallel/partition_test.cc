// Distributed graph partition (cleave/parallel/partition.h): the per-rank graphs of traced steps
// read from text (tests/parallel/golden/*_step.ir) and cut with no thread or process, compared
// with golden per-rank texts; placement rules and errors; and, on thread ranks
// (parallel/placed_lenet.h), placed training equals one process and micro-batching equals the
// unpipelined step. The 8-rank runs are in partition_slow_test.cc.
#include "cleave/parallel/partition.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <regex>

#include "cleave/cleave.h"
#include "cleave/comm/group_registry.h"
#include "cleave/ir/dump.h"
#include "cleave/ir/parse.h"
#include "cleave/runtime/core_binding.h"
#include "cleave/runtime/rpc.h"
#include "parallel/placed_lenet.h"
#include "testing/env.h"
#include "testing/golden.h"
#include "testing/gradcheck.h"
#include "testing/graph_mode.h"
#include "testing/models.h"
#include "testing/ranks.h"

namespace cleave {
namespace {

using testing::expect_same;
using testing::lenet_batches;
using testing::place_like_the_seed;
using testing::rel_diff;
using testing::train_lenet;
using testing::train_seed_placement_with;
using testing::TrainingRun;

// ---- partition() on traced steps read from text: golden per-rank texts, rules, errors ----
//
// The steps under tests/parallel/golden were traced once as TrainOneStep traces them (one SGD
// step, forward, graph autodiff and the update, nodes numbered as traced):
//   two_stage_step.ir       Dense(4, 3), ReLU, Dense(3, 2), MSELoss, SGD(0.1), batch 2; fc1 on
//                           worker 1 (its backward ops carry the placement, as autodiff copies it)
//   two_stage_fc2_step.ir   the same with fc2 on worker 1
//   shared_weight_step.ir   SharedWeight below: one (6, 6) weight used by a MatMul on worker 1 and
//                           one on worker 0, MSELoss, SGD(0.1), batch 5

namespace fs = std::filesystem;

const fs::path kGolden = fs::path(CLEAVE_TESTS_DIR) / "parallel/golden";

// The traced step of tests/parallel/golden/<file>, with the placement of its placed ops
// ("role: MS_WORKER, rank: 1") replaced by `placement` when one is given.
ir::Graph read_step(const std::string& file, const std::string& placement = "") {
  std::string text = testing::read_text(kGolden / file);
  if (!placement.empty()) {
    text = std::regex_replace(text, std::regex("role: MS_WORKER, rank: 1"), placement);
  }
  return ir::parse_text(text, file).graph;
}

// Partition options for `world` workers; the per-step part of `g` starts at its first node in the
// optimizer's scope.
parallel::PartitionOptions options(const ir::Graph& g, int world, int micro = 1) {
  parallel::PartitionOptions o;
  o.world_size = world;
  o.micro_batches = micro;
  for (size_t i = 0; i < g.nodes.size() && o.step_begin < 0; ++i) {
    if (g.nodes[i].scope.rfind("Default/optimizer", 0) == 0) o.step_begin = static_cast<int>(i);
  }
  o.send_op = &runtime::rpc_send_op();
  o.recv_op = &runtime::rpc_recv_op();
  return o;
}

// Each rank's graph against tests/parallel/golden/<name>_rank<r>.ir (NOTE [Golden files] in
// testing/golden.h); each verifies.
void expect_golden(const parallel::Partition& p, const std::string& name) {
  for (size_t r = 0; r < p.ranks.size(); ++r) {
    EXPECT_TRUE(testing::matches_golden(ir::dump_text(p.ranks[r]),
                                        kGolden / fmt::format("{}_rank{}.ir", name, r)))
        << "rank " << r;
    ir::verify(p.ranks[r]);
  }
}

// One line per cut edge: "<producer>: <src> -> <dst>, tag <tag>, <bytes> bytes".
std::string cuts_text(const parallel::Partition& p) {
  std::string out;
  for (const parallel::CutEdge& c : p.cuts) {
    out += fmt::format("{}: {} -> {}, tag {}, {} bytes\n", c.value, c.src_rank, c.dst_rank, c.tag,
                       c.bytes);
  }
  return out;
}

// One line per rank: the instance names of the ops of `g` it runs, in the order of `g`.
std::string ops_by_rank(const ir::Graph& g, const parallel::Partition& p) {
  std::string out;
  for (size_t r = 0; r < p.ranks.size(); ++r) {
    out += fmt::format("{}:", r);
    for (size_t i = 0; i < g.nodes.size(); ++i) {
      if (g.nodes[i].is_op() && p.node_rank[i] == static_cast<int>(r)) {
        out += " " + g.nodes[i].name;
      }
    }
    out += "\n";
  }
  return out;
}

TEST(Partition, GoldenPerRankGraphs) {
  const ir::Graph g = read_step("two_stage_step.ir");
  const parallel::Partition p = parallel::partition(g, options(g, 2));
  // fc1 and its gradient and update on 1; relu, fc2, the loss and the rest on 0.
  expect_golden(p, "two_stage");
  // Forward: fc1's output 1 -> 0; backward: its gradient 0 -> 1. Tags are distinct.
  EXPECT_EQ(cuts_text(p),
            "fc1.biasadd: 1 -> 0, tag 0, 24 bytes\n"
            "relu.relu.grad.relugrad: 0 -> 1, tag 1, 24 bytes\n");
}

TEST(Partition, GoldenMicroBatchedGraphs) {
  // Two micro-batches of one row: rank 0 reads data_0, label_0, data_1, label_1; the loss is
  // averaged where it is computed (rank 0), the gradients of fc2 on rank 1.
  const ir::Graph g = read_step("two_stage_fc2_step.ir");
  expect_golden(parallel::partition(g, options(g, 2, 2)), "two_stage_mb2");
}

TEST(Partition, UnlabelledOpsRunOnWorkerZero) {
  // fc2 on worker 2 of 3: its forward, backward and updates there; every unplaced op on worker 0;
  // worker 1 owns nothing and sends or receives nothing.
  const ir::Graph g = read_step("two_stage_fc2_step.ir", "role: MS_WORKER, rank: 2");
  const parallel::Partition p = parallel::partition(g, options(g, 3));
  EXPECT_EQ(ops_by_rank(g, p),
            "0: fc1.matmul fc1.biasadd relu.relu _loss_fn.mse _loss_fn.reducemean "
            "_loss_fn.reducemean.grad.reshape _loss_fn.reducemean.grad.mul "
            "_loss_fn.reducemean.grad.broadcastto _loss_fn.mse.grad.neg _loss_fn.mse.grad.add "
            "_loss_fn.mse.grad.mul _loss_fn.mse.grad.mul relu.relu.grad.relugrad "
            "fc1.biasadd.grad.reducesum fc1.matmul.grad.matmul optimizer.sgd optimizer.sgd_1\n"
            "1:\n"
            "2: fc2.matmul fc2.biasadd fc2.biasadd.grad.reducesum fc2.matmul.grad.matmul "
            "fc2.matmul.grad.matmul optimizer.sgd_2 optimizer.sgd_3\n");
  EXPECT_EQ(p.ranks[1].num_ops(), 0);
}

TEST(Partition, ParameterUsedOnTwoRanksIsSentByItsFirstUser) {
  // w's first user (the MatMul on worker 1) owns it: worker 1 sends w to worker 0 at the start of
  // the step, receives worker 0's gradient contribution, sums and applies the update.
  const ir::Graph g = read_step("shared_weight_step.ir");
  const parallel::Partition p = parallel::partition(g, options(g, 2));
  expect_golden(p, "shared_weight");
  // w and the MatMul's output forward; the other MatMul's contribution to w's gradient (6 x 6)
  // and the gradient of the first MatMul's output (5 x 6) back.
  EXPECT_EQ(cuts_text(p),
            "_backbone.w: 1 -> 0, tag 0, 144 bytes\n"
            "_backbone.matmul: 1 -> 0, tag 1, 120 bytes\n"
            "_backbone.matmul_1.grad.matmul: 0 -> 1, tag 2, 144 bytes\n"
            "_backbone.relu.grad.relugrad: 0 -> 1, tag 3, 120 bytes\n");
}

TEST(Partition, RejectsABadRoleOrRank) {
  const ir::Graph g = read_step("two_stage_fc2_step.ir", "role: MS_WORKER, rank: 3");
  EXPECT_ERROR(parallel::partition(g, options(g, 3)),
               "is placed on MS_WORKER rank 3; expected a rank in [0, 3)", "fc2-Dense");
  const ir::Graph sched = read_step("two_stage_fc2_step.ir", "role: MS_SCHED, rank: 0");
  EXPECT_ERROR(parallel::partition(sched, options(sched, 3)), "is placed on role 'MS_SCHED'",
               "only workers run graph ops");
  EXPECT_ERROR(parallel::partition(g, options(g, 3, 0)), "micro_batches is 0");
  nn::Dense dense(4, 3);
  EXPECT_ERROR(dense.place("MS_SCHED", 0), "role is 'MS_SCHED'", "only workers run graph ops");
}

// ---- training on thread ranks equals one process ----

TEST(Partition, SeedPlacementTrainsLikeOneProcess) {
  const auto batches = lenet_batches(100, 16);
  const TrainingRun single = train_lenet(1, {}, batches);
  const TrainingRun placed = train_lenet(5, place_like_the_seed, batches);
  expect_same(placed, single, 1e-5);
  // Every cut edge of the seed carries a whole op output: both of its ends are bound to the
  // mailbox slot, none is copied (NOTE [Zero-copy cut edges] in cleave/runtime/executor.h).
  EXPECT_EQ(placed.sends, 14);
  EXPECT_EQ(placed.zero_copy_buffers, 2 * placed.sends);
  // Which of (data, label) each rank's part reads (NOTE [Workers that read no batch] in
  // src/train/model.cc): the loss on rank 0 reads the label, conv1 on rank 3 the data.
  EXPECT_EQ(single.inputs_read[0], (std::vector<bool>{true, true}));
  const std::vector<std::vector<bool>> expected = {
      {false, true}, {false, false}, {false, false}, {true, false}, {false, false}};
  EXPECT_EQ(placed.inputs_read, expected);
}

TEST(Partition, CutEdgesOverTheGroupTransport) {
  // The same run with shared memory off (CLEAVE_RPC_SHM=0): RpcSend/RpcRecv over Gloo, with
  // receives posted at the start of each run.
  const auto batches = lenet_batches(10, 16);
  const TrainingRun single = train_lenet(1, {}, batches);
  const TrainingRun placed = train_seed_placement_with("CLEAVE_RPC_SHM", "0", batches, 2);
  expect_same(placed, single, 1e-4);
  EXPECT_EQ(placed.zero_copy_buffers, 0);
}

TEST(Partition, CopiedMessagesTrainAlike) {
  // CLEAVE_RPC_ZERO_COPY=0: the shared-memory mailboxes with a copy on each side of every edge.
  const auto batches = lenet_batches(10, 16);
  const TrainingRun single = train_lenet(1, {}, batches);
  const TrainingRun copied = train_seed_placement_with("CLEAVE_RPC_ZERO_COPY", "0", batches, 2);
  expect_same(copied, single, 1e-4);
  EXPECT_EQ(copied.zero_copy_buffers, 0);
  EXPECT_GT(copied.sends, 0);
  // How long a wait polls (NOTE [Waiting for a message]): 0 (sleep at once) trains alike; a value
  // that is not a number of microseconds is an error naming the variable.
  testing::ScopedEnv spin("CLEAVE_RPC_SPIN_US", "0");
  const TrainingRun sleeping = train_lenet(5, place_like_the_seed, batches);
  expect_same(sleeping, single, 1e-5);
  spin.set("CLEAVE_RPC_SPIN_US", "20ms");
  EXPECT_ERROR(train_lenet(5, place_like_the_seed, batches), "CLEAVE_RPC_SPIN_US='20ms' is invalid",
               "expected microseconds from 0 to 1000000");
}

TEST(Partition, SplitCoresByLoad) {
  // Seed 000's measured loads (ms per run at M = 4) on 2 cores: the largest first, each onto the
  // least loaded core; idle workers stay unbound.
  EXPECT_EQ(runtime::split_cores({0.68, 0.10, 0.04, 1.45, 1.10, 0, 0, 0}, 2),
            (std::vector<int>{1, 0, 0, 0, 1, -1, -1, -1}));
  // Enough cores: each busy worker its own; equal loads keep rank order; one core takes all.
  EXPECT_EQ(runtime::split_cores({1, 1, 1, 0}, 4), (std::vector<int>{0, 1, 2, -1}));
  EXPECT_EQ(runtime::split_cores({2, 3, 1}, 1), (std::vector<int>{0, 0, 0}));
  EXPECT_EQ(runtime::split_cores({}, 2), (std::vector<int>{}));
  EXPECT_ERROR(runtime::split_cores({1}, 0), "split_cores: 0 cores");
}

TEST(Partition, SpmdWorkersTakeTheCoresInTurn) {
  using runtime::CoreBindingMode;
  using runtime::spmd_core;
  // NOTE [SPMD workers on few cores]: auto binds only when the workers outnumber the cores, then
  // local rank r to the (r % cores)-th allowed core (by value: cores 4 and 6 here).
  const std::vector<int> cpus = {4, 6};
  std::vector<int> cores;
  for (int r = 0; r < 5; ++r) cores.push_back(spmd_core(r, 5, cpus, CoreBindingMode::kAuto));
  EXPECT_EQ(cores, (std::vector<int>{4, 6, 4, 6, 4}));
  EXPECT_EQ(spmd_core(1, 2, cpus, CoreBindingMode::kAuto), -1);  // one worker per core
  EXPECT_EQ(spmd_core(1, 2, cpus, CoreBindingMode::kOn), 6);
  EXPECT_EQ(spmd_core(3, 4, cpus, CoreBindingMode::kOff), -1);
  EXPECT_EQ(spmd_core(0, 1, cpus, CoreBindingMode::kOn), -1);  // a lone worker
  EXPECT_EQ(spmd_core(0, 4, {}, CoreBindingMode::kOn), -1);
}

TEST(Partition, MicroBatchesEqualTheUnpipelinedStep) {
  const auto batches = lenet_batches(12, 16);
  const TrainingRun single = train_lenet(1, {}, batches);
  const TrainingRun pipelined = train_lenet(5, place_like_the_seed, batches, 4);
  expect_same(pipelined, single, 1e-4);
  // The micro-batches' slices of (data, label) count as the arguments they come from.
  const std::vector<std::vector<bool>> expected = {
      {false, true}, {false, false}, {false, false}, {true, false}, {false, false}};
  EXPECT_EQ(pipelined.inputs_read, expected);
  // Micro-batching without placement: gradient accumulation on one process.
  const TrainingRun accumulated = train_lenet(1, {}, batches, 4);
  expect_same(accumulated, single, 1e-4);
}

TEST(Partition, RanksThatOwnNothingFinish) {
  // Everything on ranks 0 and 1 of 4: ranks 2 and 3 run empty graphs every step.
  const auto batches = lenet_batches(5, 8);
  const TrainingRun single = train_lenet(1, {}, batches);
  const TrainingRun placed = train_lenet(
      4, [](testing::LeNet5& net) { net.conv1->place("MS_WORKER", 1); }, batches);
  expect_same(placed, single, 1e-5);
}

TEST(Partition, PingPongPlacementWithMicroBatches) {
  // Every layer on another rank, back and forth: many cut edges in both directions.
  const auto batches = lenet_batches(4, 12);
  const TrainingRun single = train_lenet(1, {}, batches);
  auto ping_pong = [](testing::LeNet5& net) {
    net.conv1->place("MS_WORKER", 2);
    net.conv2->place("MS_WORKER", 0);
    net.fc1->place("MS_WORKER", 2);
    net.fc2->place("MS_WORKER", 1);
    net.fc3->place("MS_WORKER", 2);
  };
  expect_same(train_lenet(3, ping_pong, batches, 3), single, 1e-4);
}

// ---- a parameter used on two ranks ----

class SharedWeight : public nn::Cell {
 public:
  SharedWeight() : Cell("SharedWeight") {
    w = register_parameter("w", nn::Normal(0.3)(Shape{6, 6}));
    first.place("MS_WORKER", 1);
    second.place("MS_WORKER", 0);
  }
  Tensor construct(const Tensor& x) override {
    const Tensor h = ops::relu(first.call1({x, w}));
    return second.call1({h, w});
  }
  Tensor w;
  ir::Primitive first{"MatMul"}, second{"MatMul"};
};

std::vector<double> train_shared(int world, std::vector<double>* weight) {
  testing::ModeGuard graph(runtime::GRAPH_MODE);
  runtime::rpc_send_op();
  std::vector<std::shared_ptr<SharedWeight>> nets;
  for (int r = 0; r < world; ++r) {
    set_seed(3);
    nets.push_back(std::make_shared<SharedWeight>());
  }
  set_seed(4);
  const Tensor x = Tensor::normal({5, 6}), y = Tensor::normal({5, 6});
  std::vector<double> losses;
  auto train = [&](int rank) {
    auto with_loss =
        std::make_shared<nn::WithLossCell>(nets[rank], std::make_shared<nn::MSELoss>());
    auto opt = std::make_shared<optim::SGD>(std::vector<Tensor>{nets[rank]->w}, 0.1);
    optim::TrainOneStep step(with_loss, opt);
    for (int i = 0; i < 6; ++i) {
      const Tensor loss = step(x, y);
      if (rank == 0) losses.push_back(loss.item());
    }
    if (rank == (world > 1 ? 1 : 0)) *weight = nets[rank]->w.to_double_vector();
  };
  if (world == 1) {
    train(0);
  } else {
    testing::run_thread_job(world, train, "gloo");
  }
  return losses;
}

TEST(Partition, ParameterUsedOnTwoRanksLivesWithItsFirstUser) {
  std::vector<double> w_single, w_placed;
  const std::vector<double> single = train_shared(1, &w_single);
  const std::vector<double> placed = train_shared(2, &w_placed);
  ASSERT_EQ(single.size(), placed.size());
  for (size_t i = 0; i < single.size(); ++i) EXPECT_LE(rel_diff(placed[i], single[i]), 1e-5) << i;
  EXPECT_LT(single.back(), single.front());
  // The first user (the MatMul on rank 1) owns w: rank 1 holds the updated weight.
  ASSERT_EQ(w_single.size(), w_placed.size());
  for (size_t k = 0; k < w_single.size(); ++k) EXPECT_LE(rel_diff(w_placed[k], w_single[k]), 1e-5);
}

TEST(Partition, MicroBatchesMustDivideTheBatch) {
  testing::ModeGuard graph(runtime::GRAPH_MODE);
  runtime::set_auto_parallel_context({.pipeline_micro_batches = 3});
  set_seed(5);
  auto net = std::make_shared<nn::Dense>(4, 2);
  auto with_loss = std::make_shared<nn::WithLossCell>(net, std::make_shared<nn::MSELoss>());
  auto opt = std::make_shared<optim::SGD>(net->trainable_params(), 0.1);
  optim::TrainOneStep step(with_loss, opt);
  EXPECT_ERROR(step(Tensor::zeros({4, 4}), Tensor::zeros({4, 2})),
               "data has shape (4, 4); with pipeline_micro_batches = 3");
  runtime::set_auto_parallel_context({});
  EXPECT_ERROR(runtime::set_auto_parallel_context({.pipeline_micro_batches = 0}),
               "pipeline_micro_batches is 0");
}

TEST(Partition, WorkersThatTracedDifferentStepsAreRefused) {
  testing::ModeGuard graph(runtime::GRAPH_MODE);
  runtime::rpc_send_op();
  std::vector<std::shared_ptr<testing::LeNet5>> nets;
  for (int r = 0; r < 2; ++r) {
    set_seed(1);
    nets.push_back(std::make_shared<testing::LeNet5>());
  }
  const auto batches = lenet_batches(1, 4);
  testing::run_thread_job(
      2,
      [&](int rank) {
        nets[rank]->fc3->place("MS_WORKER", rank);  // each worker places fc3 elsewhere
        auto with_loss = std::make_shared<nn::WithLossCell>(
            nets[rank], std::make_shared<nn::SoftmaxCrossEntropyWithLogits>(true, "mean"));
        auto opt = std::make_shared<optim::Momentum>(nets[rank]->trainable_params(), 0.01, 0.9);
        optim::TrainOneStep step(with_loss, opt);
        EXPECT_ERROR(step(batches[0].data, batches[0].label),
                     "the workers traced different training steps",
                     "every worker must run the same program");
      },
      "gloo");
}

TEST(Partition, PlacedNetworksNeedGraphMode) {
  testing::ModeGuard eager(runtime::PYNATIVE_MODE);
  set_seed(1);
  std::vector<std::shared_ptr<testing::LeNet5>> nets = {std::make_shared<testing::LeNet5>(),
                                                        std::make_shared<testing::LeNet5>()};
  const auto batches = lenet_batches(1, 4);
  testing::run_thread_job(
      2,
      [&](int rank) {
        nets[rank]->fc3->place("MS_WORKER", 1);
        auto with_loss = std::make_shared<nn::WithLossCell>(
            nets[rank], std::make_shared<nn::SoftmaxCrossEntropyWithLogits>(true, "mean"));
        auto opt = std::make_shared<optim::Momentum>(nets[rank]->trainable_params(), 0.01, 0.9);
        optim::TrainOneStep step(with_loss, opt);
        EXPECT_ERROR(step(batches[0].data, batches[0].label), "the context is PYNATIVE_MODE",
                     "distributed graph partition needs GRAPH_MODE");
        optim::Forward forward(nets[rank]);
        EXPECT_ERROR(forward(batches[0].data), "Forward: the network has cells placed");
      },
      "gloo");
}

TEST(Partition, WithoutAClusterPlaceHasNoEffect) {
  // World of one (no init): the placed net trains on this process exactly like an unplaced one.
  const auto batches = lenet_batches(3, 8);
  const TrainingRun plain = train_lenet(1, {}, batches);
  testing::ModeGuard graph(runtime::GRAPH_MODE);
  set_seed(1);
  auto net = std::make_shared<testing::LeNet5>();
  place_like_the_seed(*net);
  auto with_loss = std::make_shared<nn::WithLossCell>(
      net, std::make_shared<nn::SoftmaxCrossEntropyWithLogits>(true, "mean"));
  auto opt = std::make_shared<optim::Momentum>(net->trainable_params(), 0.01, 0.9);
  optim::TrainOneStep step(with_loss, opt);
  for (size_t i = 0; i < batches.size(); ++i) {
    EXPECT_EQ(step(batches[i].data, batches[i].label).item(), plain.losses[i]) << i;
  }
}

TEST(Partition, PlacedEvaluationReturnsTheOutputOnWorkerZero) {
  testing::ModeGuard graph(runtime::GRAPH_MODE);
  runtime::rpc_send_op();
  set_seed(2);
  const Tensor x = Tensor::normal({4, 1, 32, 32});
  std::vector<std::shared_ptr<testing::LeNet5>> nets;
  for (int r = 0; r < 6; ++r) {
    set_seed(1);
    nets.push_back(std::make_shared<testing::LeNet5>());
  }
  optim::Forward single(nets[5]);
  const std::vector<double> expected = single(x).to_double_vector();
  testing::run_thread_job(
      5,
      [&](int rank) {
        place_like_the_seed(*nets[rank]);
        optim::Forward forward(nets[rank]);
        const Tensor y = forward(x);
        if (rank != 0) {
          EXPECT_FALSE(y.defined());
          return;
        }
        const std::vector<double> got = y.to_double_vector();
        ASSERT_EQ(got.size(), expected.size());
        for (size_t k = 0; k < got.size(); ++k) EXPECT_LE(rel_diff(got[k], expected[k]), 1e-6);
      },
      "gloo");
}

}  // namespace
}  // namespace cleave

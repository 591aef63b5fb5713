// The step-parallel rewrite (SEMI_AUTO_PARALLEL): seed 003's forward read from text, planned for 8
// devices and materialized for one rank with no process (one line per op of the rank's graph),
// its errors; and training seed 003's network on 8 thread ranks equals one device (losses on every
// rank and the gathered parameters). Seed 000's and 002's networks with a strategy on every op
// train on 8 thread ranks in step_parallel_slow_test.cc.
#include "cleave/parallel/step_parallel.h"

#include <fmt/ranges.h>
#include <gtest/gtest.h>

#include <mutex>

#include "cleave/cleave.h"
#include "cleave/ir/parse.h"
#include "cleave/runtime/sharded_parameters.h"
#include "parallel/seed_net.h"
#include "testing/gradcheck.h"
#include "testing/ranks.h"

namespace cleave {
namespace {

TEST(SemiAutoParallel, SeedNetOnEightThreadRanksEqualsOneDevice) {
  testing::expect_seed_net_trains_as_one_device(
      8,
      [](testing::SeedNet& net) {
        net.matmul.shard({{2, 4}, {4, 1}});
      },
      "gloo");
}

TEST(SemiAutoParallel, AWeightSplitOverEveryRankIsUpdatedInTheBackwardAndEqualsOneDevice) {
  // matmul2's weight split 4 ways over 4 ranks: its gradient needs no reduction, so its update
  // runs right after the backward's last read of it, before matmul's backward (NOTE [Updates at
  // their gradients]); matmul's weight is replicated, its update waits for its mirror AllReduce.
  const std::vector<testing::TrainResult> runs = testing::expect_seed_net_trains_as_one_device(
      4,
      [](testing::SeedNet& net) {
        net.matmul2.shard({{1, 4}, {4, 1}});
      },
      "gloo");
  for (size_t r = 0; r < runs.size(); ++r) {
    EXPECT_EQ(runs[r].updates_in_backward, 1) << "rank " << r;
  }
}

// ---- the plan and each rank's graph, text in and text out, without any process ----

// Seed 003's forward traced with global shapes (SeedNet(32, 16, 16) on a batch of 16): matmul
// split ((2, 4), (4, 1)) for 8 devices; the ReLU and the second MatMul as the text gives them.
std::string seed_forward(const std::string& relu_strategy, const std::string& matmul2_strategy,
                         const std::string& matmul_strategy = "((2, 4), (4, 1))") {
  return fmt::format(R"(# IR entry: @seed
%para1_data: <Tensor[Float32], (16, 32)> : input
%para2_w: <Tensor[Float32], (32, 16)> : parameter
%para3_w2: <Tensor[Float32], (16, 16)> : parameter

subgraph @seed(%para1_data, %para2_w, %para3_w2) {{
  %4(out) = MatMul(%para1_data, %para2_w) {{instance name: network.matmul}} primitive_attrs: {{transpose_a: false, transpose_b: false}} {{in_strategy: {}}}
      : (<Tensor[Float32], (16, 32)>, <Tensor[Float32], (32, 16)>) -> (<Tensor[Float32], (16, 16)>)
      # scope: (Default/network-Net)
  %5(out) = ReLU(%4) {{instance name: network.relu}}{}
      : (<Tensor[Float32], (16, 16)>) -> (<Tensor[Float32], (16, 16)>)
      # scope: (Default/network-Net)
  %6(out) = MatMul(%5, %para3_w2) {{instance name: network.matmul2}} primitive_attrs: {{transpose_a: false, transpose_b: false}}{}
      : (<Tensor[Float32], (16, 16)>, <Tensor[Float32], (16, 16)>) -> (<Tensor[Float32], (16, 16)>)
      # scope: (Default/network-Net)
  return(%6)
}}
)",
                     matmul_strategy,
                     relu_strategy.empty() ? "" : " {in_strategy: " + relu_strategy + "}",
                     matmul2_strategy.empty() ? "" : " {in_strategy: " + matmul2_strategy + "}");
}

using testing::ops_text;

// The graph of `rank` of the text's forward planned for 8 devices.
std::string rank_ops(const std::string& text, int64_t rank) {
  ir::Graph g = ir::parse_text(text).graph;
  const parallel::ParallelPlan plan = parallel::plan_step_parallel(g, {.device_num = 8});
  return ops_text(parallel::materialize(g, plan, rank).graph);
}

TEST(StepParallelPlan, SeedThreeFiguresOnRankZeroWithoutACluster) {
  const std::string seed = seed_forward("((2, 4))", "((2, 4), (4, 1))");
  // Rank 0's rows of the data-parallel batch move to matmul's ((2, 4), ...) blocks (AlltoAll),
  // the split reduction is completed (AllReduce), the ReLU takes its column block (Slice), the
  // second MatMul reduces again, and the output, (8, 16) rows on [2, 4, 1]'s axis 0, is gathered
  // for the graph's result.
  EXPECT_EQ(rank_ops(seed, 0), R"(AlltoAll (2, 32) -> (8, 8) over (0, 1, 2, 3)
MatMul (8, 8) x (8, 16) -> (8, 16)
AllReduce (8, 16) -> (8, 16) over (0, 1, 2, 3)
Slice (8, 16) -> (8, 4)
ReLU (8, 4) -> (8, 4)
MatMul (8, 4) x (4, 16) -> (8, 16)
AllReduce (8, 16) -> (8, 16) over (0, 1, 2, 3)
AllGather (8, 16) -> (16, 16) over (0, 4)
)");
  // Rank 5 computes the same ops with its own groups.
  EXPECT_EQ(rank_ops(seed, 5), R"(AlltoAll (2, 32) -> (8, 8) over (4, 5, 6, 7)
MatMul (8, 8) x (8, 16) -> (8, 16)
AllReduce (8, 16) -> (8, 16) over (4, 5, 6, 7)
Slice (8, 16) -> (8, 4)
ReLU (8, 4) -> (8, 4)
MatMul (8, 4) x (4, 16) -> (8, 16)
AllReduce (8, 16) -> (8, 16) over (4, 5, 6, 7)
AllGather (8, 16) -> (16, 16) over (1, 5)
)");
}

TEST(StepParallelPlan, UnconfiguredOperatorsAreDataParallel) {
  // Without strategies the ReLU and the second MatMul split the batch over the 8 devices.
  EXPECT_EQ(rank_ops(seed_forward("", ""), 0), R"(AlltoAll (2, 32) -> (8, 8) over (0, 1, 2, 3)
MatMul (8, 8) x (8, 16) -> (8, 16)
AllReduce (8, 16) -> (8, 16) over (0, 1, 2, 3)
Slice (8, 16) -> (2, 16)
ReLU (2, 16) -> (2, 16)
MatMul (2, 16) x (16, 16) -> (2, 16)
AllGather (2, 16) -> (16, 16) over (0, 1, 2, 3, 4, 5, 6, 7)
)");
}

TEST(StepParallelPlan, InvalidStrategyIsAnErrorBeforeAnyCommunication) {
  ir::Graph g = ir::parse_text(seed_forward("", "", "((2, 4), (3, 1))")).graph;
  EXPECT_ERROR(
      parallel::plan_step_parallel(g, {.device_num = 8}),
      "MatMul 'network.matmul' (scope Default/network-Net): strategy ((2, 4), (3, 1)) for "
      "inputs of shapes (16, 32), (32, 16) on 8 devices is invalid: input 1 dim 0 is split "
      "3 ways but input 0 dim 1 is split 4 ways; they must match (the reduction "
      "dimension)");
  g = ir::parse_text(seed_forward("", "")).graph;
  EXPECT_ERROR(parallel::plan_step_parallel(
                   g, {.device_num = 6, .dataset = parallel::DatasetSplit::kFullBatch}),
               "on 6 devices is invalid",
               "it uses 8 devices (2 x 4), which does not divide device_num 6");
  EXPECT_ERROR(parallel::plan_step_parallel(g, {.device_num = 6}),
               "input 0 ('data') of global shape (16, 32): with dataset_strategy \"data_parallel\" "
               "its dim 0 is split over the 6 devices, but 16 is not divisible by 6");
}

}  // namespace
}  // namespace cleave

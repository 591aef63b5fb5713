// The parallel optimizer's plan (NOTE [Parallel optimizer] in
// cleave/parallel/parallel_optimizer.h): which parameters it splits, over which ranks, and that
// every rank's slice of L' is its part of its slice of L, in the order of its shard group.
#include "cleave/parallel/parallel_optimizer.h"

#include <gtest/gtest.h>

#include "testing/gradcheck.h"

namespace cleave::parallel {
namespace {

const OptimizerShardOptions kAll{.threshold_bytes = 0};

// For every rank: the slice of L' lies inside the slice of L, as part number (index in the shard
// group) of it along dimension 0; and the shard groups partition the replicas of each L slice.
void expect_parts_of_plan_slices(const Layout& plan, const OptimizerShard& shard,
                                 const Shape& global) {
  ASSERT_TRUE(shard.split());
  const Shape part = shard.layout.slice_shape(global);
  const Shape whole = plan.slice_shape(global);
  for (int64_t rank = 0; rank < plan.num_devices(); ++rank) {
    const std::vector<int64_t> ranks = optimizer_shard_ranks(shard, rank);
    ASSERT_EQ(whole[0], part[0] * static_cast<int64_t>(ranks.size()));
    const auto at = std::find(ranks.begin(), ranks.end(), rank);
    ASSERT_NE(at, ranks.end()) << "rank " << rank;
    const int64_t index = at - ranks.begin();
    const std::vector<int64_t> outer = plan.slice_offset(global, rank);
    const std::vector<int64_t> inner = shard.layout.slice_offset(global, rank);
    EXPECT_EQ(inner[0], outer[0] + index * part[0]) << "rank " << rank;
    for (size_t d = 1; d < inner.size(); ++d) EXPECT_EQ(inner[d], outer[d]) << "rank " << rank;
    for (int64_t other : ranks) {  // one group: the same slice of L, the same group
      EXPECT_EQ(plan.slice_offset(global, other), outer);
      EXPECT_EQ(optimizer_shard_ranks(shard, other), ranks);
    }
  }
}

TEST(ParallelOptimizerPlan, DataParallelSplitsDimensionZeroOverEveryRank) {
  const Layout plan = Layout::replicated({8}, 2);
  const OptimizerShard s = optimizer_shard(plan, Shape({32, 16}), DType::kFloat32, kAll);
  EXPECT_EQ(s.layout, Layout({8}, {{0}, {}}));
  EXPECT_EQ(s.shard_axes, std::vector<int>{0});
  EXPECT_EQ(optimizer_shard_ranks(s, 5), (std::vector<int64_t>{0, 1, 2, 3, 4, 5, 6, 7}));
  expect_parts_of_plan_slices(plan, s, Shape({32, 16}));
}

TEST(ParallelOptimizerPlan, ShardSizeTakesTheInnermostRanksCuttingAnAxis) {
  const Layout plan = Layout::replicated({8}, 2);
  const OptimizerShard s = optimizer_shard(plan, Shape({32, 16}), DType::kFloat32,
                                           {.threshold_bytes = 0, .shard_size = 2});
  EXPECT_EQ(s.layout, Layout({4, 2}, {{1}, {}}));
  EXPECT_EQ(optimizer_shard_ranks(s, 5), (std::vector<int64_t>{4, 5}));
  expect_parts_of_plan_slices(plan, s, Shape({32, 16}));
  // Two replica axes (a replicated parameter on [2, 4]), 2 of their 8 ranks.
  const Layout two = Layout::replicated({2, 4}, 1);
  const OptimizerShard t =
      optimizer_shard(two, Shape({16}), DType::kFloat32, {.threshold_bytes = 0, .shard_size = 2});
  EXPECT_EQ(t.layout, Layout({2, 2, 2}, {{2}}));
  EXPECT_EQ(optimizer_shard_ranks(t, 5), (std::vector<int64_t>{4, 5}));
  expect_parts_of_plan_slices(two, t, Shape({16}));
  // 4 of them: all of the inner axis.
  const OptimizerShard u =
      optimizer_shard(two, Shape({16}), DType::kFloat32, {.threshold_bytes = 0, .shard_size = 4});
  EXPECT_EQ(u.layout, Layout({2, 4}, {{1}}));
  expect_parts_of_plan_slices(two, u, Shape({16}));
}

TEST(ParallelOptimizerPlan, ShardedParametersSplitOverTheirMirrorGroup) {
  // dev [2, 4]: dimension 1 split over axis 1, replicas on axis 0.
  const Layout columns({2, 4}, {{}, {1}});
  const OptimizerShard s = optimizer_shard(columns, Shape({8, 16}), DType::kFloat32, kAll);
  EXPECT_EQ(s.layout, Layout({2, 4}, {{0}, {1}}));
  EXPECT_EQ(optimizer_shard_ranks(s, 5), (std::vector<int64_t>{1, 5}));
  expect_parts_of_plan_slices(columns, s, Shape({8, 16}));
  // Dimension 0 split over axis 1 already: the replica axis 0 goes after it (out of order).
  const Layout rows({2, 4}, {{1}, {}});
  const OptimizerShard r = optimizer_shard(rows, Shape({16, 4}), DType::kFloat32, kAll);
  EXPECT_EQ(r.layout, Layout({2, 4}, {{1, 0}, {}}));
  expect_parts_of_plan_slices(rows, r, Shape({16, 4}));
  // Seed 003's device matrix (2, 3) with replicas on the axis of 3.
  const Layout six({2, 3}, {{0}, {}});
  const OptimizerShard x = optimizer_shard(six, Shape({12, 5}), DType::kFloat32, kAll);
  EXPECT_EQ(x.layout, Layout({2, 3}, {{0, 1}, {}}));
  expect_parts_of_plan_slices(six, x, Shape({12, 5}));
}

TEST(ParallelOptimizerPlan, WhatIsNotSplitAndWhy) {
  const Layout plan = Layout::replicated({4}, 2);
  // Below the threshold: quietly replicated.
  const OptimizerShard small =
      optimizer_shard(plan, Shape({4, 4}), DType::kFloat32, {.threshold_bytes = 65});
  EXPECT_FALSE(small.split());
  EXPECT_EQ(small.not_split, "");
  EXPECT_EQ(small.layout, plan);
  EXPECT_TRUE(
      optimizer_shard(plan, Shape({4, 4}), DType::kFloat32, {.threshold_bytes = 64}).split());
  // No replicas: nothing to split over.
  const Layout full({4}, {{0}, {}});
  EXPECT_FALSE(optimizer_shard(full, Shape({8, 4}), DType::kFloat32, kAll).split());
  EXPECT_EQ(optimizer_shard(full, Shape({8, 4}), DType::kFloat32, kAll).not_split, "");
  // A first dimension the slices do not divide: reported.
  const OptimizerShard odd = optimizer_shard(plan, Shape({10, 4}), DType::kFloat32, kAll);
  EXPECT_FALSE(odd.split());
  EXPECT_EQ(odd.layout, plan);
  EXPECT_NE(odd.not_split.find("its first dimension 10 is not divisible by the 4 slices"),
            std::string::npos)
      << odd.not_split;
  EXPECT_NE(optimizer_shard(Layout::replicated({4}, 0), Shape(), DType::kFloat32, kAll)
                .not_split.find("scalar"),
            std::string::npos);
  // A shard size the group does not divide by: the whole group (as MindSpore).
  const OptimizerShard six =
      optimizer_shard(Layout::replicated({6}, 1), Shape({12}), DType::kFloat32,
                      {.threshold_bytes = 0, .shard_size = 4});
  EXPECT_EQ(six.layout, Layout({6}, {{0}}));
  // A partial layout or a shape the layout does not fit: errors.
  EXPECT_ERROR(optimizer_shard(Layout({4}, {{0}}), Shape({6}), DType::kFloat32, kAll),
               "does not lay out a parameter of shape (6)");
  EXPECT_ERROR(optimizer_shard(Layout({4}, {{}}, {0}), Shape({8}), DType::kFloat32, kAll),
               "it is partial");
}

}  // namespace
}  // namespace cleave::parallel

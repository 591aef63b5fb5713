// GroupTable (src/cluster/groups.h) alone, without cleave::init(): the world group under every
// name, created groups and the rank conversions, and every error of cleave::create_group,
// destroy_group and the group queries with its message.
#include "cluster/groups.h"

#include <gtest/gtest.h>

#include "testing/gradcheck.h"

namespace cleave::cluster {
namespace {

TEST(GroupTable, WorldGroupAnswersUnderEveryName) {
  for (int world_size : {1, 2, 3, 4, 8}) {
    const int rank = world_size - 1;
    const GroupTable table(rank, world_size);
    for (const char* world : {"world", "hccl_world_group", "nccl_world_group"}) {
      EXPECT_EQ(table.rank_in(world), rank);
      EXPECT_EQ(table.size_of(world), world_size);
      EXPECT_EQ(table.world_rank(world, 0), 0);
      EXPECT_EQ(table.group_rank(rank, world), rank);
    }
  }
}

TEST(GroupTable, CreatedGroupMapsGroupRanksToWorldRanks) {
  GroupTable table(2, 4);
  table.check_new("tail", {1, 2, 3});
  table.add("tail", {1, 2, 3});
  EXPECT_EQ(table.rank_in("tail"), 1);
  EXPECT_EQ(table.size_of("tail"), 3);
  EXPECT_EQ(table.world_rank("tail", 0), 1);
  EXPECT_EQ(table.world_rank("tail", 2), 3);
  EXPECT_EQ(table.group_rank(3, "tail"), 2);
  // A rank that is not a member still maps the group's ranks.
  GroupTable outside(0, 4);
  outside.add("tail", {1, 2, 3});
  EXPECT_EQ(outside.world_rank("tail", 1), 2);
  EXPECT_ERROR(outside.rank_in("tail"),
               "cleave::get_rank: this process (rank 0) is not a member of group 'tail' (world "
               "ranks [1, 2, 3])");
}

TEST(GroupTable, BadNewGroupsAreNamed) {
  GroupTable table(0, 4);
  table.add("taken", {0});
  EXPECT_ERROR(table.check_new("", {0}), "cleave::create_group: the group name must not be empty");
  EXPECT_ERROR(table.check_new("taken", {0}),
               "cleave::create_group: group 'taken' already exists; destroy_group it first or "
               "pick another name");
  EXPECT_ERROR(table.check_new("hccl_world_group", {0}), "group 'hccl_world_group' already exists");
  EXPECT_ERROR(table.check_new("none", {}), "cleave::create_group: group 'none' has no ranks");
  EXPECT_ERROR(table.check_new("big", {0, 4}),
               "cleave::create_group: group 'big' lists rank 4; expected ranks in 0..3 (world "
               "size 4)");
  EXPECT_ERROR(table.check_new("negative", {-1}), "group 'negative' lists rank -1");
  EXPECT_ERROR(table.check_new("twice", {1, 1}),
               "cleave::create_group: group 'twice' lists rank 1 twice");
  EXPECT_ERROR(table.check_new("backwards", {2, 1}),
               "cleave::create_group: group 'backwards' lists ranks [2, 1]; they must be "
               "ascending");
  // Checking adds nothing.
  EXPECT_ERROR(table.size_of("none"), "group 'none' does not exist");
}

TEST(GroupTable, RemovedGroupIsGone) {
  GroupTable table(1, 2);
  table.add("pair", {0, 1});
  table.remove("pair");
  EXPECT_ERROR(table.size_of("pair"),
               "cleave::get_group_size: group 'pair' does not exist; create it with "
               "create_group(name, ranks) (the world group is 'world')");
  EXPECT_ERROR(table.remove("pair"), "cleave::destroy_group: group 'pair' does not exist");
  EXPECT_ERROR(table.remove("world"), "cleave::destroy_group: the world group cannot be destroyed");
  EXPECT_ERROR(table.remove("nccl_world_group"), "the world group cannot be destroyed");
  // The name can be used again.
  table.check_new("pair", {1});
  table.add("pair", {1});
  EXPECT_EQ(table.rank_in("pair"), 0);
}

TEST(GroupTable, RanksOutsideAGroupAreNamed) {
  GroupTable table(1, 3);
  table.add("edges", {0, 2});
  EXPECT_ERROR(table.world_rank("edges", 2),
               "cleave::get_world_rank_from_group_rank: group rank 2 is outside group 'edges' of "
               "size 2");
  EXPECT_ERROR(table.world_rank("world", -1), "group rank -1 is outside group 'world' of size 3");
  EXPECT_ERROR(table.world_rank("gone", 0),
               "cleave::get_world_rank_from_group_rank: group 'gone' does not exist");
  EXPECT_ERROR(table.group_rank(3, "edges"),
               "cleave::get_group_rank_from_world_rank: world rank 3 is outside 0..2");
  EXPECT_ERROR(table.group_rank(1, "edges"),
               "cleave::get_group_rank_from_world_rank: world rank 1 is not in group 'edges' "
               "(world ranks [0, 2])");
  EXPECT_ERROR(table.rank_in("gone"), "cleave::get_rank: group 'gone' does not exist");
}

}  // namespace
}  // namespace cleave::cluster

// The groups of one rank's job: named, ascending lists of world ranks, with the checks and rank
// conversions behind cleave::create_group, cleave::get_rank and the other group queries
// (include/cleave/cluster/cluster.h). A plain value: it makes no communication group
// (cleave::create_group does, in groups.cc, through the world comm::ProcessGroup) and reads no
// global state, so it is tested alone (tests/cluster/groups_test.cc).
//
// Every world name (cleave::kWorldGroup and MindSpore's "hccl_world_group", "nccl_world_group")
// means the group of all ranks. A bad argument is a cleave::Error that names the API call, e.g.
// "cleave::create_group: group 'twice' lists rank 0 twice".
#pragma once

#include <map>
#include <string>
#include <vector>

namespace cleave::cluster {

class GroupTable {
 public:
  // The table of rank `rank` of a world of `world_size` ranks: the world group only.
  GroupTable(int rank, int world_size);

  int rank() const { return rank_; }
  int world_size() const { return world_size_; }

  // Throws unless group `name` of world ranks `ranks` can be created: the name must be new and
  // not empty, the ranks ascending, each once, in 0..world size-1.
  void check_new(const std::string& name, const std::vector<int>& ranks) const;
  // Adds the group; requires check_new(name, ranks) to have passed.
  void add(const std::string& name, const std::vector<int>& ranks);
  // Removes group `name`; throws for a world name or a group that does not exist.
  void remove(const std::string& name);

  // This rank's index in `group` (cleave::get_rank); throws when it is not a member.
  int rank_in(const std::string& group) const;
  // The number of ranks in `group` (cleave::get_group_size).
  int size_of(const std::string& group) const;
  // The world rank of `group_rank` in `group`, and back (cleave::get_world_rank_from_group_rank,
  // cleave::get_group_rank_from_world_rank); throw for a rank outside the group.
  int world_rank(const std::string& group, int group_rank) const;
  int group_rank(int world_rank, const std::string& group) const;

 private:
  // The world ranks of created group `group`; throws, naming API call `what`, when there is none.
  const std::vector<int>& ranks_of(const std::string& group, const char* what) const;

  int rank_;
  int world_size_;
  std::map<std::string, std::vector<int>> groups_;  // created groups: world rank of each member
};

}  // namespace cleave::cluster

// The rank and group queries of include/cleave/cluster/cluster.h (MindSpore's
// mindspore.communication), the job's store and barrier, over the state cleave::init() left
// (state.h), and the GroupTable behind them.
#include "cluster/groups.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <set>

#include "cleave/cluster/activity.h"
#include "cleave/cluster/cluster.h"
#include "cleave/comm/group_registry.h"
#include "cleave/core/error.h"
#include "cluster/state.h"

namespace cleave {
namespace cluster {
namespace {

bool is_world(const std::string& group) { return comm::is_world_group_name(group); }

}  // namespace

GroupTable::GroupTable(int rank, int world_size) : rank_(rank), world_size_(world_size) {}

const std::vector<int>& GroupTable::ranks_of(const std::string& group, const char* what) const {
  auto it = groups_.find(group);
  CLEAVE_CHECK_ARG(it != groups_.end(),
                   "cleave::{}: group '{}' does not exist; create it with create_group(name, "
                   "ranks) (the world group is '{}')",
                   what, group, kWorldGroup);
  return it->second;
}

void GroupTable::check_new(const std::string& name, const std::vector<int>& ranks) const {
  CLEAVE_CHECK_ARG(!name.empty(), "cleave::create_group: the group name must not be empty");
  CLEAVE_CHECK_ARG(!is_world(name) && groups_.count(name) == 0,
                   "cleave::create_group: group '{}' already exists; destroy_group it first or "
                   "pick another name",
                   name);
  CLEAVE_CHECK_ARG(!ranks.empty(), "cleave::create_group: group '{}' has no ranks", name);
  std::set<int> seen;
  for (int rank : ranks) {
    CLEAVE_CHECK_ARG(rank >= 0 && rank < world_size_,
                     "cleave::create_group: group '{}' lists rank {}; expected ranks in 0..{} "
                     "(world size {})",
                     name, rank, world_size_ - 1, world_size_);
    CLEAVE_CHECK_ARG(seen.insert(rank).second,
                     "cleave::create_group: group '{}' lists rank {} twice", name, rank);
  }
  CLEAVE_CHECK_ARG(std::is_sorted(ranks.begin(), ranks.end()),
                   "cleave::create_group: group '{}' lists ranks [{}]; they must be ascending",
                   name, fmt::join(ranks, ", "));
}

void GroupTable::add(const std::string& name, const std::vector<int>& ranks) {
  CLEAVE_ASSERT(!is_world(name) && groups_.count(name) == 0, "group '{}' added twice", name);
  groups_[name] = ranks;
}

void GroupTable::remove(const std::string& name) {
  CLEAVE_CHECK_ARG(!is_world(name), "cleave::destroy_group: the world group cannot be destroyed");
  ranks_of(name, "destroy_group");
  groups_.erase(name);
}

int GroupTable::rank_in(const std::string& group) const {
  if (is_world(group)) return rank_;
  const std::vector<int>& ranks = ranks_of(group, "get_rank");
  auto it = std::find(ranks.begin(), ranks.end(), rank_);
  CLEAVE_CHECK_ARG(it != ranks.end(),
                   "cleave::get_rank: this process (rank {}) is not a member of group '{}' "
                   "(world ranks [{}])",
                   rank_, group, fmt::join(ranks, ", "));
  return static_cast<int>(it - ranks.begin());
}

int GroupTable::size_of(const std::string& group) const {
  if (is_world(group)) return world_size_;
  return static_cast<int>(ranks_of(group, "get_group_size").size());
}

int GroupTable::world_rank(const std::string& group, int group_rank) const {
  const char* what = "get_world_rank_from_group_rank";
  const int size = is_world(group) ? world_size_ : static_cast<int>(ranks_of(group, what).size());
  CLEAVE_CHECK_ARG(group_rank >= 0 && group_rank < size,
                   "cleave::{}: group rank {} is outside group '{}' of size {}", what, group_rank,
                   group, size);
  return is_world(group) ? group_rank : groups_.at(group)[group_rank];
}

int GroupTable::group_rank(int world_rank, const std::string& group) const {
  const char* what = "get_group_rank_from_world_rank";
  CLEAVE_CHECK_ARG(world_rank >= 0 && world_rank < world_size_,
                   "cleave::{}: world rank {} is outside 0..{}", what, world_rank, world_size_ - 1);
  if (is_world(group)) return world_rank;
  const std::vector<int>& ranks = ranks_of(group, what);
  auto it = std::find(ranks.begin(), ranks.end(), world_rank);
  CLEAVE_CHECK_ARG(it != ranks.end(),
                   "cleave::{}: world rank {} is not in group '{}' (world ranks [{}])", what,
                   world_rank, group, fmt::join(ranks, ", "));
  return static_cast<int>(it - ranks.begin());
}

std::shared_ptr<comm::Store> job_store() {
  std::lock_guard lock(state_mutex());
  return initialized_state("cluster::job_store").membership.store;
}

void barrier(const std::string& name) {
  std::shared_ptr<WorkerClient> client;
  std::chrono::milliseconds timeout;
  {
    std::lock_guard lock(state_mutex());
    const ClusterState& s = initialized_state("cluster::barrier");
    const JoinMode mode = s.membership.mode;
    client = s.membership.client;
    CLEAVE_CHECK_ARG(mode == JoinMode::kDynamic || mode == JoinMode::kStandalone ||
                         (mode == JoinMode::kRankTable && client),
                     "cleave::cluster::barrier: needs dynamic networking (MS_ROLE), a rank table "
                     "with CLEAVE_RANK_TABLE_PORT, or a standalone process; use the backend's "
                     "barrier under mpirun");
    timeout = s.comm_timeout;
  }
  if (client) client->barrier(name, timeout);
}

}  // namespace cluster

int get_rank(const std::string& group) {
  std::lock_guard lock(cluster::state_mutex());
  return cluster::initialized_state("get_rank").groups.rank_in(group);
}

int get_group_size(const std::string& group) {
  std::lock_guard lock(cluster::state_mutex());
  return cluster::initialized_state("get_group_size").groups.size_of(group);
}

int get_local_rank() {
  std::lock_guard lock(cluster::state_mutex());
  return cluster::initialized_state("get_local_rank").membership.local_rank;
}

int get_local_size() {
  std::lock_guard lock(cluster::state_mutex());
  return cluster::initialized_state("get_local_size").membership.local_size;
}

void create_group(const std::string& name, const std::vector<int>& ranks) {
  std::lock_guard lock(cluster::state_mutex());
  cluster::ClusterState& s = cluster::initialized_state("create_group");
  s.groups.check_new(name, ranks);  // before any communication
  const int rank = s.membership.rank;
  if (s.world && std::find(ranks.begin(), ranks.end(), rank) != ranks.end()) {
    cluster::ActivityScope activity(fmt::format("creating group '{}'", name));
    comm::register_group(name, comm::create_subgroup(*s.world, ranks, name));
  }
  s.groups.add(name, ranks);
}

void destroy_group(const std::string& name) {
  std::lock_guard lock(cluster::state_mutex());
  cluster::initialized_state("destroy_group").groups.remove(name);
  comm::unregister_group(name);
}

int get_world_rank_from_group_rank(const std::string& group, int group_rank) {
  std::lock_guard lock(cluster::state_mutex());
  return cluster::initialized_state("get_world_rank_from_group_rank")
      .groups.world_rank(group, group_rank);
}

int get_group_rank_from_world_rank(int world_rank, const std::string& group) {
  std::lock_guard lock(cluster::state_mutex());
  return cluster::initialized_state("get_group_rank_from_world_rank")
      .groups.group_rank(world_rank, group);
}

}  // namespace cleave

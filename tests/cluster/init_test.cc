// cleave::init() in this process: how it decides to join (standalone, mpirun's variables, a rank
// table), the group queries, and the errors for bad environment values and backends.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <optional>

#include "cleave/cluster/activity.h"
#include "cleave/cluster/cluster.h"
#include "cleave/comm/process_group.h"
#include "cluster/processes.h"
#include "testing/env.h"
#include "testing/gradcheck.h"

namespace cleave {
namespace {

// Sets `vars` and unsets every other variable init() reads, for one test; restores them and
// releases the cluster after.
class Env {
 public:
  explicit Env(const std::map<std::string, std::string>& vars) : env_(unset_all()) {
    for (const auto& [name, value] : vars) env_.set(name, value);
  }
  ~Env() {
    if (is_initialized()) release();
  }

 private:
  static std::map<std::string, std::optional<std::string>> unset_all() {
    std::map<std::string, std::optional<std::string>> none;
    for (const char* name : kNames) none[name] = std::nullopt;
    return none;
  }
  static constexpr const char* kNames[] = {"MS_ROLE",
                                           "MS_SCHED_HOST",
                                           "MS_SCHED_PORT",
                                           "MS_WORKER_NUM",
                                           "MS_NODE_ID",
                                           "MS_TOPO_TIMEOUT",
                                           "CLEAVE_JOB_TOKEN",
                                           "OMPI_COMM_WORLD_RANK",
                                           "OMPI_COMM_WORLD_SIZE",
                                           "RANK_TABLE_FILE",
                                           "RANK_ID",
                                           "DEVICE_ID",
                                           "OMPI_COMM_WORLD_LOCAL_RANK",
                                           "OMPI_COMM_WORLD_LOCAL_SIZE",
                                           "CLEAVE_HEARTBEAT_TIMEOUT_MS"};
  testing::ScopedEnv env_;
};

std::map<std::string, std::string> worker_env(std::map<std::string, std::string> changes) {
  std::map<std::string, std::string> env = {{"MS_ROLE", "MS_WORKER"},
                                            {"MS_SCHED_HOST", "127.0.0.1"},
                                            {"MS_SCHED_PORT", "8118"},
                                            {"MS_WORKER_NUM", "2"}};
  for (const auto& [name, value] : changes) env[name] = value;
  return env;
}

TEST(ClusterInit, StandaloneIsOneRank) {
  Env env({});
  EXPECT_ERROR(get_rank(), "cleave::get_rank: call cleave::init() first");
  init();
  EXPECT_EQ(join_mode(), JoinMode::kStandalone);
  EXPECT_EQ(get_backend(), "gloo");
  EXPECT_EQ(get_rank(), 0);
  EXPECT_EQ(get_group_size(), 1);
  EXPECT_EQ(get_group_size("hccl_world_group"), 1);
  EXPECT_EQ(get_local_rank(), 0);
  auto store = cluster::job_store();
  store->set("k", {1, 2, 3});
  EXPECT_EQ(store->get("k", std::chrono::milliseconds(10)), (std::vector<uint8_t>{1, 2, 3}));
  EXPECT_EQ(store->add("n", 5), 5);
  EXPECT_EQ(store->get("n", std::chrono::milliseconds(10)), (std::vector<uint8_t>{'5'}));
  EXPECT_TRUE(store->check({"k", "n"}));
  EXPECT_FALSE(store->check({"missing"}));
  EXPECT_ERROR_KIND(store->get("missing", std::chrono::milliseconds(10)), ErrorKind::kUnavailable,
                    "store key 'missing'", "10 ms");
  cluster::barrier("standalone");
  init();  // a second call with the same backend does nothing
  EXPECT_ERROR(init("mpi"), "already initialized with backend 'gloo'; got 'mpi'");
}

TEST(ClusterInit, GroupsMapRanks) {
  Env env({});
  init();
  create_group("solo", {0});
  EXPECT_EQ(get_group_size("solo"), 1);
  EXPECT_EQ(get_rank("solo"), 0);
  EXPECT_EQ(get_world_rank_from_group_rank("solo", 0), 0);
  EXPECT_EQ(get_group_rank_from_world_rank(0, "solo"), 0);
  EXPECT_ERROR(create_group("solo", {0}), "group 'solo' already exists");
  EXPECT_ERROR(create_group("big", {0, 1}), "group 'big' lists rank 1; expected ranks in 0..0");
  EXPECT_ERROR(create_group("twice", {0, 0}), "group 'twice' lists rank 0 twice");
  EXPECT_ERROR(create_group("none", {}), "group 'none' has no ranks");
  EXPECT_ERROR(create_group("", {0}), "the group name must not be empty");
  EXPECT_ERROR(get_world_rank_from_group_rank("solo", 1), "group rank 1 is outside group 'solo'",
               "size 1");
  EXPECT_ERROR(destroy_group(kWorldGroup), "the world group cannot be destroyed");
  destroy_group("solo");
  EXPECT_ERROR(get_group_size("solo"), "group 'solo' does not exist");
}

TEST(ClusterInit, BackendsAreCheckedByName) {
  Env env({});
  EXPECT_ERROR_KIND(init("hccl"), ErrorKind::kUnimplemented,
                    "backend 'hccl' (Huawei Ascend) is not available", "'gloo'", "'mpi'", "'nccl'");
  EXPECT_ERROR_KIND(init("tpu"), ErrorKind::kInvalidArgument,
                    "unknown backend 'tpu'; expected one of gloo, mpi, nccl");
  if (!comm::backend_available("nccl")) {
    EXPECT_ERROR_KIND(init("nccl"), ErrorKind::kUnimplemented,
                      "backend 'nccl' is not available in this build");
  }
  EXPECT_FALSE(is_initialized());
}

TEST(ClusterInit, BadDynamicNetworkingVariablesAreNamed) {
  {
    Env env(worker_env({{"MS_ROLE", "MS_BOSS"}}));
    EXPECT_ERROR(init(), "MS_ROLE='MS_BOSS' is invalid; expected MS_SCHED", "MS_WORKER");
  }
  {
    Env env(worker_env({{"MS_SCHED_PORT", "70000"}}));
    EXPECT_ERROR(init(), "MS_SCHED_PORT='70000' is invalid; expected a port number in 1..65535");
  }
  {
    Env env(worker_env({{"MS_WORKER_NUM", "0"}}));
    EXPECT_ERROR(init(), "MS_WORKER_NUM='0' is invalid; expected a positive integer");
  }
  {
    Env env(worker_env({{"MS_NODE_ID", "5"}}));
    EXPECT_ERROR(init(), "MS_NODE_ID='5' is invalid; expected an integer rank in 0..1",
                 "MS_WORKER_NUM=2");
  }
  {
    Env env(worker_env({{"MS_TOPO_TIMEOUT", "soon"}}));
    EXPECT_ERROR(init(), "MS_TOPO_TIMEOUT='soon' is invalid; expected a positive integer");
  }
  {
    Env env(worker_env({{"CLEAVE_HEARTBEAT_TIMEOUT_MS", "-1"}}));
    EXPECT_ERROR(init(), "CLEAVE_HEARTBEAT_TIMEOUT_MS='-1' is invalid");
  }
  {
    std::map<std::string, std::string> vars = worker_env({});
    vars.erase("MS_SCHED_HOST");
    Env env(vars);
    EXPECT_ERROR(init(), "MS_ROLE=MS_WORKER needs MS_SCHED_HOST");
  }
  EXPECT_FALSE(is_initialized());
}

TEST(ClusterInit, AnUnreachableSchedulerIsUnavailable) {
  // Nothing listens on the port: the worker gives up after MS_TOPO_TIMEOUT=1 s.
  const std::string port = std::to_string(testing::free_port());
  Env env(worker_env({{"MS_SCHED_PORT", port}, {"MS_TOPO_TIMEOUT", "1"}}));
  EXPECT_ERROR_KIND(init(), ErrorKind::kUnavailable,
                    "cannot reach the scheduler at 127.0.0.1:" + port, "MS_TOPO_TIMEOUT=1 s");
  EXPECT_FALSE(is_initialized());
}

// (A real mpirun job runs in the CTest test cluster_mpirun_np2.)
TEST(ClusterInit, MpirunNeedsTheMpiBackend) {
  Env env({{"OMPI_COMM_WORLD_RANK", "1"}, {"OMPI_COMM_WORLD_SIZE", "2"}});
  EXPECT_ERROR(init("gloo"), "init('gloo'): under mpirun only the 'mpi' backend");
  EXPECT_FALSE(is_initialized());
}

TEST(ClusterInit, BadMpirunVariableIsNamed) {
  Env env({{"OMPI_COMM_WORLD_RANK", "1"}, {"OMPI_COMM_WORLD_SIZE", "x"}});
  EXPECT_ERROR(init(), "OMPI_COMM_WORLD_SIZE='x' is invalid; expected an integer >= 1");
}

class ClusterRankTable : public ::testing::Test {
 protected:
  std::string write(const std::string& text) {
    path_ = std::filesystem::temp_directory_path() /
            ("cleave_rank_table_" + std::to_string(getpid()) + ".json");
    std::ofstream(path_) << text;
    return path_.string();
  }
  ~ClusterRankTable() override { std::filesystem::remove(path_); }
  std::filesystem::path path_;
};

// Seed 001's file, with a second host.
constexpr const char* kSeedTable = R"({
  "board_id": "0x0000", "chip_info": "910", "deploy_mode": "lab", "group_count": "1",
  "group_list": [{"device_num": "3", "server_num": "2", "group_name": "", "instance_count": "3",
    "instance_list": [
      {"devices":[{"device_id":"0","device_ip":"192.1.27.6"}],"rank_id":"0","server_id":"10.155.111.140"},
      {"devices":[{"device_id":"1","device_ip":"192.2.27.6"}],"rank_id":"1","server_id":"10.155.111.140"},
      {"devices":[{"device_id":"0","device_ip":"192.3.27.6"}],"rank_id":"2","server_id":"10.155.111.141"}]}],
  "para_plane_nic_location": "device", "para_plane_nic_name": ["eth0", "eth1"],
  "para_plane_nic_num": "2", "status": "completed"})";

TEST_F(ClusterRankTable, SeedFormatGivesRankAndLocalRank) {
  Env env({{"RANK_TABLE_FILE", write(kSeedTable)}, {"RANK_ID", "1"}, {"DEVICE_ID", "1"}});
  init();
  EXPECT_EQ(join_mode(), JoinMode::kRankTable);
  EXPECT_EQ(get_rank(), 1);
  EXPECT_EQ(get_group_size(), 3);
  EXPECT_EQ(get_local_rank(), 1);
  EXPECT_EQ(get_local_size(), 2);
  // No backend group without a rendezvous store (NOTE [Backend rendezvous]); groups still map.
  create_group("tail", {1, 2});
  EXPECT_EQ(get_rank("tail"), 0);
  EXPECT_EQ(get_world_rank_from_group_rank("tail", 1), 2);
  EXPECT_ERROR(get_group_rank_from_world_rank(0, "tail"), "world rank 0 is not in group 'tail'");
  EXPECT_ERROR(create_group("backwards", {2, 1}),
               "group 'backwards' lists ranks [2, 1]; they must be ascending");
}

TEST_F(ClusterRankTable, ServerListFormatIsRead) {
  Env env({{"RANK_TABLE_FILE", write(R"({"version": "1.0", "server_count": "2", "server_list": [
      {"server_id": "a", "device": [{"device_id": "0", "rank_id": "0"}]},
      {"server_id": "b", "device": [{"device_id": "0", "rank_id": "1"},
                                    {"device_id": "1", "rank_id": "2"}]}]})")},
           {"RANK_ID", "2"}});
  init();
  EXPECT_EQ(get_rank(), 2);
  EXPECT_EQ(get_group_size(), 3);
  EXPECT_EQ(get_local_rank(), 1);
}

TEST_F(ClusterRankTable, BadValuesAreNamed) {
  {
    Env env({{"RANK_TABLE_FILE", write(kSeedTable)}, {"RANK_ID", "3"}});
    EXPECT_ERROR(init(), "RANK_ID='3' is invalid; expected a rank in 0..2");
  }
  {
    Env env({{"RANK_TABLE_FILE", write(kSeedTable)}, {"RANK_ID", "0"}, {"DEVICE_ID", "4"}});
    EXPECT_ERROR(init(), "DEVICE_ID=4 differs from device_id 0 of rank 0");
  }
  {
    Env env({{"RANK_TABLE_FILE", write(R"({"server_list": [{"server_id": "a", "device": [
        {"device_id": "0", "rank_id": "0"}, {"device_id": "1", "rank_id": "2"}]}]})")},
             {"RANK_ID", "0"}});
    EXPECT_ERROR(init(), "its ranks must be 0..1 each once; rank 1 is missing");
  }
  {
    Env env({{"RANK_TABLE_FILE", write("not json")}, {"RANK_ID", "0"}});
    EXPECT_ERROR(init(), "is not a JSON object");
  }
  {
    Env env({{"RANK_TABLE_FILE", "/nonexistent/table.json"}, {"RANK_ID", "0"}});
    EXPECT_ERROR(init(), "RANK_TABLE_FILE '/nonexistent/table.json' cannot be opened");
  }
}

}  // namespace
}  // namespace cleave

namespace cleave::cluster {
namespace {

TEST(ClusterActivity, InnermostScopeIsReported) {
  std::string outside = ActivityScope::current();
  {
    ActivityScope step("in step 3");
    EXPECT_EQ(ActivityScope::current(), "in step 3");
    {
      ActivityScope reduce("in all_reduce on group 'world'");
      EXPECT_EQ(ActivityScope::current(), "in all_reduce on group 'world'");
    }
    EXPECT_EQ(ActivityScope::current(), "in step 3");
  }
  EXPECT_EQ(ActivityScope::current(), outside);
}

}  // namespace
}  // namespace cleave::cluster

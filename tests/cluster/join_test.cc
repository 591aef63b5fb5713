// The join modes of src/cluster/join.h that only read variables, given variables by hand (no
// process environment, no cleave::init()): which mode cleave::init() takes, and the place of an
// mpirun rank and of a rank-table rank, with every error for a bad variable. Dynamic networking
// and a rank table's rendezvous need a scheduler: job_test.cc and rank_table_test.cc run them.
#include "cluster/join.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <map>

#include "cluster/rank_table.h"
#include "testing/gradcheck.h"

namespace cleave::cluster {
namespace {

// The variables `vars`, as cluster::env_value reads the environment: an empty value is unset.
EnvLookup vars(std::map<std::string, std::string> values) {
  return [values = std::move(values)](const char* name) -> std::optional<std::string> {
    auto it = values.find(name);
    if (it == values.end() || it->second.empty()) return std::nullopt;
    return it->second;
  };
}

TEST(JoinMode, FirstModeWhoseVariablesAreSetInInitsOrder) {
  EXPECT_EQ(choose_join_mode(vars({})).mode, JoinMode::kStandalone);
  EXPECT_EQ(choose_join_mode(vars({{"MS_ROLE", ""}})).mode, JoinMode::kStandalone);
  const std::map<std::string, std::string> all = {{"MS_ROLE", "MS_WORKER"},
                                                  {"OMPI_COMM_WORLD_RANK", "0"},
                                                  {"OMPI_COMM_WORLD_SIZE", "2"},
                                                  {"RANK_TABLE_FILE", "table.json"}};
  EXPECT_EQ(choose_join_mode(vars(all)).mode, JoinMode::kDynamic);
  std::map<std::string, std::string> no_role = all;
  no_role.erase("MS_ROLE");
  EXPECT_EQ(choose_join_mode(vars(no_role)).mode, JoinMode::kMpi);
  EXPECT_EQ(choose_join_mode(vars({{"OMPI_COMM_WORLD_RANK", "0"}})).mode, JoinMode::kMpi);
  EXPECT_EQ(choose_join_mode(vars({{"OMPI_COMM_WORLD_SIZE", "2"}})).mode, JoinMode::kMpi);
  const JoinChoice table = choose_join_mode(vars({{"RANK_TABLE_FILE", "table.json"}}));
  EXPECT_EQ(table.mode, JoinMode::kRankTable);
  EXPECT_EQ(table.rank_table, "table.json");
}

TEST(JoinMode, SeedOnesRankTableVariableIsAcceptedAfterRankTableFile) {
  EXPECT_EQ(choose_join_mode(vars({{"MINDSPORE_HCCL_CONFIG_PATH", "hccl.json"}})).rank_table,
            "hccl.json");
  EXPECT_EQ(choose_join_mode(vars({{"RANK_TABLE_FILE", "table.json"},
                                   {"MINDSPORE_HCCL_CONFIG_PATH", "hccl.json"}}))
                .rank_table,
            "table.json");
}

TEST(JoinMpi, RanksFromOpenMpisVariables) {
  const Membership m =
      join_mpi(vars({{"OMPI_COMM_WORLD_RANK", "2"}, {"OMPI_COMM_WORLD_SIZE", "4"}}));
  EXPECT_EQ(m.mode, JoinMode::kMpi);
  EXPECT_EQ(m.rank, 2);
  EXPECT_EQ(m.world_size, 4);
  // Without the local variables the world is one host.
  EXPECT_EQ(m.local_rank, 2);
  EXPECT_EQ(m.local_size, 4);
  EXPECT_EQ(m.client, nullptr);
  EXPECT_EQ(m.store, nullptr);
  const Membership local = join_mpi(vars({{"OMPI_COMM_WORLD_RANK", "3"},
                                          {"OMPI_COMM_WORLD_SIZE", "4"},
                                          {"OMPI_COMM_WORLD_LOCAL_RANK", "1"},
                                          {"OMPI_COMM_WORLD_LOCAL_SIZE", "2"}}));
  EXPECT_EQ(local.local_rank, 1);
  EXPECT_EQ(local.local_size, 2);
}

TEST(JoinMpi, BadVariablesAreNamed) {
  EXPECT_ERROR(join_mpi(vars({{"OMPI_COMM_WORLD_RANK", "1"}, {"OMPI_COMM_WORLD_SIZE", "x"}})),
               "cleave::init: OMPI_COMM_WORLD_SIZE='x' is invalid; expected an integer >= 1 (set "
               "by mpirun)");
  EXPECT_ERROR(join_mpi(vars({{"OMPI_COMM_WORLD_RANK", "0"}, {"OMPI_COMM_WORLD_SIZE", "0"}})),
               "OMPI_COMM_WORLD_SIZE='0' is invalid; expected an integer >= 1");
  EXPECT_ERROR(join_mpi(vars({{"OMPI_COMM_WORLD_SIZE", "2"}})),
               "OMPI_COMM_WORLD_RANK='' is invalid; expected an integer >= 0");
  EXPECT_ERROR(join_mpi(vars({{"OMPI_COMM_WORLD_RANK", "1x"}, {"OMPI_COMM_WORLD_SIZE", "2"}})),
               "OMPI_COMM_WORLD_RANK='1x' is invalid");
  EXPECT_ERROR(join_mpi(vars({{"OMPI_COMM_WORLD_RANK", "2"}, {"OMPI_COMM_WORLD_SIZE", "2"}})),
               "cleave::init: OMPI_COMM_WORLD_RANK=2 must be below OMPI_COMM_WORLD_SIZE=2");
  EXPECT_ERROR(join_mpi(vars({{"OMPI_COMM_WORLD_RANK", "0"},
                              {"OMPI_COMM_WORLD_SIZE", "2"},
                              {"OMPI_COMM_WORLD_LOCAL_RANK", "-1"}})),
               "OMPI_COMM_WORLD_LOCAL_RANK='-1' is invalid; expected an integer >= 0");
  EXPECT_ERROR(join_mpi(vars({{"OMPI_COMM_WORLD_RANK", "0"},
                              {"OMPI_COMM_WORLD_SIZE", "2"},
                              {"OMPI_COMM_WORLD_LOCAL_SIZE", "0"}})),
               "OMPI_COMM_WORLD_LOCAL_SIZE='0' is invalid; expected an integer >= 1");
}

// Two ranks on host a (devices 0 and 1), one on host b.
const std::vector<RankTableEntry> kTable = {{0, "a", 0}, {1, "a", 1}, {2, "b", 0}};

TEST(JoinRankTable, RankAndLocalRankFromTheTable) {
  const Membership m = rank_table_place(kTable, "table.json", vars({{"RANK_ID", "1"}}));
  EXPECT_EQ(m.mode, JoinMode::kRankTable);
  EXPECT_EQ(m.rank, 1);
  EXPECT_EQ(m.world_size, 3);
  EXPECT_EQ(m.local_rank, 1);
  EXPECT_EQ(m.local_size, 2);
  EXPECT_EQ(m.client, nullptr);
  const Membership alone =
      rank_table_place(kTable, "table.json", vars({{"RANK_ID", "2"}, {"DEVICE_ID", "0"}}));
  EXPECT_EQ(alone.local_rank, 0);
  EXPECT_EQ(alone.local_size, 1);
}

TEST(JoinRankTable, BadRankOrDeviceIsNamed) {
  for (const char* rank_id : {"3", "-1", "1x", ""}) {
    EXPECT_ERROR(rank_table_place(kTable, "table.json", vars({{"RANK_ID", rank_id}})),
                 std::string("cleave::init: RANK_ID='") + rank_id +
                     "' is invalid; expected a rank in 0..2 (RANK_TABLE_FILE 'table.json' lists 3 "
                     "ranks)");
  }
  EXPECT_ERROR(rank_table_place(kTable, "table.json", vars({{"RANK_ID", "1"}, {"DEVICE_ID", "4"}})),
               "cleave::init: DEVICE_ID=4 differs from device_id 1 of rank 1 in RANK_TABLE_FILE "
               "'table.json'");
}

TEST(JoinStandalone, OneRankWithAStoreOfItsOwn) {
  const Membership m = join_standalone();
  EXPECT_EQ(m.mode, JoinMode::kStandalone);
  EXPECT_EQ(m.rank, 0);
  EXPECT_EQ(m.world_size, 1);
  EXPECT_EQ(m.local_size, 1);
  ASSERT_NE(m.store, nullptr);
  m.store->set("k", {7});
  EXPECT_EQ(m.store->get("k", std::chrono::milliseconds(10)), std::vector<uint8_t>{7});
}

// Rank tables that crashed read_rank_table or were misread (replayed by
// fuzz/rank_table_fuzzer.cc from fuzz/regressions/rank_table/): each is a named error.
TEST(RankTableFile, MalformedEntriesAreNamedErrors) {
  const std::string path = (std::filesystem::temp_directory_path() /
                            ("cleave_rank_table_" + std::to_string(::getpid()) + ".json"))
                               .string();
  auto read = [&](const std::string& text) {
    std::ofstream(path) << text;
    return read_rank_table(path);
  };
  // "devices" not an array: was an uncaught nlohmann::json::type_error.
  EXPECT_ERROR(
      read(
          R"({"group_list": [{"instance_list": [{"rank_id": 0, "server_id": "a", "devices": "x"}]}]})"),
      "rank 0's \"devices\" is \"x\"; expected an array");
  // An integer outside int: was read as rank 0.
  EXPECT_ERROR(
      read(
          R"({"server_list": [{"server_id": "a", "device": [{"device_id": 0, "rank_id": 4294967296}]}]})"),
      "\"rank_id\" is 4294967296; expected a non-negative integer");
  // A negative device: was accepted.
  EXPECT_ERROR(
      read(R"({"server_list": [{"server_id": "a", "device": [{"device_id": -1, "rank_id": 0}]}]})"),
      "\"device_id\" is -1; expected a non-negative integer");
  const auto ok = read(
      R"({"server_list": [{"server_id": "a", "device": [{"device_id": 3, "rank_id": "0"}]}]})");
  ASSERT_EQ(ok.size(), 1u);
  EXPECT_EQ(ok[0].device_id, 3);
  std::filesystem::remove(path);
}

}  // namespace
}  // namespace cleave::cluster

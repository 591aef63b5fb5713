// RANK_TABLE_FILE jobs with CLEAVE_RANK_TABLE_PORT (NOTE [Rank-table rendezvous] in
// src/cluster/join.cc): rank 0 serves the rendezvous, the world group forms over Gloo and the
// collectives work; real processes on 127.0.0.1 with a rank table the test writes.
#include <gtest/gtest.h>

#include "cluster/job.h"

namespace cleave::testing {
namespace {

// A job of `size` ranks listed in a rank table (server_list layout) on 127.0.0.1.
class TableJob {
 public:
  TableJob(const std::string& name, int size) : processes_(name), size_(size) {
    std::string devices;
    for (int rank = 0; rank < size; ++rank) {
      devices += (rank ? ", " : "") + std::string("{\"device_id\": \"") + std::to_string(rank) +
                 "\", \"rank_id\": \"" + std::to_string(rank) + "\"}";
    }
    table_ = processes_.path("rank_table.json");
    std::ofstream(table_) << R"({"version": "1.0", "server_count": "1", "server_list": [)"
                          << R"({"server_id": "127.0.0.1", "device": [)" << devices << "]}]}";
    port_ = std::to_string(free_port());
  }

  pid_t start(int rank, const std::map<std::string, std::string>& extra = {}, bool with_port = true,
              const std::vector<std::string>& args = {"ranktable"}) {
    std::map<std::string, std::string> env = {{"RANK_TABLE_FILE", table_},
                                              {"RANK_ID", std::to_string(rank)},
                                              {"MS_TOPO_TIMEOUT", "10"},
                                              {"CLEAVE_HEARTBEAT_INTERVAL_MS", "200"},
                                              {"CLEAVE_HEARTBEAT_TIMEOUT_MS", "3000"}};
    if (with_port) env["CLEAVE_RANK_TABLE_PORT"] = port_;
    for (const auto& [key, value] : extra) env[key] = value;
    std::vector<std::string> argv = {kProgram};
    argv.insert(argv.end(), args.begin(), args.end());
    return processes_.start(argv, env, log_name(rank));
  }
  static std::string log_name(int rank) { return "rank_" + std::to_string(rank) + ".log"; }
  std::string log(int rank) { return read_text(processes_.path(log_name(rank))); }
  std::optional<int> wait(pid_t pid) { return processes_.wait(pid, seconds(15)); }
  const std::string& port() const { return port_; }

 private:
  Processes processes_;
  int size_;
  std::string table_;
  std::string port_;
};

TEST(ClusterRankTableJob, WorldAndSubgroupCollectivesWork) {
  for (int size : {2, 3}) {
    TableJob job("rank_table_" + std::to_string(size), size);
    std::vector<pid_t> ranks;
    for (int rank = size - 1; rank >= 0; --rank) ranks.push_back(job.start(rank));  // 0 last
    for (pid_t pid : ranks) EXPECT_EQ(job.wait(pid), 0);
    for (int rank = 0; rank < size; ++rank) {
      std::string log = job.log(rank);
      EXPECT_NE(log.find("rank " + std::to_string(rank) + " of " + std::to_string(size) +
                         " ok (rank table, local rank " + std::to_string(rank) + ")"),
                std::string::npos)
          << log;
      if (rank % 2 == 0) {
        EXPECT_NE(log.find("all_reduce over 'evens' ok"), std::string::npos) << log;
      }
    }
    // Rank 0 served the job: its scheduler saw every rank finish.
    EXPECT_NE(job.log(0).find("all " + std::to_string(size) + " workers finished"),
              std::string::npos)
        << job.log(0);
  }
}

TEST(ClusterRankTableJob, StuckRankStopsEveryProcessIncludingTheServingRank) {
  // Rank 1 never enters the AllReduce; rank 0 serves the job and must stay up until every rank
  // has been told.
  TableJob job("rank_table_stuck", 3);
  std::vector<pid_t> ranks;
  for (int rank = 0; rank < 3; ++rank) {
    ranks.push_back(job.start(rank, {{"CLEAVE_STUCK_TIMEOUT_MS", "2000"}}, true, {"stuck", "1"}));
  }
  for (int rank = 0; rank < 3; ++rank) {
    EXPECT_EQ(job.wait(ranks[static_cast<size_t>(rank)]), 1) << job.log(rank);
    std::string log = job.log(rank);
    EXPECT_NE(log.find("stops: the job failed: rank 1 (host "), std::string::npos) << log;
    EXPECT_NE(log.find("is stuck: "), std::string::npos) << log;
  }
}

TEST(ClusterRankTableJob, WithoutAPortCollectivesRefuseToRun) {
  TableJob job("rank_table_no_port", 2);
  pid_t rank0 = job.start(0, {}, /*with_port=*/false);
  EXPECT_EQ(job.wait(rank0), 1);
  EXPECT_NE(job.log(0).find("AllReduce: the world has 2 ranks but cleave::init() made no "
                            "communication group for it"),
            std::string::npos)
      << job.log(0);
}

TEST(ClusterRankTableJob, BadOrTakenPortIsAClearError) {
  TableJob job("rank_table_bad_port", 2);
  pid_t bad = job.start(0, {{"CLEAVE_RANK_TABLE_PORT", "http"}});
  EXPECT_EQ(job.wait(bad), 1);
  EXPECT_NE(job.log(0).find("CLEAVE_RANK_TABLE_PORT='http' is invalid; expected a port number "
                            "from 1 to 65535"),
            std::string::npos)
      << job.log(0);

  // Another process listens on the port: rank 0 cannot serve there.
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in address = {};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  address.sin_port = htons(static_cast<uint16_t>(std::stoi(job.port())));
  ASSERT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)), 0);
  ASSERT_EQ(listen(fd, 1), 0);
  pid_t taken = job.start(0);
  EXPECT_EQ(job.wait(taken), 1);
  close(fd);
  EXPECT_NE(
      job.log(0).find("rank 0 cannot serve the rank table's rendezvous on 127.0.0.1:" + job.port()),
      std::string::npos)
      << job.log(0);
}

}  // namespace
}  // namespace cleave::testing

// cleave-run over real processes: it starts the scheduler and the workers, writes one log per
// process, and on the first failure stops the rest and exits with the failing rank's status.
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <sched.h>
#include <signal.h>

#include <algorithm>
#include <string>
#include <vector>

#include "cluster/job.h"

namespace cleave::testing {
namespace {

std::vector<std::string> launch(Job& job, const std::string& log_dir,
                                const std::vector<std::string>& program_args) {
  std::vector<std::string> argv = {CLEAVE_RUN_PROGRAM,
                                   "--worker_num",
                                   "4",
                                   "--master_port",
                                   job.env().at("MS_SCHED_PORT"),
                                   "--log_dir",
                                   job.path(log_dir),
                                   "--join",
                                   "--",
                                   CLEAVE_CLUSTER_TEST_PROGRAM};
  argv.insert(argv.end(), program_args.begin(), program_args.end());
  return argv;
}

TEST(ClusterLauncher, RunsFourWorkersWithOneLogEach) {
  Job job("launcher_ok", 4);
  pid_t run = job.start_program(launch(job, "logs", {"roundtrip"}), {}, "cleave_run.log");
  EXPECT_EQ(job.wait(run, seconds(20)), 0) << job.log("cleave_run.log");
  std::string output = job.log("cleave_run.log");
  for (int rank = 0; rank < 4; ++rank) {
    std::string line = fmt::format("rank {} of 4 ok", rank);
    EXPECT_NE(job.log(fmt::format("logs/worker_{}.log", rank)).find(line), std::string::npos);
    EXPECT_NE(output.find(fmt::format("[rank {}] {}", rank, line)), std::string::npos) << output;
  }
  EXPECT_NE(job.log("logs/scheduler.log").find("all 4 workers finished"), std::string::npos);
  // Where the logs are.
  EXPECT_NE(output.find("cleave-run: every process succeeded; logs in " + job.path("logs") +
                        " (scheduler.log, worker_<rank>.log)"),
            std::string::npos)
      << output;
}

// NOTE [SPMD workers on few cores]: with CLEAVE_BIND_CORES=1 each of the 4 workers binds every
// thread of its process to core (local rank % allowed cores); with 0 none does; with auto they
// bind exactly when 4 workers outnumber the cores.
TEST(ClusterLauncher, WorkersOfOneStepAreSpreadOverTheCoresOneCoreEach) {
  cpu_set_t set;
  CPU_ZERO(&set);
  ASSERT_EQ(sched_getaffinity(0, sizeof(set), &set), 0);
  std::vector<int> cpus;
  for (int c = 0; c < CPU_SETSIZE; ++c) {
    if (CPU_ISSET(c, &set)) cpus.push_back(c);
  }
  const int n = static_cast<int>(cpus.size());
  for (const char* mode : {"1", "0", "auto"}) {
    SCOPED_TRACE(fmt::format("CLEAVE_BIND_CORES={}, {} allowed cores", mode, n));
    Job job(fmt::format("launcher_bind_{}", mode), 4);
    pid_t run = job.start_program(launch(job, "logs", {"bind"}), {{"CLEAVE_BIND_CORES", mode}},
                                  "cleave_run.log");
    ASSERT_EQ(job.wait(run, seconds(20)), 0) << job.log("cleave_run.log");
    const bool binds = std::string(mode) == "1" || (std::string(mode) == "auto" && 4 > n);
    for (int rank = 0; rank < 4; ++rank) {
      const std::string log = job.log(fmt::format("logs/worker_{}.log", rank));
      // One host: the local rank is the rank.
      const std::string want =
          binds ? fmt::format(
                      "bind rank {} local {}: cpu {}, allowed 1 main, 1 other: 4 workers "
                      "of this job on this host's {} cores: each bound to one",
                      rank, rank, cpus[static_cast<size_t>(rank % n)], n)
                : fmt::format(
                      "bind rank {} local {}: cpu -1, allowed {} main, {} other: not "
                      "bound: ",
                      rank, rank, n, n);
      EXPECT_NE(log.find(want), std::string::npos) << want << "\n" << log;
      // What the search is told of the cores (NOTE [Ranks sharing cores]) does not change.
      const double slowdown = std::max(1.0, 4.0 / n);
      EXPECT_NE(log.find(fmt::format("bind rank {}: shared-cores slowdown {:.3f} before, {:.3f} "
                                     "after",
                                     rank, slowdown, slowdown)),
                std::string::npos)
          << log;
    }
  }
}

TEST(ClusterLauncher, FailingRankStopsTheJobWithItsStatus) {
  Job job("launcher_fail", 4);
  pid_t run = job.start_program(launch(job, "logs", {"fail", "1"}), {}, "cleave_run.log");
  EXPECT_EQ(job.wait(run, seconds(20)), 3) << job.log("cleave_run.log");
  std::string output = job.log("cleave_run.log");
  EXPECT_NE(output.find("cleave-run: rank 1 (pid "), std::string::npos) << output;
  EXPECT_NE(output.find("failed with status 3; stopping the other processes"), std::string::npos)
      << output;
  EXPECT_NE(output.find("last lines of rank 1"), std::string::npos) << output;
  EXPECT_NE(output.find("  rank 1 fails on purpose"), std::string::npos) << output;
  // The cause in one line, then its log.
  EXPECT_NE(output.find("cleave-run: the job failed: rank 1 (host "), std::string::npos) << output;
  EXPECT_NE(output.find(") failed: its process exited with status 3"), std::string::npos) << output;
  EXPECT_NE(output.find("cleave-run: rank 1's last line: rank 1 fails on purpose"),
            std::string::npos)
      << output;
  EXPECT_NE(output.find("cleave-run: its log: " + job.path("logs") + "/worker_1.log"),
            std::string::npos)
      << output;
}

TEST(ClusterLauncher, TwoHostsJoinOneJobByNodeRank) {
  Job job("launcher_hosts", 4);
  auto host = [&](int node_rank) {
    std::vector<std::string> argv = {CLEAVE_RUN_PROGRAM,
                                     "--worker_num",
                                     "4",
                                     "--local_worker_num",
                                     "2",
                                     "--node_rank",
                                     std::to_string(node_rank),
                                     "--master_port",
                                     job.env().at("MS_SCHED_PORT"),
                                     "--log_dir",
                                     job.path(fmt::format("host{}", node_rank)),
                                     "--",
                                     CLEAVE_CLUSTER_TEST_PROGRAM,
                                     "roundtrip"};
    return job.start_program(argv, {}, fmt::format("host{}.log", node_rank));
  };
  pid_t first = host(0);
  pid_t second = host(1);
  EXPECT_EQ(job.wait(first, seconds(20)), 0) << job.log("host0.log");
  EXPECT_EQ(job.wait(second, seconds(20)), 0) << job.log("host1.log");
  EXPECT_NE(job.log("host0/worker_1.log").find("rank 1 of 4 ok"), std::string::npos);
  EXPECT_NE(job.log("host1/worker_3.log").find("rank 3 of 4 ok"), std::string::npos);
  EXPECT_NE(job.log("host0/scheduler.log").find("all 4 workers finished"), std::string::npos);
  EXPECT_EQ(job.log("host1/scheduler.log"), "");  // only node_rank 0 runs the scheduler
}

TEST(ClusterLauncher, ForwardsSigtermToEveryProcess) {
  Job job("launcher_sigterm", 4);
  pid_t run = job.start_program(launch(job, "logs", {"hang"}), {}, "cleave_run.log");
  for (int rank = 0; rank < 4; ++rank) {
    ASSERT_TRUE(job.wait_for_log(fmt::format("logs/worker_{}.log", rank), "ready rank"))
        << job.log("cleave_run.log");
  }
  ASSERT_EQ(kill(run, SIGTERM), 0);
  // cleave-run returns only after every process it started has ended.
  EXPECT_EQ(job.wait(run, seconds(10)), 128 + SIGTERM) << job.log("cleave_run.log");
}

TEST(ClusterLauncher, SeveralHostsNeedAJobToken) {
  Job job("launcher_token", 4);
  pid_t run = job.start_program({CLEAVE_RUN_PROGRAM, "--worker_num", "4", "--local_worker_num", "2",
                                 "--", CLEAVE_CLUSTER_TEST_PROGRAM},
                                {{"CLEAVE_JOB_TOKEN", ""}}, "cleave_run.log");
  EXPECT_EQ(job.wait(run), 2);
  EXPECT_NE(job.log("cleave_run.log").find("needs the same CLEAVE_JOB_TOKEN on every host"),
            std::string::npos)
      << job.log("cleave_run.log");
}

TEST(ClusterLauncher, RejectsMoreLocalWorkersThanWorkers) {
  Job job("launcher_usage", 2);
  pid_t run = job.start_program(
      {CLEAVE_RUN_PROGRAM, "--worker_num", "2", "--local_worker_num", "3", "--", "true"}, {},
      "cleave_run.log");
  EXPECT_EQ(job.wait(run), 2);
  EXPECT_NE(job.log("cleave_run.log").find("--local_worker_num 3 exceeds --worker_num 2"),
            std::string::npos)
      << job.log("cleave_run.log");
}

}  // namespace
}  // namespace cleave::testing

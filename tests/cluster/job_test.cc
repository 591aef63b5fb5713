// Jobs of real processes on 127.0.0.1: a scheduler and workers running cluster_test_program,
// started as seed 000's run.sh does (same program, MS_ROLE per process).
#include "cluster/job.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

namespace cleave::testing {
namespace {

TEST(ClusterJob, SchedulerAndFourWorkersSucceed) {
  Job job("four", 4);
  pid_t scheduler = job.scheduler();
  std::vector<pid_t> workers;
  for (int i = 0; i < 4; ++i) workers.push_back(job.worker(std::to_string(i), {"roundtrip"}));
  for (int i = 0; i < 4; ++i) {
    EXPECT_EQ(job.wait(workers[i]), 0) << job.log("worker_" + std::to_string(i) + ".log");
  }
  EXPECT_EQ(job.wait(scheduler), 0) << job.log("scheduler.log");
  std::string all;
  for (int i = 0; i < 4; ++i) all += job.log("worker_" + std::to_string(i) + ".log");
  for (int rank = 0; rank < 4; ++rank) {
    EXPECT_NE(all.find("rank " + std::to_string(rank) + " of 4 ok"), std::string::npos) << all;
  }
  EXPECT_NE(job.log("scheduler.log").find("all 4 workers finished"), std::string::npos);
  // The Gloo world group met through the scheduler's store, and so did the sub-group.
  auto count = [&](const std::string& fragment) {
    int n = 0;
    for (size_t at = all.find(fragment); at != std::string::npos; at = all.find(fragment, at + 1)) {
      ++n;
    }
    return n;
  };
  EXPECT_EQ(count("all_reduce over 'world' ok"), 4) << all;
  EXPECT_EQ(count("all_reduce over 'evens' ok"), 2) << all;
}

TEST(ClusterJob, NodeIdFixesTheRank) {
  Job job("node_id", 2);
  pid_t scheduler = job.scheduler();
  pid_t first = job.worker("a", {"roundtrip"}, {{"MS_NODE_ID", "1"}});
  pid_t second = job.worker("b", {"roundtrip"}, {{"MS_NODE_ID", "0"}});
  EXPECT_EQ(job.wait(first), 0) << job.log("worker_a.log");
  EXPECT_EQ(job.wait(second), 0) << job.log("worker_b.log");
  EXPECT_EQ(job.wait(scheduler), 0) << job.log("scheduler.log");
  EXPECT_NE(job.log("worker_a.log").find("rank 1 of 2 ok"), std::string::npos);
  EXPECT_NE(job.log("worker_b.log").find("rank 0 of 2 ok"), std::string::npos);
}

TEST(ClusterJob, WorkerWithWrongTokenIsRefused) {
  Job job("token", 1);
  pid_t scheduler = job.scheduler();
  pid_t intruder = job.worker("intruder", {"roundtrip"}, {{"CLEAVE_JOB_TOKEN", "another-job"}});
  EXPECT_EQ(job.wait(intruder), 1);
  std::string refused = job.log("worker_intruder.log");
  EXPECT_NE(refused.find("refused this worker"), std::string::npos) << refused;
  EXPECT_NE(refused.find("CLEAVE_JOB_TOKEN does not match"), std::string::npos) << refused;
  EXPECT_TRUE(job.wait_for_log("scheduler.log", "refused a worker"));
  // The job itself goes on.
  pid_t worker = job.worker("0", {"roundtrip"});
  EXPECT_EQ(job.wait(worker), 0) << job.log("worker_0.log");
  EXPECT_EQ(job.wait(scheduler), 0) << job.log("scheduler.log");
}

TEST(ClusterJob, WorkerBeyondWorkerNumIsRefused) {
  Job job("too_many", 2);
  pid_t scheduler = job.scheduler();
  pid_t first = job.worker("0", {"roundtrip", "3000"});
  pid_t second = job.worker("1", {"roundtrip", "3000"});
  ASSERT_TRUE(job.wait_for_log("worker_0.log", "of 2 ok"));
  ASSERT_TRUE(job.wait_for_log("worker_1.log", "of 2 ok"));
  pid_t extra = job.worker("extra", {"roundtrip"});
  EXPECT_EQ(job.wait(extra), 1);
  std::string refused = job.log("worker_extra.log");
  EXPECT_NE(refused.find("already has MS_WORKER_NUM=2 workers"), std::string::npos) << refused;
  EXPECT_NE(refused.find("one too many"), std::string::npos) << refused;
  EXPECT_EQ(job.wait(first), 0);
  EXPECT_EQ(job.wait(second), 0);
  EXPECT_EQ(job.wait(scheduler), 0) << job.log("scheduler.log");
  EXPECT_NE(job.log("scheduler.log").find("one too many"), std::string::npos);
}

TEST(ClusterJob, DuplicateNodeIdIsRefused) {
  Job job("duplicate", 2);
  pid_t scheduler = job.scheduler();
  pid_t first = job.worker("first", {"roundtrip"}, {{"MS_NODE_ID", "0"}});
  ASSERT_TRUE(job.wait_for_log("scheduler.log", "with MS_NODE_ID=0"));
  pid_t duplicate = job.worker("duplicate", {"roundtrip"}, {{"MS_NODE_ID", "0"}});
  EXPECT_EQ(job.wait(duplicate), 1);
  std::string refused = job.log("worker_duplicate.log");
  EXPECT_NE(refused.find("MS_NODE_ID=0 is already taken"), std::string::npos) << refused;
  pid_t second = job.worker("second", {"roundtrip"}, {{"MS_NODE_ID", "1"}});
  EXPECT_EQ(job.wait(first), 0) << job.log("worker_first.log");
  EXPECT_EQ(job.wait(second), 0) << job.log("worker_second.log");
  EXPECT_EQ(job.wait(scheduler), 0) << job.log("scheduler.log");
  EXPECT_NE(job.log("scheduler.log").find("already taken"), std::string::npos);
}

TEST(ClusterJob, SchedulerStoreErrorsKeepTheirKind) {
  Job job("kinds", 1);
  pid_t scheduler = job.scheduler();
  pid_t worker = job.worker("0", {"kinds"});
  EXPECT_EQ(job.wait(worker), 0) << job.log("worker_0.log");
  EXPECT_EQ(job.wait(scheduler), 0) << job.log("scheduler.log");
  const std::string log = job.log("worker_0.log");
  EXPECT_NE(log.find("store get: unavailable"), std::string::npos) << log;
  EXPECT_NE(log.find("store add: invalid argument"), std::string::npos) << log;
}

TEST(ClusterJob, BadEnvironmentValueIsNamed) {
  Job job("bad_env", 2);
  pid_t worker = job.worker("0", {"roundtrip"}, {{"MS_WORKER_NUM", "two"}});
  EXPECT_EQ(job.wait(worker), 1);
  std::string log = job.log("worker_0.log");
  EXPECT_NE(log.find("MS_WORKER_NUM='two' is invalid; expected a positive integer"),
            std::string::npos)
      << log;
}

}  // namespace
}  // namespace cleave::testing

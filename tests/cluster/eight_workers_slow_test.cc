// Jobs of eight worker processes on 127.0.0.1 (the slow label, NOTE [Test labels] in
// tests/CMakeLists.txt): jobs of 1, 2, 3 and 8 workers succeed (job_test.cc's ClusterJob), and
// seven of eight workers name the missing one (user_errors_test.cc's ClusterUserErrors).
#include <fmt/format.h>
#include <gtest/gtest.h>

#include "cluster/job.h"

namespace cleave::testing {
namespace {

TEST(ClusterJob, JobsOfOneTwoThreeAndEightWorkersSucceed) {
  for (int size : {1, 2, 3, 8}) {
    Job job("size" + std::to_string(size), size);
    pid_t scheduler = job.scheduler();
    std::vector<pid_t> workers;
    for (int i = 0; i < size; ++i) workers.push_back(job.worker(std::to_string(i), {"roundtrip"}));
    std::string all;
    for (int i = 0; i < size; ++i) {
      EXPECT_EQ(job.wait(workers[i]), 0) << job.log("worker_" + std::to_string(i) + ".log");
      all += job.log("worker_" + std::to_string(i) + ".log");
    }
    EXPECT_EQ(job.wait(scheduler), 0) << job.log("scheduler.log");
    for (int rank = 0; rank < size; ++rank) {
      EXPECT_NE(all.find(fmt::format("rank {} of {} ok", rank, size)), std::string::npos) << all;
    }
  }
}

TEST(ClusterUserErrors, SevenOfEightWorkersNameTheMissingOne) {
  // MS_WORKER_NUM=8, node ids 0..7 without 5: the scheduler and every waiting worker print, every
  // quarter of MS_TOPO_TIMEOUT, how many registered and which MS_NODE_ID is missing; at the
  // timeout the job fails naming it.
  Job job("seven_of_eight", 8);
  const std::map<std::string, std::string> topo = {{"MS_TOPO_TIMEOUT", "4"}};
  std::map<std::string, std::string> sched_env = topo;
  sched_env["MS_ROLE"] = "MS_SCHED";
  pid_t scheduler = job.start_program({kProgram, "roundtrip"}, sched_env, "scheduler.log");
  std::vector<pid_t> workers;
  for (int id = 0; id < 8; ++id) {
    if (id == 5) continue;
    std::map<std::string, std::string> env = topo;
    env["MS_NODE_ID"] = std::to_string(id);
    workers.push_back(job.worker(std::to_string(id), {"roundtrip"}, env));
  }
  const std::string progress = "7 of MS_WORKER_NUM=8 registered (host ";
  const std::string missing = "missing: 1 worker, MS_NODE_ID 5 not taken";
  EXPECT_TRUE(job.wait_for_log("scheduler.log", missing)) << job.log("scheduler.log");
  EXPECT_NE(job.log("scheduler.log").find("cleave scheduler: waiting for workers after "),
            std::string::npos);
  EXPECT_NE(job.log("scheduler.log").find(progress), std::string::npos);
  for (int id : {0, 7}) {
    const std::string log = fmt::format("worker_{}.log", id);
    EXPECT_TRUE(job.wait_for_log(log, missing)) << job.log(log);
    EXPECT_NE(job.log(log).find("cleave: worker (pid "), std::string::npos) << job.log(log);
  }
  EXPECT_EQ(job.wait(scheduler, seconds(15)), 1) << job.log("scheduler.log");
  EXPECT_NE(job.log("scheduler.log")
                .find("only 7 of MS_WORKER_NUM=8 workers registered within MS_TOPO_TIMEOUT=4 s"),
            std::string::npos)
      << job.log("scheduler.log");
  for (pid_t worker : workers) EXPECT_EQ(job.wait(worker, seconds(15)), 1);
  EXPECT_NE(job.log("worker_0.log").find(missing), std::string::npos);
}

}  // namespace
}  // namespace cleave::testing

// When a user gets it wrong (issue 16): jobs never merge, no silent waits, and the first error
// reaches every process at once. Real processes on 127.0.0.1, as seed 000's run.sh starts them.
// NOTE [What defines a job], NOTE [No silent waits] and NOTE [Failing workers report] in
// src/cluster/scheduler.h.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include "cluster/job.h"

namespace cleave::testing {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

TEST(ClusterUserErrors, TwoJobsOnOnePortNeverMerge) {
  // Two jobs without CLEAVE_JOB_TOKEN on one MS_SCHED_PORT, their workers started interleaved:
  // job A runs `roundtrip`, job B `roundtrip 50`. B's scheduler cannot bind the port; B's workers
  // reach A's scheduler and are refused at once, naming both commands; job A succeeds.
  Job job("two_jobs", 2);
  // MS_TOPO_TIMEOUT: job A's four processes must form their cluster while job B's start beside
  // them; under a full build on the same 2 cores that took more than the 10 s of job.h once.
  const std::map<std::string, std::string> no_token = {{"CLEAVE_JOB_TOKEN", ""},
                                                       {"MS_TOPO_TIMEOUT", "60"}};
  std::map<std::string, std::string> sched_env = no_token;
  sched_env["MS_ROLE"] = "MS_SCHED";
  pid_t scheduler_a = job.start_program({kProgram, "roundtrip"}, sched_env, "scheduler_a.log");
  ASSERT_TRUE(job.wait_for_log("scheduler_a.log", "serving a job")) << job.log("scheduler_a.log");
  pid_t scheduler_b =
      job.start_program({kProgram, "roundtrip", "50"}, sched_env, "scheduler_b.log");
  const auto start = Clock::now();
  std::vector<pid_t> a, b;
  for (int i = 0; i < 2; ++i) {
    a.push_back(job.worker(fmt::format("a{}", i), {"roundtrip"}, no_token));
    b.push_back(job.worker(fmt::format("b{}", i), {"roundtrip", "50"}, no_token));
  }
  for (int i = 0; i < 2; ++i) {
    const std::string log = fmt::format("worker_b{}.log", i);
    EXPECT_EQ(job.wait(b[i], seconds(10)), 1) << job.log(log);
    EXPECT_NE(job.log(log).find("refused this worker: it belongs to another job: it runs `"),
              std::string::npos)
        << job.log(log);
    EXPECT_NE(job.log(log).find(" roundtrip 50` but this job's scheduler runs `"),
              std::string::npos)
        << job.log(log);
  }
  const double refused_s = seconds_since(start);
  // "At once": no registration timeout; generous for a loaded 2-core machine.
  EXPECT_LT(refused_s, 5.0);
  std::printf("job B's workers refused %.2f s after they were started\n", refused_s);
  EXPECT_EQ(job.wait(scheduler_b), 1) << job.log("scheduler_b.log");
  for (int i = 0; i < 2; ++i) {
    EXPECT_EQ(job.wait(a[i], seconds(20)), 0) << job.log(fmt::format("worker_a{}.log", i));
  }
  EXPECT_EQ(job.wait(scheduler_a), 0) << job.log("scheduler_a.log");
  EXPECT_NE(job.log("scheduler_a.log").find("refused a worker on host "), std::string::npos);
}

TEST(ClusterUserErrors, UnresolvableSchedulerHostFailsAtOnce) {
  Job job("unresolvable", 1);
  const std::map<std::string, std::string> env = {{"MS_SCHED_HOST", "nonexistent.invalid"}};
  std::map<std::string, std::string> sched_env = env;
  sched_env["MS_ROLE"] = "MS_SCHED";
  const auto start = Clock::now();
  pid_t scheduler = job.start_program({kProgram, "roundtrip"}, sched_env, "scheduler.log");
  pid_t worker = job.worker("0", {"roundtrip"}, env);
  EXPECT_EQ(job.wait(scheduler, seconds(10)), 1);
  EXPECT_EQ(job.wait(worker, seconds(10)), 1);
  const double ended_s = seconds_since(start);
  EXPECT_LT(ended_s, 5.0);  // not MS_TOPO_TIMEOUT; generous for a loaded machine
  std::printf("both processes ended %.2f s after they were started\n", ended_s);
  for (const std::string log : {"scheduler.log", "worker_0.log"}) {
    EXPECT_NE(job.log(log).find("MS_SCHED_HOST='nonexistent.invalid' does not resolve to an "
                                "address"),
              std::string::npos)
        << job.log(log);
  }
}

TEST(ClusterUserErrors, AWorkerStartedBeforeItsSchedulerSaysItRetries) {
  // Nothing listens for 2 s: the worker says so (connection refused) and joins once the scheduler
  // is up.
  Job job("late_scheduler", 1);
  pid_t worker = job.worker("0", {"roundtrip"});
  EXPECT_TRUE(job.wait_for_log("worker_0.log", "yet (")) << job.log("worker_0.log");
  const std::string log = job.log("worker_0.log");
  EXPECT_NE(log.find("cleave: worker (pid "), std::string::npos) << log;
  EXPECT_NE(log.find("cannot reach the scheduler at 127.0.0.1:" + job.env().at("MS_SCHED_PORT")),
            std::string::npos)
      << log;
  EXPECT_NE(log.find("Connection refused"), std::string::npos) << log;
  EXPECT_NE(log.find("retrying until MS_TOPO_TIMEOUT=10 s"), std::string::npos) << log;
  pid_t scheduler = job.scheduler();
  EXPECT_EQ(job.wait(worker, seconds(20)), 0) << job.log("worker_0.log");
  EXPECT_EQ(job.wait(scheduler), 0) << job.log("scheduler.log");
}

TEST(ClusterUserErrors, AFailingWorkerEndsTheJobAtOnceWithItsError) {
  // Rank 2 of 4 throws (as a data reader with a wrong DATA_PATH would) while the others wait;
  // its error, not a heartbeat timeout (3 s here), ends every process, named in every log.
  constexpr int kWorkers = 4;
  Job job("failing_worker", kWorkers);
  pid_t scheduler = job.scheduler();
  std::vector<pid_t> workers;
  for (int rank = 0; rank < kWorkers; ++rank) {
    workers.push_back(
        job.worker(std::to_string(rank), {"error", "2"}, {{"MS_NODE_ID", std::to_string(rank)}}));
  }
  ASSERT_TRUE(job.wait_for_log("worker_2.log", "ready rank 2")) << job.log("worker_2.log");
  EXPECT_EQ(job.wait(workers[2], seconds(10)), 1) << job.log("worker_2.log");
  const auto failed = Clock::now();
  const std::string error =
      "cannot read '/no/such/MNIST_Data/train/train-images-idx3-ubyte': No such file";
  for (int rank : {0, 1, 3}) {
    const std::string log = fmt::format("worker_{}.log", rank);
    EXPECT_EQ(job.wait(workers[rank], seconds(10)), 1) << job.log(log);
    EXPECT_NE(job.log(log).find(" stops: the job failed: rank 2 (host "), std::string::npos)
        << job.log(log);
    EXPECT_NE(job.log(log).find(") failed: " + error), std::string::npos) << job.log(log);
  }
  EXPECT_EQ(job.wait(scheduler, seconds(10)), 1) << job.log("scheduler.log");
  const double ended_s = seconds_since(failed);
  // About 1 s by design (the scheduler stays 1 s for the reporter to end first); the logs above,
  // not this generous bound, show that no heartbeat timeout ended the job.
  EXPECT_LT(ended_s, 4.0);
  std::printf("every process ended %.2f s after the failing worker\n", ended_s);
  EXPECT_NE(job.log("scheduler.log").find("job failed: rank 2 (host "), std::string::npos);
  EXPECT_NE(job.log("scheduler.log").find("failed: " + error), std::string::npos);
  EXPECT_EQ(job.log("scheduler.log").find("no heartbeat"), std::string::npos);
}

TEST(ClusterUserErrors, AnUncaughtExceptionEndsTheJobWithItsMessage) {
  Job job("uncaught", 3);
  pid_t scheduler = job.scheduler();
  std::vector<pid_t> workers;
  for (int rank = 0; rank < 3; ++rank) {
    workers.push_back(
        job.worker(std::to_string(rank), {"throw", "1"}, {{"MS_NODE_ID", std::to_string(rank)}}));
  }
  EXPECT_NE(job.wait(workers[1], seconds(10)), 0) << job.log("worker_1.log");  // SIGABRT
  for (int rank : {0, 2}) {
    const std::string log = fmt::format("worker_{}.log", rank);
    EXPECT_EQ(job.wait(workers[rank], seconds(10)), 1) << job.log(log);
    EXPECT_NE(job.log(log).find("the job failed: rank 1 (host "), std::string::npos)
        << job.log(log);
    EXPECT_NE(job.log(log).find(
                  "failed: terminated by an uncaught exception: boom in a thread of rank 1"),
              std::string::npos)
        << job.log(log);
  }
  EXPECT_EQ(job.wait(scheduler, seconds(10)), 1) << job.log("scheduler.log");
  EXPECT_EQ(job.log("scheduler.log").find("no heartbeat"), std::string::npos);
}

// A deadlock: every rank waits for ranks that wait too (NOTE [Deadlocks] in
// src/cluster/liveness.h). The job fails within the stuck bound (2 s here) plus heartbeats,
// not CLEAVE_COMM_TIMEOUT_MS (60 s), naming what every rank waits for.
// Over TCP (CLEAVE_COMM_SHM=0): the shared-memory collectives name a mismatched order at once
// (MismatchedCollectivesOnSharedMemoryAreNamedAtOnce below).
// A scheduler and kWorkers workers running `mode` of the test program, all with `env`, started
// and waited for until every worker printed "ready rank R" (`ready` false, with the failure
// recorded, when one did not).
constexpr int kWorkers = 3;
struct ReadyJob {
  bool ready = false;
  pid_t scheduler = 0;
  std::vector<pid_t> workers;
};
ReadyJob start_ready_job(Job& job, const std::string& mode,
                         const std::map<std::string, std::string>& env) {
  std::map<std::string, std::string> sched_env = env;
  sched_env["MS_ROLE"] = "MS_SCHED";
  ReadyJob j;
  j.scheduler = job.start_program({kProgram, "roundtrip"}, sched_env, "scheduler.log");
  for (int rank = 0; rank < kWorkers; ++rank) {
    std::map<std::string, std::string> extra = env;
    extra["MS_NODE_ID"] = std::to_string(rank);
    j.workers.push_back(job.worker(std::to_string(rank), {mode}, extra));
  }
  for (int rank = 0; rank < kWorkers; ++rank) {
    const std::string log = fmt::format("worker_{}.log", rank);
    if (!job.wait_for_log(log, fmt::format("ready rank {}", rank))) {
      ADD_FAILURE() << "worker " << rank << " never got ready: " << job.log(log);
      return j;
    }
  }
  j.ready = true;
  return j;
}

// Waits for every worker of `j` to exit with status 1 (within `timeout` each), then for the
// scheduler; returns the seconds since `start`.
double wait_failed_job(Job& job, const ReadyJob& j, std::chrono::steady_clock::time_point start,
                       seconds timeout) {
  for (int rank = 0; rank < kWorkers; ++rank) {
    const std::string log = fmt::format("worker_{}.log", rank);
    EXPECT_EQ(job.wait(j.workers[rank], timeout), 1) << job.log(log);
  }
  EXPECT_EQ(job.wait(j.scheduler, seconds(10)), 1) << job.log("scheduler.log");
  return seconds_since(start);
}

void expect_deadlock_found(const std::string& name, const std::string& mode,
                           const std::vector<std::string>& waits) {
  Job job(name, kWorkers);
  const ReadyJob j = start_ready_job(job, mode,
                                     {{"CLEAVE_STUCK_TIMEOUT_MS", "2000"},
                                      {"CLEAVE_COMM_TIMEOUT_MS", "60000"},
                                      {"CLEAVE_COMM_SHM", "0"}});
  ASSERT_TRUE(j.ready);
  const double ended_s = wait_failed_job(job, j, Clock::now(), seconds(30));
  for (int rank = 0; rank < kWorkers; ++rank) {
    const std::string log = job.log(fmt::format("worker_{}.log", rank));
    EXPECT_NE(log.find(" stops: the job failed: deadlock: ranks 0, 1, 2 have waited "
                       "longer than CLEAVE_STUCK_TIMEOUT_MS=2000 ms"),
              std::string::npos)
        << log;
  }
  EXPECT_LT(ended_s, 20.0);  // far below CLEAVE_COMM_TIMEOUT_MS=60 s; generous under load
  std::printf("%s: every process ended %.2f s after the wait began (bound 2 s)\n", mode.c_str(),
              ended_s);
  const std::string log = job.log("scheduler.log");
  for (const std::string& wait : waits) EXPECT_NE(log.find(wait), std::string::npos) << log;
}

TEST(ClusterUserErrors, MismatchedCollectiveOrderIsADeadlockNamingEveryRanksWait) {
  expect_deadlock_found(
      "mismatch", "mismatch",
      {"\n  rank 0 (host ", "AllReduce on group 'world' (gloo) for world ranks 1, 2",
       "\n  rank 1 (host ", "\n  rank 2 (host ",
       "Broadcast on group 'world' (gloo) for world ranks 0, 2"});
}

// On one host the world group's collectives go through shared memory, where every rank sees the
// call of every other (NOTE [Calls checked in shared-memory collectives]): the job ends at once
// with the mismatch, not after the deadlock bound, the communication timeout or a heartbeat
// timeout (a wrong call is no lost peer, so nobody waits for the scheduler's verdict on one).
TEST(ClusterUserErrors, MismatchedCollectivesOnSharedMemoryAreNamedAtOnce) {
  Job job("mismatch_shm", kWorkers);
  const ReadyJob j = start_ready_job(job, "mismatch",
                                     {{"CLEAVE_STUCK_TIMEOUT_MS", "60000"},
                                      {"CLEAVE_COMM_TIMEOUT_MS", "60000"},
                                      {"CLEAVE_HEARTBEAT_TIMEOUT_MS", "30000"}});
  ASSERT_TRUE(j.ready);
  const double ended_s = wait_failed_job(job, j, Clock::now(), seconds(40));
  // Without the fix every rank waited a heartbeat timeout (30 s here) for a verdict.
  EXPECT_LT(ended_s, 15.0);
  std::printf("every process ended %.2f s after the mismatched calls\n", ended_s);
  const std::string log = job.log("scheduler.log");
  EXPECT_NE(log.find("shared memory: rank 0 called AllReduce(sum) of 1000 elements of Float32 "
                     "while this rank called Broadcast from root 0 of 1000 elements of Float32"),
            std::string::npos)
      << log;
  EXPECT_EQ(log.find("deadlock"), std::string::npos) << log;
  EXPECT_EQ(log.find("no heartbeat"), std::string::npos) << log;
}

TEST(ClusterUserErrors, ReceivesWithoutSendsAreADeadlockNamingPeerAndTag) {
  expect_deadlock_found("recv_cycle", "recv_cycle",
                        {"Recv on group 'world' (gloo) with group rank 1, tag 7 for world rank 1",
                         "Recv on group 'world' (gloo) with group rank 2, tag 7 for world rank 2",
                         "Recv on group 'world' (gloo) with group rank 0, tag 7 for world rank 0"});
}

}  // namespace
}  // namespace cleave::testing

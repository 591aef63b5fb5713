// A rank that stays alive but never enters the collective its peers wait in (NOTE [Stuck
// collectives] in src/cluster/liveness.h): every process ends with status 1 and one line naming
// the stuck rank, its host and what it and this process were doing, within
// CLEAVE_STUCK_TIMEOUT_MS (2 s here) plus a few heartbeats; a rank that computes for longer than
// that bound is not stuck.
#include <gtest/gtest.h>
#include <signal.h>

#include <thread>

#include "cluster/job.h"

namespace cleave::testing {
namespace {

constexpr int kWorkers = 3;
constexpr int kCulprit = 1;

std::string worker_log(int rank) { return "worker_" + std::to_string(rank) + ".log"; }

int count(const std::string& text, const std::string& fragment) {
  int n = 0;
  for (size_t at = text.find(fragment); at != std::string::npos; at = text.find(fragment, at + 1)) {
    ++n;
  }
  return n;
}

struct StuckJob {
  Job job;
  pid_t scheduler;
  std::vector<pid_t> workers;

  // By default the collectives' own timeout is far away: only stuck detection can end the job
  // quickly.
  StuckJob(const std::string& name, const std::vector<std::string>& args,
           const std::string& stuck_timeout_ms, const std::string& comm_timeout_ms = "60000")
      : job(name, kWorkers) {
    std::map<std::string, std::string> env = {{"CLEAVE_STUCK_TIMEOUT_MS", stuck_timeout_ms},
                                              {"CLEAVE_COMM_TIMEOUT_MS", comm_timeout_ms}};
    std::map<std::string, std::string> scheduler_env = env;
    scheduler_env["MS_ROLE"] = "MS_SCHED";
    scheduler = job.start_program({kProgram, "roundtrip"}, scheduler_env, "scheduler.log");
    for (int rank = 0; rank < kWorkers; ++rank) {
      std::map<std::string, std::string> extra = env;
      extra["MS_NODE_ID"] = std::to_string(rank);
      workers.push_back(job.worker(std::to_string(rank), args, extra));
    }
    for (int rank = 0; rank < kWorkers; ++rank) {
      EXPECT_TRUE(job.wait_for_log(worker_log(rank), "ready rank " + std::to_string(rank)))
          << job.log(worker_log(rank));
    }
  }
};

TEST(ClusterStuck, RankThatNeverEntersTheCollectiveStopsEveryProcess) {
  StuckJob running("stuck_rank", {"stuck", std::to_string(kCulprit)}, "2000");
  auto start = std::chrono::steady_clock::now();
  for (int rank = 0; rank < kWorkers; ++rank) {
    EXPECT_EQ(running.job.wait(running.workers[rank], seconds(15)), 1)
        << running.job.log(worker_log(rank));
    std::string log = running.job.log(worker_log(rank));
    EXPECT_EQ(count(log, " stops: "), 1) << log;
    EXPECT_NE(log.find("the job failed: rank 1 (host "), std::string::npos) << log;
    // The waiters named are those past the bound at the scheduler's check: 0, 2 or both.
    EXPECT_TRUE(log.find("is stuck: ranks 0, 2 have waited up to ") != std::string::npos ||
                log.find("is stuck: rank 0 has waited up to ") != std::string::npos ||
                log.find("is stuck: rank 2 has waited up to ") != std::string::npos)
        << log;
    EXPECT_NE(log.find("ms for it in AllReduce on group 'world' (gloo) (CLEAVE_STUCK_TIMEOUT_MS="
                       "2000), while it made no progress for "),
              std::string::npos)
        << log;
    EXPECT_NE(log.find("it was sleeping on purpose (cluster_test_program stuck)"),
              std::string::npos)
        << log;
    if (rank == kCulprit) {
      EXPECT_NE(log.find("; this process was sleeping on purpose"), std::string::npos) << log;
    } else {
      // What this process was doing: the primitive's ActivityScope and the comm operation.
      EXPECT_NE(log.find("; this process was in AllReduce on group 'hccl_world_group', waiting "),
                std::string::npos)
          << log;
      EXPECT_NE(log.find(" ms in AllReduce on group 'world' (gloo) for world ranks "),
                std::string::npos)
          << log;
    }
  }
  EXPECT_EQ(running.job.wait(running.scheduler, seconds(10)), 1)
      << running.job.log("scheduler.log");
  EXPECT_NE(running.job.log("scheduler.log").find("job failed: rank 1 (host "), std::string::npos)
      << running.job.log("scheduler.log");
  // 2 s of waiting, then a few heartbeats (200 ms) to tell everyone; far below the 60 s
  // collective timeout and the 3 s heartbeat timeout plays no part (every rank heartbeats).
  EXPECT_LT(std::chrono::steady_clock::now() - start, seconds(8));
}

TEST(ClusterStuck, RankThatNeverReachesABarrierStopsEveryProcess) {
  StuckJob running("stuck_barrier", {"stuck_barrier", std::to_string(kCulprit)}, "2000");
  auto start = std::chrono::steady_clock::now();
  for (int rank = 0; rank < kWorkers; ++rank) {
    EXPECT_EQ(running.job.wait(running.workers[rank], seconds(15)), 1)
        << running.job.log(worker_log(rank));
    std::string log = running.job.log(worker_log(rank));
    EXPECT_EQ(count(log, " stops: "), 1) << log;
    EXPECT_NE(log.find("the job failed: rank 1 (host "), std::string::npos) << log;
    EXPECT_NE(log.find("ms for it in barrier 'after_compute' (CLEAVE_STUCK_TIMEOUT_MS=2000)"),
              std::string::npos)
        << log;
    EXPECT_NE(log.find("it was sleeping on purpose (cluster_test_program stuck)"),
              std::string::npos)
        << log;
    if (rank != kCulprit) {
      EXPECT_NE(log.find("; this process was waiting at barrier 'after_compute'"),
                std::string::npos)
          << log;
    }
  }
  EXPECT_EQ(running.job.wait(running.scheduler, seconds(10)), 1);
  EXPECT_LT(std::chrono::steady_clock::now() - start, seconds(8));
}

TEST(ClusterStuck, RankKilledDuringACollectiveIsNamedRatherThanTheTransportError) {
  // Stuck detection off: the killed rank is found by its missing heartbeats (3 s), while Gloo
  // sees its connection close at once; NOTE [Failure hook] makes the others wait for the verdict.
  StuckJob running("killed_in_collective", {"stuck", std::to_string(kCulprit)}, "0");
  std::this_thread::sleep_for(milliseconds(300));  // the others enter the AllReduce
  ASSERT_EQ(kill(running.workers[kCulprit], SIGKILL), 0);
  auto start = std::chrono::steady_clock::now();
  for (int rank = 0; rank < kWorkers; ++rank) {
    if (rank == kCulprit) continue;
    EXPECT_EQ(running.job.wait(running.workers[rank], seconds(15)), 1)
        << running.job.log(worker_log(rank));
    std::string log = running.job.log(worker_log(rank));
    EXPECT_EQ(count(log, " stops: "), 1) << log;
    EXPECT_NE(log.find("the job failed: rank 1 (host "), std::string::npos) << log;
    EXPECT_NE(log.find("was lost: no heartbeat for "), std::string::npos) << log;
    EXPECT_NE(log.find("; this process was in AllReduce on group 'hccl_world_group', waiting "),
              std::string::npos)
        << log;
    EXPECT_EQ(log.find("AllReduce on group 'world' (gloo, rank"), std::string::npos)
        << "the transport's error reached the user: " << log;
  }
  EXPECT_EQ(running.job.wait(running.scheduler, seconds(10)), 1);
  EXPECT_LT(std::chrono::steady_clock::now() - start, seconds(10));
}

TEST(ClusterStuck, RankThatComputesLongerThanTheBoundIsNotStuck) {
  // Rank 1 computes for 3 s while the others wait 3 s in AllReduce with a 1 s bound.
  StuckJob running("slow_rank", {"slow", std::to_string(kCulprit), "3000"}, "1000");
  for (int rank = 0; rank < kWorkers; ++rank) {
    EXPECT_EQ(running.job.wait(running.workers[rank], seconds(15)), 0)
        << running.job.log(worker_log(rank));
    EXPECT_NE(running.job.log(worker_log(rank)).find("all_reduce ok"), std::string::npos)
        << running.job.log(worker_log(rank));
  }
  EXPECT_EQ(running.job.wait(running.scheduler, seconds(10)), 0)
      << running.job.log("scheduler.log");
}

TEST(ClusterStuck, CollectiveTimeoutOfAHealthyJobStillReachesTheCaller) {
  // Rank 1 computes for 6 s; the others' AllReduce times out after 1 s (stuck detection off).
  // The failure hook finds the job healthy and lets the operation's own error through. The first
  // rank to fail reports it (NOTE [Failing workers report]); the other one ends with its own
  // error or, when the report came first, with that first error.
  StuckJob running("collective_timeout", {"slow", std::to_string(kCulprit), "6000"}, "0", "1000");
  int own_errors = 0;
  for (int rank : {0, 2}) {
    EXPECT_EQ(running.job.wait(running.workers[rank], seconds(15)), 1)
        << running.job.log(worker_log(rank));
    std::string log = running.job.log(worker_log(rank));
    const std::string own =
        "AllReduce on group 'world' (gloo, rank " + std::to_string(rank) + " of 3";
    if (log.find(" stops: ") == std::string::npos) {
      ++own_errors;
      EXPECT_NE(log.find(own), std::string::npos) << log;
      EXPECT_NE(log.find("The group is now broken"), std::string::npos) << log;
    } else {
      const int other = 2 - rank;
      EXPECT_NE(log.find(" stops: the job failed: rank " + std::to_string(other) + " (host "),
                std::string::npos)
          << log;
      EXPECT_NE(
          log.find("AllReduce on group 'world' (gloo, rank " + std::to_string(other) + " of 3"),
          std::string::npos)
          << log;
    }
  }
  EXPECT_GE(own_errors, 1);
}

TEST(ClusterStuck, BadStuckTimeoutIsAClearError) {
  Job job("bad_stuck_timeout", 1);
  pid_t worker = job.worker("0", {"roundtrip"}, {{"CLEAVE_STUCK_TIMEOUT_MS", "soon"}});
  EXPECT_EQ(job.wait(worker), 1);
  EXPECT_NE(job.log("worker_0.log")
                .find("CLEAVE_STUCK_TIMEOUT_MS='soon' is invalid; expected a number of "
                      "milliseconds from 0 to 2147483647 (how long a rank may wait in a "
                      "collective for a peer that makes no progress"),
            std::string::npos)
      << job.log("worker_0.log");
}

}  // namespace
}  // namespace cleave::testing

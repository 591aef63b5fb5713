// NOTE [Threads per worker] (cleave/core/threads.h) with real processes on 127.0.0.1: workers of
// one host take an equal share of its cores, whether cleave-run or a hand-written script (the
// seeds' run.sh) starts them, and a user's OMP_NUM_THREADS is kept.
#include "cleave/core/threads.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "cluster/job.h"

namespace cleave::testing {
namespace {

std::string threads_line(int rank, int size, int local_rank, int threads) {
  return fmt::format("rank {} of {}: local {} of {}, {} OpenMP threads, {} in a started thread",
                     rank, size, local_rank, size, threads, threads);
}

TEST(ThreadsPerWorker, CleaveRunGivesEachWorkerItsShareAndSaysSo) {
  Job job("threads_run", 4);
  const int cores = threads::available_cores();
  const int share = threads::thread_share(cores, 4);
  pid_t run = job.start_program(
      {CLEAVE_RUN_PROGRAM, "--worker_num", "4", "--master_port", job.env().at("MS_SCHED_PORT"),
       "--log_dir", job.path("logs"), "--join", "--", CLEAVE_CLUSTER_TEST_PROGRAM, "threads"},
      {}, "cleave_run.log");
  ASSERT_EQ(job.wait(run, seconds(30)), 0) << job.log("cleave_run.log");
  const std::string output = job.log("cleave_run.log");
  EXPECT_NE(output.find(fmt::format("cleave-run: 4 workers share this host's {} core{}: "
                                    "OMP_NUM_THREADS={} for each",
                                    cores, cores == 1 ? "" : "s", share)),
            std::string::npos)
      << output;
  for (int rank = 0; rank < 4; ++rank) {
    EXPECT_NE(output.find(threads_line(rank, 4, rank, share)), std::string::npos) << output;
  }
}

TEST(ThreadsPerWorker, WorkersStartedByAScriptTakeTheirShareAndTheFirstSaysSo) {
  Job job("threads_script", 3);
  const int cores = threads::available_cores();
  const int share = threads::thread_share(cores, 3);
  pid_t sched = job.scheduler({"threads"});
  std::vector<pid_t> workers;
  for (int rank = 0; rank < 3; ++rank) {
    workers.push_back(
        job.worker(std::to_string(rank), {"threads"}, {{"MS_NODE_ID", std::to_string(rank)}}));
  }
  for (int rank = 0; rank < 3; ++rank) {
    const std::string log = fmt::format("worker_{}.log", rank);
    ASSERT_EQ(job.wait(workers[static_cast<size_t>(rank)], seconds(30)), 0) << job.log(log);
    EXPECT_NE(job.log(log).find(threads_line(rank, 3, rank, share)), std::string::npos)
        << job.log(log);
    const bool says = job.log(log).find("cleave: 3 workers share this host's") != std::string::npos;
    EXPECT_EQ(says, rank == 0) << job.log(log);
  }
  EXPECT_EQ(job.wait(sched), 0) << job.log("scheduler.log");
}

TEST(ThreadsPerWorker, AUsersOmpNumThreadsIsKept) {
  Job job("threads_user", 2);
  pid_t run = job.start_program(
      {CLEAVE_RUN_PROGRAM, "--worker_num", "2", "--master_port", job.env().at("MS_SCHED_PORT"),
       "--log_dir", job.path("logs"), "--join", "--", CLEAVE_CLUSTER_TEST_PROGRAM, "threads"},
      {{"OMP_NUM_THREADS", "3"}}, "cleave_run.log");
  ASSERT_EQ(job.wait(run, seconds(30)), 0) << job.log("cleave_run.log");
  const std::string output = job.log("cleave_run.log");
  EXPECT_EQ(output.find("share this host's"), std::string::npos) << output;
  // A thread cleave starts keeps the process's value from the environment.
  for (int rank = 0; rank < 2; ++rank) {
    EXPECT_NE(output.find(threads_line(rank, 2, rank, 3)), std::string::npos) << output;
  }
}

}  // namespace
}  // namespace cleave::testing

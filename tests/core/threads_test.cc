// NOTE [Threads per worker] (cleave/core/threads.h) in one process: the share, when it applies,
// and the threads cleave starts.
#include "cleave/core/threads.h"

#include <gtest/gtest.h>

#include <thread>

#include "cleave/core/error.h"
#include "testing/env.h"

namespace cleave::threads {
namespace {

TEST(Threads, AShareIsTheCoresDividedByTheWorkersAndAtLeastOne) {
  EXPECT_EQ(thread_share(16, 8), 2);
  EXPECT_EQ(thread_share(16, 5), 3);
  EXPECT_EQ(thread_share(2, 8), 1);
  EXPECT_EQ(thread_share(1, 1), 1);
  EXPECT_THROW(thread_share(0, 1), Error);
  EXPECT_THROW(thread_share(2, 0), Error);
  EXPECT_THROW(set_intra_op_threads(0), Error);
}

TEST(Threads, AvailableCoresFollowTheAffinityMask) {
  EXPECT_GE(available_cores(), 1);
  EXPECT_LE(available_cores(), static_cast<int>(std::thread::hardware_concurrency()));
}

TEST(Threads, AUserSettingOrALoneWorkerChangesNothing) {
  const int before = intra_op_threads();
  {
    testing::ScopedEnv env("OMP_NUM_THREADS", "7");
    EXPECT_EQ(user_thread_setting(), "7");
    EXPECT_FALSE(share_host_cores(4).has_value());
  }
  testing::ScopedEnv env("OMP_NUM_THREADS", std::nullopt);
  EXPECT_FALSE(user_thread_setting().has_value());
  EXPECT_FALSE(share_host_cores(1).has_value());
  EXPECT_EQ(intra_op_threads(), before);
}

TEST(Threads, TheShareReachesThisThreadAndTheThreadsThatAdoptIt) {
  testing::ScopedEnv env("OMP_NUM_THREADS", std::nullopt);
  const int before = intra_op_threads();
  const int workers = available_cores() * 2;  // a share of 1
  const std::optional<std::string> said = share_host_cores(workers);
  ASSERT_TRUE(said.has_value());
  EXPECT_NE(said->find(std::to_string(workers) + " workers share this host's"), std::string::npos)
      << *said;
  EXPECT_NE(said->find(": 1 OpenMP thread each"), std::string::npos) << *said;
  EXPECT_EQ(intra_op_threads(), 1);
  int adopted = 0;
  std::thread([&] {
    adopt_intra_op_threads();
    adopted = intra_op_threads();
  }).join();
  EXPECT_EQ(adopted, 1);
  set_intra_op_threads(before);
  EXPECT_EQ(intra_op_threads(), before);
}

}  // namespace
}  // namespace cleave::threads

// The inproc rendezvous alone (comm/inproc/inproc_rendezvous.h, NOTE [Inproc waiting]): ranks as
// threads pass rendezvous together, and the ranks that do not come are named at the deadline, at
// once when they have left, and to a rank that comes too late.
#include "comm/inproc/inproc_rendezvous.h"

#include <gtest/gtest.h>
#include <pthread.h>
#include <signal.h>

#include <atomic>
#include <thread>

#include "cleave/core/error.h"
#include "testing/ranks.h"

namespace cleave::comm {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;
using testing::run_threads;

// The message of the BackendFailure that fn throws ("" when it returns).
std::string failure_of(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const BackendFailure& e) {
    return e.what();
  }
  return "";
}

TEST(InprocRendezvous, NoRankPassesBeforeEveryRankHasArrived) {
  for (int size : {1, 2, 3, 8}) {
    InprocRendezvous rendezvous(size);
    std::atomic<int> arrived{0};
    run_threads(size, [&](int rank) {
      for (uint64_t k = 1; k <= 50; ++k) {
        ++arrived;
        rendezvous.arrive(rank, k, WaitClock::now() + seconds(20), seconds(20), "arrive");
        ASSERT_GE(arrived.load(), static_cast<int>(k) * size) << "size " << size << " k " << k;
      }
    });
  }
}

TEST(InprocRendezvous, TheDeadlineNamesTheRanksThatDidNotArrive) {
  InprocRendezvous rendezvous(4);
  run_threads(4, [&](int rank) {
    if (rank == 1 || rank == 3) return;
    const std::string failure = failure_of([&] {
      rendezvous.arrive(rank, 1, WaitClock::now() + milliseconds(100), milliseconds(100), "join");
    });
    EXPECT_NE(failure.find("rank(s) 1, 3 did not join within the timeout of 100 ms"),
              std::string::npos)
        << failure;
  });
}

TEST(InprocRendezvous, ARankThatDepartedIsNamedAtOnceAndALateOneFailsAtOnce) {
  InprocRendezvous rendezvous(3);
  rendezvous.depart(2);
  EXPECT_TRUE(rendezvous.departed(2));
  EXPECT_FALSE(rendezvous.departed(0));
  run_threads(2, [&](int rank) {
    const auto start = WaitClock::now();
    const std::string failure = failure_of(
        [&] { rendezvous.arrive(rank, 1, WaitClock::now() + seconds(30), seconds(30), "arrive"); });
    EXPECT_NE(failure.find("rank(s) 2 left the group"), std::string::npos) << failure;
    EXPECT_NE(failure.find("so it can never arrive"), std::string::npos) << failure;
    EXPECT_LT(WaitClock::now() - start, seconds(10));
  });
  // Rank 2 arriving anyway: the others gave up on it.
  const std::string late = failure_of(
      [&] { rendezvous.arrive(2, 1, WaitClock::now() + seconds(30), seconds(30), "arrive"); });
  EXPECT_NE(late.find("this rank came too late"), std::string::npos) << late;
}

// A thread held inside a signal handler until `held` is cleared: paused wherever it was.
std::atomic<bool> held{false};
void hold(int) {
  while (held.load()) {
    timespec ts{0, 1'000'000};
    nanosleep(&ts, nullptr);
  }
}

// Regression: rank 0 waits at rendezvous 1; before it sees the gate open, rank 1 passes it and
// gives up at rendezvous 2 on rank 2, which has left. Rank 0 passed rendezvous 1 and must return
// from it (its next arrive fails), not fail with rendezvous 2's error (the group creation of
// Timeouts.ARankThatDoesNotJoinACollectiveFailsTheOthers/inproc failed so under load).
TEST(InprocRendezvous, ARankThatPassedIsNotFailedByTheNextRendezvousGivingUp) {
  InprocRendezvous rendezvous(3);
  const auto deadline = [] { return WaitClock::now() + seconds(30); };
  struct sigaction action {};
  action.sa_handler = hold;
  struct sigaction previous {};
  ASSERT_EQ(sigaction(SIGUSR2, &action, &previous), 0);
  std::atomic<bool> rank0_passed{false};
  std::string rank0_failure, rank0_next;
  std::thread rank0([&] {
    rank0_failure = failure_of([&] { rendezvous.arrive(0, 1, deadline(), seconds(30), "join"); });
    rank0_passed = rank0_failure.empty();
    rank0_next = failure_of([&] { rendezvous.arrive(0, 2, deadline(), seconds(30), "arrive"); });
  });
  std::this_thread::sleep_for(milliseconds(50));  // rank 0 waits at the gate
  held = true;
  pthread_kill(rank0.native_handle(), SIGUSR2);
  std::this_thread::sleep_for(milliseconds(10));  // and is held in the handler
  std::thread rank2([&] {
    rendezvous.arrive(2, 1, deadline(), seconds(30), "join");
    rendezvous.depart(2);
  });
  rendezvous.arrive(1, 1, deadline(), seconds(30), "join");
  rank2.join();
  EXPECT_NE(failure_of([&] {
              rendezvous.arrive(1, 2, deadline(), seconds(30), "arrive");
            }).find("rank(s) 2 left the group"),
            std::string::npos);
  held = false;
  rank0.join();
  sigaction(SIGUSR2, &previous, nullptr);
  EXPECT_TRUE(rank0_passed) << rank0_failure;
  EXPECT_NE(rank0_next.find("rank(s) 2 left the group"), std::string::npos) << rank0_next;
}

}  // namespace
}  // namespace cleave::comm

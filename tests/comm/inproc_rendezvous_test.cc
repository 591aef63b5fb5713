// The inproc rendezvous alone (comm/inproc/inproc_rendezvous.h, NOTE [Inproc waiting]): ranks as
// threads pass rendezvous together, and the ranks that do not come are named at the deadline, at
// once when they have left, and to a rank that comes too late.
#include "comm/inproc/inproc_rendezvous.h"

#include <gtest/gtest.h>

#include <atomic>
#include <thread>

#include "cleave/core/error.h"
#include "comm/thread_world.h"

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

}  // namespace
}  // namespace cleave::comm

// Inproc point-to-point alone (comm/inproc/inproc_p2p.h, NOTE [Inproc point-to-point]): posting
// never blocks, so one thread plays every rank.
#include "comm/inproc/inproc_p2p.h"

#include <gtest/gtest.h>

#include "cleave/core/error.h"
#include "testing/gradcheck.h"

namespace cleave::comm {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;

Tensor values(std::initializer_list<int64_t> v) {
  Tensor t = Tensor::empty(Shape({static_cast<int64_t>(v.size())}), DType::kInt64);
  int64_t i = 0;
  for (int64_t x : v) t.data<int64_t>()[i++] = x;
  return t;
}

std::string failure_of(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const BackendFailure& e) {
    return e.what();
  }
  return "";
}

WaitClock::time_point soon() { return WaitClock::now() + seconds(20); }

TEST(InprocP2P, EqualTagsMatchInPostingOrderAndOtherTagsApart) {
  InprocRendezvous ranks(2);
  InprocPointToPoint p2p(ranks);
  // Rank 0 sends 1, 2 with tag 7 and 3 with tag 8; rank 1 receives tag 8 first.
  auto s1 = p2p.post(values({1}), 0, 1, 7, true);
  auto s2 = p2p.post(values({2}), 0, 1, 7, true);
  auto s3 = p2p.post(values({3}), 0, 1, 8, true);
  Tensor r8 = values({0}), r7a = values({0}), r7b = values({0});
  auto e8 = p2p.post(r8, 1, 0, 8, false);
  auto e7a = p2p.post(r7a, 1, 0, 7, false);
  auto e7b = p2p.post(r7b, 1, 0, 7, false);
  for (const auto& e : {s1, s2, s3, e8, e7a, e7b}) p2p.await(*e, soon(), seconds(20));
  EXPECT_EQ(r8.data<int64_t>()[0], 3);
  EXPECT_EQ(r7a.data<int64_t>()[0], 1);
  EXPECT_EQ(r7b.data<int64_t>()[0], 2);
}

TEST(InprocP2P, ASendAndItsReceiveOfDifferentSizesFailBoth) {
  InprocRendezvous ranks(2);
  InprocPointToPoint p2p(ranks);
  auto recv = p2p.post(values({0, 0}), 1, 0, 3, false);
  auto send = p2p.post(values({1, 2, 3}), 0, 1, 3, true);
  EXPECT_EQ(failure_of([&] { p2p.await(*send, soon(), seconds(20)); }),
            "this send (tag 3) has 24 bytes but the matching receive on rank 1 expects 16 bytes; "
            "a send and its receive must have the same size");
  EXPECT_EQ(failure_of([&] { p2p.await(*recv, soon(), seconds(20)); }),
            "the matching send from rank 0 (tag 3) has 24 bytes but this receive expects 16 "
            "bytes; a send and its receive must have the same size");
}

TEST(InprocP2P, ATimedOutReceiveLeavesItsQueueAndNamesThePeer) {
  InprocRendezvous ranks(3);
  InprocPointToPoint p2p(ranks);
  auto recv = p2p.post(values({0}), 0, 2, 5, false);
  EXPECT_EQ(failure_of([&] { p2p.await(*recv, WaitClock::now(), milliseconds(40)); }),
            "the receive from rank 2 with tag 5 (8 bytes) found no matching send within the "
            "timeout of 40 ms");
  // The receive is gone: a later send with its tag waits for a receive of its own.
  auto send = p2p.post(values({9}), 2, 0, 5, true);
  EXPECT_NE(failure_of([&] { p2p.await(*send, WaitClock::now(), milliseconds(40)); }), "");
  p2p.retract(*send);
}

TEST(InprocP2P, AnEntryWaitingForARankThatDepartsFailsAtOnce) {
  InprocRendezvous ranks(2);
  InprocPointToPoint p2p(ranks);
  auto send = p2p.post(values({1}), 0, 1, 0, true);
  ranks.depart(1);
  p2p.wake_waiters_for(1);
  const auto start = WaitClock::now();
  EXPECT_EQ(failure_of([&] { p2p.await(*send, WaitClock::now() + seconds(30), seconds(30)); }),
            "rank 1 left the group (its ProcessGroup was destroyed) without posting the receive "
            "that matches this send (tag 0, 8 bytes)");
  EXPECT_LT(WaitClock::now() - start, seconds(10));
}

}  // namespace
}  // namespace cleave::comm

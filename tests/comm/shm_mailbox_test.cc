// Shared-memory mailboxes (cleave/comm/shm_mailbox.h) between ranks as threads.
#include "cleave/comm/shm_mailbox.h"

#include <gtest/gtest.h>

#include <chrono>
#include <cstdint>
#include <thread>

#include "testing/gradcheck.h"
#include "testing/ranks.h"

namespace cleave {
namespace {

TEST(ShmMailboxes, MessagesArriveByTagStepAfterStep) {
  // 0 -> 1 (tags 0 and 2, 3 and 1000 floats), 1 -> 0 (tag 1, 0 bytes), 2 -> 0 (tag 3).
  const std::vector<comm::MailboxEdge> edges = {
      {0, 1, 0, 3 * 4}, {1, 0, 1, 0}, {0, 1, 2, 1000 * 4}, {2, 0, 3, 4}};
  testing::run_world(3, [&](comm::ProcessGroup& group) {
    auto boxes = comm::ShmMailboxes::create(group, edges, std::chrono::seconds(10));
    ASSERT_NE(boxes, nullptr);
    const int r = group.rank();
    EXPECT_EQ(boxes->has(0), r == 0 || r == 1);
    EXPECT_EQ(boxes->has(3), r == 2 || r == 0);
    for (int step = 0; step < 50; ++step) {
      std::vector<float> small(3), big(1000), one(1);
      if (r == 0) {
        for (int k = 0; k < 3; ++k) small[k] = static_cast<float>(step * 10 + k);
        for (int k = 0; k < 1000; ++k) big[k] = static_cast<float>(step - k);
        // Sent in the other order than received: slots are per tag.
        boxes->send(2, big.data(), big.size() * 4);
        boxes->send(0, small.data(), small.size() * 4);
        boxes->recv(1, nullptr, 0);
        boxes->recv(3, one.data(), 4);
        EXPECT_EQ(one[0], static_cast<float>(-step));
      } else if (r == 1) {
        boxes->recv(0, small.data(), small.size() * 4);
        boxes->recv(2, big.data(), big.size() * 4);
        EXPECT_EQ(small[2], static_cast<float>(step * 10 + 2));
        EXPECT_EQ(big[999], static_cast<float>(step - 999));
        boxes->send(1, nullptr, 0);
      } else {
        one[0] = static_cast<float>(-step);
        boxes->send(3, one.data(), 4);
      }
    }
  });
}

TEST(ShmMailboxes, ErrorsNameTheEdge) {
  const std::vector<comm::MailboxEdge> edges = {{0, 1, 5, 8}};
  testing::run_world(2, [&](comm::ProcessGroup& group) {
    auto boxes = comm::ShmMailboxes::create(group, edges, std::chrono::milliseconds(200));
    ASSERT_NE(boxes, nullptr);
    double buf = 0;
    if (group.rank() == 1) {
      EXPECT_ERROR_KIND(boxes->recv(5, &buf, 8), ErrorKind::kUnavailable,
                        "no message with tag 5 within 200 ms", "peer rank 0");
      EXPECT_ERROR_KIND(boxes->recv(6, &buf, 8), ErrorKind::kInvalidArgument, "no edge with tag 6");
      EXPECT_ERROR(boxes->send(5, &buf, 8), "tag 5 is a receive of 8 bytes; got a send");
      group.barrier();  // rank 0 sends only now
      group.barrier();  // rank 0 has sent twice without this rank reading
      buf = 0;
      boxes->recv(5, &buf, 8);
      EXPECT_EQ(buf, 2.5);
    } else {
      group.barrier();
      buf = 2.5;
      boxes->send(5, &buf, 8);
      EXPECT_ERROR(boxes->send(5, &buf, 8), "has not read the previous message with tag 5");
      group.barrier();
    }
  });
}

TEST(ShmMailboxes, MessagesInPlace) {
  // NOTE [Messages in place]: rank 0 writes straight into message(tag) after claim(); rank 1 reads
  // it where it lies and releases it. A claim waits for that release, step after step; the area
  // is the same memory on both ranks (different mappings of one segment).
  const std::vector<comm::MailboxEdge> edges = {{0, 1, 7, 256 * 4}};
  for (const auto spin : {std::chrono::microseconds(0), std::chrono::microseconds(200)}) {
    testing::run_world(2, [&](comm::ProcessGroup& group) {
      auto boxes = comm::ShmMailboxes::create(group, edges, std::chrono::seconds(10), spin);
      ASSERT_NE(boxes, nullptr);
      auto* area = static_cast<float*>(boxes->message(7));
      EXPECT_EQ(reinterpret_cast<uintptr_t>(area) % 64, 0u);
      for (int step = 0; step < 40; ++step) {
        if (group.rank() == 0) {
          boxes->claim(7);  // the previous step's message has been released
          for (int k = 0; k < 256; ++k) area[k] = static_cast<float>(step * 1000 + k);
          boxes->send(7, area, 256 * 4);  // publishes, no copy
        } else {
          boxes->recv(7, area, 256 * 4);  // waits, no copy, keeps the slot
          EXPECT_EQ(area[0], static_cast<float>(step * 1000));
          EXPECT_EQ(area[255], static_cast<float>(step * 1000 + 255));
          if (step % 5 == 0) std::this_thread::sleep_for(std::chrono::milliseconds(2));
          EXPECT_EQ(area[17], static_cast<float>(step * 1000 + 17));  // not overwritten meanwhile
          boxes->release(7);
        }
      }
    });
  }
}

TEST(ShmMailboxes, AClaimWaitsForTheRelease) {
  const std::vector<comm::MailboxEdge> edges = {{0, 1, 2, 4}};
  testing::run_world(2, [&](comm::ProcessGroup& group) {
    auto boxes = comm::ShmMailboxes::create(group, edges, std::chrono::milliseconds(200));
    ASSERT_NE(boxes, nullptr);
    if (group.rank() == 0) {
      boxes->claim(2);
      boxes->send(2, boxes->message(2), 4);
      // Rank 1 reads in place and does not release: the slot stays taken.
      EXPECT_ERROR(boxes->claim(2), "has not read the previous message with tag 2");
      EXPECT_ERROR(boxes->release(2), "tag 2 is a send of 4 bytes; got a receive");
      group.barrier();
    } else {
      boxes->recv(2, boxes->message(2), 4);
      EXPECT_TRUE(boxes->arrived(2));  // read in place: still there
      EXPECT_ERROR(boxes->claim(2), "tag 2 is a receive of 4 bytes; got a send");
      group.barrier();
      boxes->release(2);
      EXPECT_FALSE(boxes->arrived(2));
    }
  });
  testing::run_world(2, [&](comm::ProcessGroup& group) {
    EXPECT_ERROR(comm::ShmMailboxes::create(group, edges, std::chrono::seconds(1),
                                            std::chrono::microseconds(-1)),
                 "spin is -1 us; expected >= 0");
  });
}

}  // namespace
}  // namespace cleave

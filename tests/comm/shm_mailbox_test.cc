// Shared-memory mailboxes (cleave/comm/shm_mailbox.h) between ranks as threads.
#include "cleave/comm/shm_mailbox.h"

#include <gtest/gtest.h>

#include "comm/thread_world.h"
#include "testing/gradcheck.h"

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
      EXPECT_ERROR(boxes->recv(5, &buf, 8), "no message with tag 5 within 200 ms", "peer rank 0");
      EXPECT_ERROR(boxes->recv(6, &buf, 8), "no edge with tag 6");
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

}  // namespace
}  // namespace cleave

// The shared-memory point-to-point with 64 MB messages, 64 rings' worth (the slow label, NOTE
// [Test labels] in tests/CMakeLists.txt; the other sizes are in shm_p2p_test.cc): through a ring
// of ranks over world sizes 2, 3 and 4 (not 8: 64 MB x 2 x 8 threads of memory), and both ways at
// once on 2 ranks.
#include <gtest/gtest.h>

#include <chrono>

#include "cleave/comm/process_group.h"
#include "comm/backends.h"
#include "comm/shm_testing.h"
#include "testing/ranks.h"

namespace cleave::comm {
namespace {

constexpr int64_t kBig = int64_t{64} << 20;

void run_world(int size, const std::function<void(ProcessGroup&)>& fn) {
  testing::run_world(size, fn, std::chrono::seconds(30), "gloo");
}

TEST(ShmP2P, SixtyFourMegabytesArriveOverWorldSizes) {
  for (int size : {2, 3, 4}) {
    run_world(size, [](ProcessGroup& g) {
      shm_testing::send_around_ring(g, kBig);
      EXPECT_EQ(p2p_transport(g), "shm");
    });
  }
  EXPECT_TRUE(shm_testing::leftover_segments().empty());
}

TEST(ShmP2P, TwoRanksSendingSixtyFourMegabytesToEachOtherAtOnceDoNotDeadlock) {
  run_world(2, [](ProcessGroup& g) { shm_testing::exchange_with_every_other(g, kBig); });
}

}  // namespace
}  // namespace cleave::comm

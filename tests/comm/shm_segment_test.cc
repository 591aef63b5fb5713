// The pieces under the shared-memory collectives, alone: the mapping of a segment
// (comm/shm/shm_mapping.h), a group's segment (comm/shm/shm_segment.h) and its barrier
// (comm/shm/shm_barrier.h), with members as threads over the memory store.
#include "comm/shm/shm_segment.h"

#include <gtest/gtest.h>
#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <cstring>

#include "comm/shm/shm_barrier.h"
#include "comm/shm/shm_mapping.h"
#include "comm/shm_testing.h"
#include "testing/ranks.h"

namespace cleave::comm {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;
using testing::run_threads;

std::string failure_of(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const BackendFailure& e) {
    return e.what();
  }
  return "";
}

TEST(ShmMapping, ACreatedSegmentIsZeroedSharedAndItsNameUnique) {
  const std::string name = fmt::format("/cleave-test-mapping-{}", getpid());
  auto created = shm::Mapping::create(name, 8192);
  ASSERT_NE(created, nullptr);
  EXPECT_EQ(created->size(), 8192u);
  EXPECT_EQ(shm::Mapping::create(name, 8192), nullptr) << "the name exists";
  auto opened = shm::Mapping::open(name, 8192);
  ASSERT_NE(opened, nullptr);
  shm_unlink(name.c_str());
  for (size_t i = 0; i < 8192; ++i) ASSERT_EQ(created->data()[i], std::byte{0}) << i;
  std::memcpy(created->data() + 100, "shared", 6);
  EXPECT_EQ(std::memcmp(opened->data() + 100, "shared", 6), 0);
  EXPECT_EQ(shm::Mapping::open(name, 8192), nullptr) << "unlinked";
}

// NOTE [One mapping per process under TSan]: built with TSan, a create() and an open() of one
// segment in one process share one address, and the mapping lives while either does; otherwise
// each call maps the segment anew.
TEST(ShmMapping, ATsanBuildMapsASegmentOncePerProcess) {
  const std::string name = fmt::format("/cleave-test-mapping-once-{}", getpid());
  auto created = shm::Mapping::create(name, 8192);
  ASSERT_NE(created, nullptr);
  auto opened = shm::Mapping::open(name, 8192);
  ASSERT_NE(opened, nullptr);
  shm_unlink(name.c_str());
  if (shm::kOneMappingPerProcess) {
    EXPECT_EQ(opened->data(), created->data());
  } else {
    EXPECT_NE(opened->data(), created->data());
  }
  std::memcpy(created->data() + 100, "shared", 6);
  created.reset();
  EXPECT_EQ(std::memcmp(opened->data() + 100, "shared", 6), 0)
      << "the mapping outlives its creator";
}

// Makes the segment of `size` members as threads and runs fn(member's segment) on each.
void run_segment(int size, milliseconds timeout,
                 const std::function<void(ShmSegment&, ShmBarrier&)>& fn) {
  auto store = make_memory_store();
  std::vector<int> members;
  for (int r = 0; r < size; ++r) members.push_back(r);
  run_threads(size, [&](int rank) {
    ProcessGroupOptions options = testing::thread_world_options(store, rank, size, timeout);
    std::unique_ptr<ShmSegment> segment = ShmSegment::create(options, *store, members);
    ASSERT_NE(segment, nullptr);
    ShmBarrier barrier(*segment);
    fn(*segment, barrier);
  });
}

TEST(ShmSegment, EveryMemberSeesTheOthersSlotsAndPids) {
  run_segment(4, seconds(20), [](ShmSegment& segment, ShmBarrier& barrier) {
    const int me = segment.member();
    EXPECT_EQ(segment.size(), 4);
    std::memset(segment.slot(me, 1), me + 1, ShmSegment::kSlotBytes);
    barrier.arrive_and_wait(WaitClock::now() + seconds(20), std::chrono::microseconds(1000));
    for (int m = 0; m < 4; ++m) {
      EXPECT_EQ(segment.member_pid(m), getpid());
      EXPECT_EQ(segment.slot(m, 1)[0], std::byte(m + 1));
      EXPECT_EQ(segment.slot(m, 1)[ShmSegment::kSlotBytes - 1], std::byte(m + 1));
    }
    barrier.arrive_and_wait(WaitClock::now() + seconds(20), std::chrono::microseconds(1000));
  });
  EXPECT_TRUE(shm_testing::leftover_segments().empty());
}

TEST(ShmSegment, OneMemberOrTooManyMakeNoSegment) {
  auto store = make_memory_store();
  EXPECT_EQ(ShmSegment::create(testing::thread_world_options(store, 0, 1), *store, {0}), nullptr);
  std::vector<int> many(ShmSegment::kMaxRanks + 1);
  for (int r = 0; r <= ShmSegment::kMaxRanks; ++r) many[r] = r;
  EXPECT_EQ(ShmSegment::create(testing::thread_world_options(store, 0, ShmSegment::kMaxRanks + 1),
                               *store, many),
            nullptr);
}

TEST(ShmBarrier, NoMemberPassesBeforeEveryMemberHasArrived) {
  for (int size : {2, 3, 8}) {
    std::atomic<int> arrived{0};
    run_segment(size, seconds(20), [&](ShmSegment&, ShmBarrier& barrier) {
      for (int k = 1; k <= 50; ++k) {
        ++arrived;
        // Polling and sleeping at once (as on a communication thread) alike.
        barrier.arrive_and_wait(WaitClock::now() + seconds(20),
                                std::chrono::microseconds(k % 2 == 0 ? 1000 : 0));
        ASSERT_GE(arrived.load(), k * size);
        EXPECT_EQ(barrier.passed(), static_cast<uint64_t>(k));
      }
    });
  }
}

TEST(ShmBarrier, AMemberThatDoesNotComeIsNamedAndTheOthersFailAtOnce) {
  const auto start = WaitClock::now();
  run_segment(3, milliseconds(200), [&](ShmSegment& segment, ShmBarrier& barrier) {
    if (segment.member() == 2) return;
    // Member 0 waits 200 ms; member 1 far longer, but fails as soon as member 0 gives up.
    const auto timeout = segment.member() == 0 ? milliseconds(200) : milliseconds(60'000);
    const std::string failure = failure_of([&] {
      barrier.arrive_and_wait(WaitClock::now() + timeout, std::chrono::microseconds(1000));
    });
    if (segment.member() == 0) {
      EXPECT_NE(failure.find("shared memory: rank(s) 2 did not arrive within the timeout of 200 "
                             "ms"),
                std::string::npos)
          << failure;
    } else {
      EXPECT_EQ(failure,
                "shared memory: rank 0 gave up on the operation, blaming rank 2 (its "
                "error names the cause)");
    }
  });
  EXPECT_LT(WaitClock::now() - start, seconds(30));
}

TEST(ShmSegment, AMemberThatBlamesItselfIsNamedAsTheCause) {
  run_segment(2, seconds(20), [](ShmSegment& segment, ShmBarrier& barrier) {
    if (segment.member() == 0) segment.abandon(0);
    barrier.arrive_and_wait(WaitClock::now() + seconds(20), std::chrono::microseconds(1000));
    EXPECT_EQ(failure_of([&] { segment.throw_if_abandoned(); }),
              "shared memory: rank 0 gave up on the operation (its error names the cause)");
  });
}

}  // namespace
}  // namespace cleave::comm

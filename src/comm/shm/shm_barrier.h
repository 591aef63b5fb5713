// The barrier of a shared-memory segment's members, which names the member it blames when one
// has exited or does not come. Internal to comm.
//
// NOTE [Waiting in shared-memory collectives]
// A barrier is a counter of arrivals and a generation wait word (NOTE [Waiting] in comm/wait.h):
// the last member to arrive advances the generation and wakes the sleepers. A waiting member polls
// with sched_yield() for 1 ms (kShmWait), then sleeps in slices of 10 ms; in an operation of
// several rounds on a group's communication thread it sleeps at once (NOTE [Waiting beside
// computation]). It never spins without yielding: even with no more ranks than cores, the kernel
// may run two ranks on one core, and a spinning rank then keeps its peer from arriving. Between
// slices a sleeping member checks the segment's failure word and that the members it waits for
// are alive (their pids: the members share this host's pid namespace); the group's timeout bounds
// the whole operation. A member that fails (timeout, a dead peer) records the rank it blames in
// the segment and wakes everybody, so the others fail at once with the same culprit instead of
// waiting for their own timeouts. Measurements: bench/README.md, 'shm'.
#pragma once

#include <chrono>
#include <cstdint>

#include "comm/shm/shm_segment.h"
#include "comm/wait.h"

namespace cleave::comm {

// How the shared-memory collectives and point-to-point wait: poll for 1 ms, then sleep in slices
// of 10 ms (NOTE [Waiting in shared-memory collectives]).
constexpr WaitPolicy kShmWait{std::chrono::microseconds(1000), std::chrono::milliseconds(10)};

class ShmBarrier {
 public:
  // Over `segment`, which must outlive this; one per member and segment.
  explicit ShmBarrier(ShmSegment& segment) : segment_(segment) {}

  // Arrives at this member's next barrier and returns once every member has arrived there.
  // Polls for `poll` before it sleeps. Throws BackendFailure naming the rank it blames when a
  // member has exited, `deadline` passes, or another member abandoned the segment.
  void arrive_and_wait(WaitClock::time_point deadline, std::chrono::microseconds poll);
  // Barriers this member has passed.
  uint64_t passed() const { return passed_; }

 private:
  // The first member (other than this one) that has not reached barrier `k` and whose process is
  // gone; -1 when none is known to be gone.
  int dead_member_behind(uint64_t k) const;

  ShmSegment& segment_;
  uint64_t passed_ = 0;
};

}  // namespace cleave::comm

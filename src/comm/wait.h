// How comm waits for another thread or process: one futex word type and one spin-then-sleep loop
// with a deadline (NOTE [Waiting]). Every transport of comm waits through it: the inproc
// backend's rendezvous and messages, the shared-memory collectives' barriers, their
// point-to-point doorbells and the placed graphs' mailboxes. Internal to comm.
//
// NOTE [Waiting]
// A *wait word* is a 32-bit futex word and the count of threads asleep on it; it may lie in
// memory that several processes map. Whoever changes what a waiter waits for changes the word (a
// generation, a state, a bumped counter) and then calls wake(), which makes the system call only
// when a thread sleeps. wait_until(word, deadline, policy, ready, check):
//   1. polls ready(), calling sched_yield() between polls, for policy.poll (never a busy spin:
//      the thread waited for may need this core); any change of the word restarts this phase,
//      which never lasts past the deadline;
//   2. then sleeps on the word in slices of at most policy.slice, calling check() between slices
//      (it throws to end the wait: a dead peer, a group that another rank gave up on);
//   3. returns true once ready() holds, false once `deadline` passes with ready() false.
// The word is read before ready() is tested and the kernel sleeps only while it still holds that
// value, so no change is missed; a wake() that races check() costs at most one slice.
// Each caller keeps its poll and slice: inproc 50 us / 50 ms (NOTE [Inproc waiting]), shared
// memory 1 ms / 10 ms (NOTE [Waiting in shared-memory collectives]), the mailboxes their spin /
// 50 ms (NOTE [Waiting for a message]).
#pragma once

#include <sched.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <type_traits>

namespace cleave::comm {

using WaitClock = std::chrono::steady_clock;

struct WaitWord {
  std::atomic<uint32_t> value{0};
  std::atomic<uint32_t> sleepers{0};  // threads asleep on `value`, in any process

  // Wakes every thread asleep on the word; call after changing `value`. Cheap when none sleeps.
  void wake();
  // Sleeps while `value` == seen, for at most `at_most` (returns at once when it differs).
  void sleep(uint32_t seen, std::chrono::nanoseconds at_most);
};
// Placed in zero-filled shared memory by the shared-memory transports: zero is a valid state.
static_assert(sizeof(WaitWord) == 8 && std::is_standard_layout_v<WaitWord> &&
              std::atomic<uint32_t>::is_always_lock_free);

struct WaitPolicy {
  std::chrono::microseconds poll;   // yielding polls before the first sleep
  std::chrono::microseconds slice;  // the longest sleep between two calls of check()
};

// NOTE [Waiting beside computation]
// An operation on a group's communication thread (a gradient bucket's AllReduce during the
// backward pass) waits while its own process computes: yielding then hands the core to the
// computing threads for a whole time slice, and the peers' barriers advance one slice at a time.
// Such a wait skips the polling phase and sleeps at once, so the arriving peer wakes it promptly.
// Blocking calls, whose caller waits anyway, keep the polling phase, and so do collectives of one
// round (at most one buffer per rank), whose barriers are met within microseconds. Measurements:
// bench/README.md, 'shm'.
// The polling phase of a shared-memory wait on this thread: `poll`, or none on a communication
// thread.
std::chrono::microseconds poll_phase(std::chrono::microseconds poll);

// NOTE [Waiting]. `ready` and `check` are called on this thread; an exception of either ends the
// wait and propagates.
template <typename Ready, typename Check>
bool wait_until(WaitWord& word, WaitClock::time_point deadline, WaitPolicy policy,
                const Ready& ready, const Check& check) {
  uint32_t seen = word.value.load(std::memory_order_seq_cst);
  WaitClock::time_point poll_until = std::min(WaitClock::now() + policy.poll, deadline);
  while (true) {
    if (ready()) return true;
    const uint32_t now_seen = word.value.load(std::memory_order_seq_cst);
    const WaitClock::time_point now = WaitClock::now();
    if (now_seen != seen) {  // something happened meanwhile: look again, and poll again
      seen = now_seen;
      poll_until = std::min(now + policy.poll, deadline);
      continue;
    }
    if (now < poll_until) {
      sched_yield();
      continue;
    }
    check();
    const WaitClock::duration left = deadline - WaitClock::now();
    if (left <= WaitClock::duration::zero()) return false;
    word.sleep(seen, std::min<WaitClock::duration>(policy.slice, left));
  }
}

}  // namespace cleave::comm

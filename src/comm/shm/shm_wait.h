// The waiting primitives shared by the shared-memory collectives and point-to-point (NOTE
// [Waiting in shared-memory collectives] in comm/shm/shm_collectives.h). Internal to comm.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <string>

namespace cleave::comm::shm {

// A waiting rank polls with sched_yield() for kYield, then sleeps on a futex in slices of kSlice,
// checking between slices that its peers live and that no rank has declared the group failed.
constexpr auto kYield = std::chrono::microseconds(1000);
constexpr auto kSlice = std::chrono::milliseconds(10);

// NOTE [Waiting beside computation]
// An operation on a group's communication thread (a gradient bucket's AllReduce during the
// backward pass) waits while its own process computes: yielding then hands the core back to the
// computing threads, which on a machine with no spare core run on for a whole time slice, and the
// peers' barriers advance one slice at a time. Such a wait skips the polling phase and sleeps on
// the futex at once, so the peer that arrives wakes it, and a thread woken from sleep preempts the
// computation promptly. Measured on 2 cores (2 processes of DATA_PARALLEL ResNet-50, one compute
// thread each, bench dp, A/B runs alternated): blocked on gradient buckets 10.7 / 13.5 ms per
// step when yielding for 1 ms, 5.5 / 4.5 ms sleeping at once (100 us of yielding: 12.4 ms), the
// step time unchanged. Blocking calls, whose caller waits anyway, keep the polling phase, and so
// do collectives of one round (at most one buffer per rank): their one or two barriers are met
// within microseconds when the ranks issue them together, and a sleep would cost a wake-up each
// (LeNet's single 0.24 MB bucket: blocked 0.04 ms per step sleeping, nothing measurable polling).
// The polling phase of a wait on this thread: kYield, or none on a communication thread.
std::chrono::microseconds yield_phase();

// Sleeps while *word == seen, at most `at_most` (a futex over shared memory: the word may be in a
// segment mapped by several processes).
void futex_wait(std::atomic<uint32_t>* word, uint32_t seen, std::chrono::nanoseconds at_most);
// Wakes every thread asleep on *word, in any process.
void futex_wake_all(std::atomic<uint32_t>* word);

// Whether process `pid` of this pid namespace has exited (gone, or a zombie not yet reaped).
bool process_gone(int32_t pid);

// The first line of a file ("" when it cannot be read).
std::string read_first_line(const char* path);

}  // namespace cleave::comm::shm

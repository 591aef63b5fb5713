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

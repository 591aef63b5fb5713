// The barrier of a shared-memory segment (NOTE [Waiting in shared-memory collectives] in
// comm/shm/shm_barrier.h).
#include "comm/shm/shm_barrier.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <sched.h>

#include <vector>

#include "comm/shm/shm_host.h"

namespace cleave::comm {

int ShmBarrier::dead_member_behind(uint64_t k) const {
  for (int m = 0; m < segment_.size(); ++m) {
    if (m == segment_.member()) continue;
    if (segment_.word(m).arrived.load(std::memory_order_acquire) >= k) continue;
    if (shm::process_gone(segment_.member_pid(m))) return m;
  }
  return -1;
}

void ShmBarrier::arrive_and_wait(WaitClock::time_point deadline, std::chrono::microseconds poll) {
  const uint64_t k = ++passed_;
  const int size = segment_.size();
  const std::vector<int>& members = segment_.members();
  ShmHeader& header = segment_.header();
  segment_.word(segment_.member()).arrived.store(k, std::memory_order_release);
  const uint64_t arrived = header.arrivals.fetch_add(1, std::memory_order_acq_rel) + 1;
  const auto target = static_cast<uint32_t>(k);
  std::atomic<uint32_t>& generation = header.generation.value;
  if (arrived == k * static_cast<uint64_t>(size)) {
    generation.store(target, std::memory_order_release);
    header.generation.wake();
    return;
  }
  const auto done = [&] {
    return static_cast<int32_t>(generation.load(std::memory_order_acquire) - target) >= 0;
  };
  // Between slices: the failure word and the peers' processes. A completed barrier comes first:
  // its operation then checks the calls itself, and names the mismatch rather than the rank that
  // found it first.
  const auto check = [&] {
    segment_.throw_if_abandoned();
    const int dead = dead_member_behind(k);
    if (dead < 0) return;
    segment_.fail(members[dead],
                  fmt::format("shared memory: rank {} (pid {}) has exited without reaching the "
                              "collective's barrier {} that this rank waits at",
                              members[dead], segment_.member_pid(dead), k));
  };
  while (!wait_until(header.generation, deadline, {poll, kShmWait.slice}, done, check)) {
    std::vector<int> missing;
    for (int m = 0; m < size; ++m) {
      if (segment_.word(m).arrived.load(std::memory_order_acquire) < k) {
        missing.push_back(members[m]);
      }
    }
    if (missing.empty()) {  // all arrived just now: the last one is opening the barrier
      sched_yield();
      continue;
    }
    segment_.fail(missing.front(),
                  fmt::format("shared memory: rank(s) {} did not arrive within the timeout of {} "
                              "ms (they are alive but not in this collective: stopped, or calling "
                              "collectives in another order)",
                              fmt::join(missing, ", "), segment_.timeout().count()));
  }
}

}  // namespace cleave::comm

// The futex word and the polling phase of comm's waits (comm/wait.h).
#include "comm/wait.h"

#include <linux/futex.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <climits>
#include <ctime>

#include "comm/backends.h"

namespace cleave::comm {

// Not FUTEX_PRIVATE_FLAG: the word may lie in a segment that several processes map.
void WaitWord::wake() {
  // Pairs with the sleeper's increment of `sleepers` before its last look at `value`: either the
  // sleeper sees the new value, or this sees the sleeper.
  std::atomic_thread_fence(std::memory_order_seq_cst);
  if (sleepers.load(std::memory_order_seq_cst) == 0) return;
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(&value), FUTEX_WAKE, INT_MAX, nullptr, nullptr, 0);
}

void WaitWord::sleep(uint32_t seen, std::chrono::nanoseconds at_most) {
  const int64_t ns = std::max<int64_t>(0, at_most.count());
  timespec ts{static_cast<time_t>(ns / 1'000'000'000), static_cast<long>(ns % 1'000'000'000)};
  sleepers.fetch_add(1, std::memory_order_seq_cst);
  if (value.load(std::memory_order_seq_cst) == seen) {
    syscall(SYS_futex, reinterpret_cast<uint32_t*>(&value), FUTEX_WAIT, seen, &ts, nullptr, 0);
  }
  sleepers.fetch_sub(1, std::memory_order_seq_cst);
}

std::chrono::microseconds poll_phase(std::chrono::microseconds poll) {
  return on_communication_thread() ? std::chrono::microseconds(0) : poll;
}

}  // namespace cleave::comm

// Waiting primitives of the shared-memory transports (comm/shm/shm_wait.h).
#include "comm/shm/shm_wait.h"

#include <fmt/format.h>
#include <linux/futex.h>
#include <signal.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <ctime>
#include <fstream>

#include "comm/backends.h"

namespace cleave::comm::shm {

std::chrono::microseconds yield_phase() {
  return on_communication_thread() ? std::chrono::microseconds(0) : kYield;
}

void futex_wait(std::atomic<uint32_t>* word, uint32_t seen, std::chrono::nanoseconds at_most) {
  const auto ns = std::max<int64_t>(0, at_most.count());
  timespec ts{static_cast<time_t>(ns / 1'000'000'000), static_cast<long>(ns % 1'000'000'000)};
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), FUTEX_WAIT, seen, &ts, nullptr, 0);
}

void futex_wake_all(std::atomic<uint32_t>* word) {
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), FUTEX_WAKE, INT_MAX, nullptr, nullptr, 0);
}

std::string read_first_line(const char* path) {
  std::ifstream in(path);
  std::string line;
  std::getline(in, line);
  return line;
}

bool process_gone(int32_t pid) {
  if (pid <= 0) return false;
  if (kill(pid, 0) != 0) return errno == ESRCH;
  const std::string stat = read_first_line(fmt::format("/proc/{}/stat", pid).c_str());
  const size_t paren = stat.rfind(')');
  if (paren == std::string::npos || paren + 2 >= stat.size()) return false;
  const char state = stat[paren + 2];
  return state == 'Z' || state == 'X';
}

}  // namespace cleave::comm::shm

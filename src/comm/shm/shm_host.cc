// This host as the shared-memory transports see it (comm/shm/shm_host.h).
#include "comm/shm/shm_host.h"

#include <fmt/format.h>
#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <fstream>

namespace cleave::comm::shm {
namespace {

// The first line of a file ("" when it cannot be read).
std::string read_first_line(const char* path) {
  std::ifstream in(path);
  std::string line;
  std::getline(in, line);
  return line;
}

std::string link_target(const char* path) {
  char buf[256] = {};
  const ssize_t n = readlink(path, buf, sizeof(buf) - 1);
  return n > 0 ? std::string(buf, static_cast<size_t>(n)) : std::string();
}

}  // namespace

std::string host_key() {
  char host[256] = {};
  gethostname(host, sizeof(host) - 1);
  return fmt::format("{}|{}|{}|{}", host, read_first_line("/proc/sys/kernel/random/boot_id"),
                     link_target("/proc/self/ns/ipc"), link_target("/proc/self/ns/pid"));
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

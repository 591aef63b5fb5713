#include "train/console.h"

#include <unistd.h>

#include <cstdio>
#include <mutex>

namespace cleave::train::console {
namespace {

std::mutex g_mutex;
std::string g_status;  // the status line shown now; empty when none

constexpr const char* kEraseLine = "\r\033[K";

}  // namespace

void print_line(const std::string& line) {
  std::lock_guard<std::mutex> lock(g_mutex);
  if (!g_status.empty()) std::fputs(kEraseLine, stdout);
  std::fputs(line.c_str(), stdout);
  std::fputc('\n', stdout);
  if (!g_status.empty()) std::fputs(g_status.c_str(), stdout);
  std::fflush(stdout);
}

void set_status(const std::string& status) {
  std::lock_guard<std::mutex> lock(g_mutex);
  g_status = status;
  std::fputs(kEraseLine, stdout);
  std::fputs(status.c_str(), stdout);
  std::fflush(stdout);
}

void clear_status() {
  std::lock_guard<std::mutex> lock(g_mutex);
  if (g_status.empty()) return;
  g_status.clear();
  std::fputs(kEraseLine, stdout);
  std::fflush(stdout);
}

bool stdout_is_terminal() { return isatty(fileno(stdout)) == 1; }

}  // namespace cleave::train::console

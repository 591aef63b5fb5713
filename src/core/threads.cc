// Threads per worker (include/cleave/core/threads.h).
#include "cleave/core/threads.h"

#include <fmt/format.h>
#include <omp.h>
#include <sched.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>

#include "cleave/core/error.h"

namespace cleave::threads {

namespace {

std::atomic<int> g_threads{0};  // 0: set_intra_op_threads was not called

}  // namespace

int available_cores() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) == 0) return std::max(1, CPU_COUNT(&set));
  return std::max(1, omp_get_num_procs());
}

int intra_op_threads() { return omp_get_max_threads(); }

void set_intra_op_threads(int n) {
  CLEAVE_CHECK_ARG(n >= 1, "set_intra_op_threads({}): expected at least 1 thread", n);
  g_threads.store(n);
  omp_set_num_threads(n);
}

void adopt_intra_op_threads() {
  const int n = g_threads.load();
  if (n >= 1) omp_set_num_threads(n);
}

std::optional<std::string> user_thread_setting() {
  const char* value = std::getenv("OMP_NUM_THREADS");
  if (value == nullptr || *value == '\0') return std::nullopt;
  return std::string(value);
}

int thread_share(int cores, int workers_on_host) {
  CLEAVE_CHECK_ARG(cores >= 1 && workers_on_host >= 1,
                   "thread_share({}, {}): expected at least 1 core and 1 worker", cores,
                   workers_on_host);
  return std::max(1, cores / workers_on_host);
}

std::optional<std::string> share_host_cores(int workers_on_host) {
  if (workers_on_host <= 1 || user_thread_setting()) return std::nullopt;
  const int cores = available_cores();
  const int n = thread_share(cores, workers_on_host);
  set_intra_op_threads(n);
  return fmt::format(
      "{} workers share this host's {} core{}: {} OpenMP thread{} each (set OMP_NUM_THREADS to "
      "choose another number)",
      workers_on_host, cores, cores == 1 ? "" : "s", n, n == 1 ? "" : "s");
}

}  // namespace cleave::threads

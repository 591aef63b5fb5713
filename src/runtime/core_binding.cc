// Binding workers to cores (NOTE [Placed workers on few cores] and NOTE [SPMD workers on few
// cores] in cleave/runtime/core_binding.h).
#include "cleave/runtime/core_binding.h"

#include <fmt/format.h>
#include <pthread.h>
#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <functional>
#include <mutex>
#include <numeric>

#include "cleave/cluster/cluster.h"
#include "cleave/comm/group_registry.h"
#include "cleave/comm/process_group.h"
#include "cleave/core/env.h"
#include "cleave/core/error.h"
#include "cleave/core/threads.h"

namespace cleave::runtime {

CoreBindingMode core_binding_mode_from_env() {
  constexpr CoreBindingMode kModes[] = {CoreBindingMode::kAuto, CoreBindingMode::kOn,
                                        CoreBindingMode::kOff};
  return kModes[env::choice("CLEAVE_BIND_CORES", {"auto", "1", "0"})];
}

std::vector<int> split_cores(const std::vector<double>& load, int cpus) {
  CLEAVE_CHECK_ARG(cpus >= 1, "split_cores: {} cores; expected at least 1", cpus);
  std::vector<int> order(load.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return load[a] > load[b]; });
  std::vector<double> on_cpu(static_cast<size_t>(cpus), 0.0);
  std::vector<int> cpu_of(load.size(), -1);
  for (int w : order) {
    if (!(load[w] > 0)) break;  // sorted: the rest are idle too
    const int c = static_cast<int>(std::min_element(on_cpu.begin(), on_cpu.end()) - on_cpu.begin());
    cpu_of[w] = c;
    on_cpu[c] += load[w];
  }
  return cpu_of;
}

namespace {

// Per thread: ranks may be threads of one process (tests), each with its own world group.
struct Measurement {
  int64_t runs = 0;
  double seconds = 0;  // kernel time of the measured runs
  CoreBinding binding;
};
thread_local Measurement t_measure;

std::vector<int> allowed_cpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  std::vector<int> cpus;
  if (pthread_getaffinity_np(pthread_self(), sizeof(set), &set) != 0) return cpus;
  for (int c = 0; c < CPU_SETSIZE; ++c) {
    if (CPU_ISSET(c, &set)) cpus.push_back(c);
  }
  return cpus;
}

// Binds thread `tid` of this process to `cpu`; returns 0 or the error number.
int bind_thread(pid_t tid, int cpu) {
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(cpu, &set);
  return sched_setaffinity(tid, sizeof(set), &set) == 0 ? 0 : errno;
}

int64_t host_id() {
  char host[256] = {};
  gethostname(host, sizeof(host) - 1);
  return static_cast<int64_t>(std::hash<std::string>{}(host) >> 1);
}

int64_t cpus_id(const std::vector<int>& cpus) {
  std::string text;
  for (int c : cpus) text += fmt::format("{},", c);
  return static_cast<int64_t>(std::hash<std::string>{}(text) >> 1);
}

// The exchange and the split; binds this thread. Returns what was decided.
CoreBinding decide(comm::ProcessGroup& group, double seconds, CoreBindingMode mode) {
  const std::vector<int> cpus = allowed_cpus();
  constexpr int64_t kFields = 4;  // host, allowed cores (a hash of the list), load in ns, mode
  Tensor mine = Tensor::empty({kFields}, DType::kInt64);
  int64_t* m = mine.data<int64_t>();
  m[0] = host_id();
  m[1] = cpus_id(cpus);
  m[2] = static_cast<int64_t>(seconds * 1e9);
  m[3] = static_cast<int64_t>(mode);
  Tensor all = Tensor::empty({kFields * group.size()}, DType::kInt64);
  group.all_gather(all, mine);
  const int64_t* a = all.data<int64_t>();
  auto field = [&](int r, int f) { return a[r * kFields + f]; };

  CoreBinding out;
  out.decided = true;
  // The workers' CLEAVE_BIND_CORES should agree; if not, 0 anywhere wins, then auto.
  bool all_on = true;
  for (int r = 0; r < group.size(); ++r) {
    const auto theirs = static_cast<CoreBindingMode>(field(r, 3));
    if (theirs == CoreBindingMode::kOff) {
      out.summary = fmt::format("not bound: CLEAVE_BIND_CORES=0 on rank {}", r);
      return out;
    }
    all_on = all_on && theirs == CoreBindingMode::kOn;
  }
  mode = all_on ? CoreBindingMode::kOn : CoreBindingMode::kAuto;
  // This host's workers, in rank order, and whether they agree on the allowed cores.
  std::vector<int> ranks;
  bool same_cpus = true;
  for (int r = 0; r < group.size(); ++r) {
    if (field(r, 0) != m[0]) continue;
    ranks.push_back(r);
    same_cpus = same_cpus && field(r, 1) == m[1];
  }
  std::vector<double> load;
  int busy = 0;
  for (int r : ranks) {
    load.push_back(static_cast<double>(field(r, 2)) * 1e-9 / kMeasuredRuns);
    busy += field(r, 2) > 0;
  }
  const int ncpus = static_cast<int>(cpus.size());
  if (!same_cpus || ncpus == 0) {
    out.summary = "not bound: the workers of this host may run on different cores";
    return out;
  }
  if (mode == CoreBindingMode::kAuto && busy <= ncpus) {
    out.summary = fmt::format("not bound: {} busy workers on {} cores", busy, ncpus);
    return out;
  }
  const std::vector<int> cpu_of = split_cores(load, ncpus);
  std::string split;
  for (int c = 0; c < ncpus; ++c) {
    std::string on;
    for (size_t k = 0; k < ranks.size(); ++k) {
      if (cpu_of[k] != c) continue;
      on += fmt::format("{}{} ({:.2f} ms/run)", on.empty() ? "" : ", ", ranks[k], load[k] * 1e3);
    }
    if (!on.empty())
      split += fmt::format("{}cpu {}: rank {}", split.empty() ? "" : "; ", cpus[c], on);
  }
  out.summary = fmt::format("{} busy workers on {} cores, bound by their measured load: {}", busy,
                            ncpus, split);
  const size_t me =
      static_cast<size_t>(std::find(ranks.begin(), ranks.end(), group.rank()) - ranks.begin());
  if (cpu_of[me] < 0) return out;
  const int cpu = cpus[cpu_of[me]];
  if (const int err = bind_thread(gettid(), cpu); err != 0) {
    std::fprintf(stderr, "cleave: rank %d could not bind to cpu %d (%s); it stays unbound\n",
                 group.rank(), cpu, std::strerror(err));
    return out;
  }
  out.cpu = cpu;
  return out;
}

}  // namespace

int spmd_core(int local_rank, int local_size, const std::vector<int>& cpus, CoreBindingMode mode) {
  if (mode == CoreBindingMode::kOff || local_size <= 1 || cpus.empty() || local_rank < 0) return -1;
  if (mode == CoreBindingMode::kAuto && local_size <= static_cast<int>(cpus.size())) return -1;
  return cpus[static_cast<size_t>(local_rank) % cpus.size()];
}

namespace {
std::atomic<int> g_cores_before_binding{0};  // set when this process binds itself
}  // namespace

int cores_to_share() {
  const int before = g_cores_before_binding.load();
  return before > 0 ? before : threads::available_cores();
}

const SpmdBinding& bind_spmd_worker() {
  static SpmdBinding binding;
  static std::once_flag once;
  std::call_once(once, [] {
    const CoreBindingMode mode = core_binding_mode_from_env();
    if (!is_initialized()) {
      binding.summary = "not bound: this process joined no job";
      return;
    }
    const int local = get_local_size(), local_rank = get_local_rank();
    const std::vector<int> cpus = allowed_cpus();
    const int cpu = spmd_core(local_rank, local, cpus, mode);
    if (cpu < 0) {
      binding.summary = mode == CoreBindingMode::kOff
                            ? "not bound: CLEAVE_BIND_CORES=0"
                            : fmt::format(
                                  "not bound: {} workers of this job on this host's {} "
                                  "cores",
                                  local, cpus.size());
      return;
    }
    // Every thread of the process (the OpenMP workers, the communication threads): a bound
    // main thread whose helpers ran elsewhere would share its core unevenly.
    g_cores_before_binding = static_cast<int>(cpus.size());  // before any thread is bound
    std::error_code ec;
    for (const auto& task : std::filesystem::directory_iterator("/proc/self/task", ec)) {
      const pid_t tid = static_cast<pid_t>(std::atoi(task.path().filename().c_str()));
      if (tid <= 0) continue;
      if (const int err = bind_thread(tid, cpu); err != 0 && tid == gettid()) {
        binding.summary =
            fmt::format("not bound: binding to cpu {} failed ({})", cpu, std::strerror(err));
        std::fprintf(stderr, "cleave: local rank %d %s; it stays unbound\n", local_rank,
                     binding.summary.c_str());
        return;
      }
    }
    binding.cpu = cpu;
    binding.summary = fmt::format(
        "{} workers of this job on this host's {} cores: each bound to one, local rank r to the "
        "r % {}-th (NOTE [SPMD workers on few cores]; CLEAVE_BIND_CORES=0 leaves them free)",
        local, cpus.size(), cpus.size());
    if (local_rank == 0) std::fprintf(stderr, "cleave: %s\n", binding.summary.c_str());
  });
  return binding;
}

CoreBinding core_binding() { return t_measure.binding; }

void note_placed_run(double compute_seconds) {
  Measurement& t = t_measure;
  if (t.binding.decided) return;
  ++t.runs;
  if (t.runs <= kWarmupRuns) return;
  t.seconds += compute_seconds;
  if (t.runs < kWarmupRuns + kMeasuredRuns) return;
  std::shared_ptr<comm::ProcessGroup> group = comm::get_group(comm::kWorldGroup);
  if (group == nullptr) {
    t.binding = {.decided = true, .summary = "not bound: no world group"};
    return;
  }
  // Exchanged even when off here, so that workers whose settings differ cannot hang.
  t.binding = decide(*group, t.seconds, core_binding_mode_from_env());
  if (group->rank() == 0) {
    std::fprintf(stderr, "cleave: placed workers: %s (see CLEAVE_BIND_CORES)\n",
                 t.binding.summary.c_str());
    std::fflush(stderr);
  }
}

}  // namespace cleave::runtime

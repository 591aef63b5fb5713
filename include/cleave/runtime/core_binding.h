// Binding a job's workers to cores when they outnumber the cores of their host: a placed job's
// by their measured load, the workers of a job that runs one step on every rank one core each.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace cleave::runtime {

// NOTE [Placed workers on few cores]
// A placed job runs one busy process per stage, and their waits for messages poll (NOTE [Waiting
// for a message] in cleave/comm/shm_mailbox.h), so to the kernel every worker looks busy all the
// time: it hardly moves one, and which workers share a core is left to where they started. So a
// placed worker binds the thread that runs its placed graphs to one core: after kWarmupRuns runs
// of placed graphs it sums its kernel time over the next kMeasuredRuns; every worker of the world
// group then shares (host, allowed cores, load) in one all_gather (all reach it together: every
// placed graph runs on every worker in the same order), and the workers of each host split its
// cores by load, largest first, each to the core with the least load so far (ties: the lower
// core). Every worker computes the same split and binds only itself; workers that ran no kernels
// stay unbound. The process's other threads stay free, but threads the bound thread starts later
// inherit its core. CLEAVE_BIND_CORES: `auto` (the default) binds when a host has more busy
// workers than allowed cores, `1` always (each busy worker its own core while cores last), `0`
// never. Worker 0 prints the split on stderr. Measurements: bench/README.md, 'place'.
inline constexpr int kWarmupRuns = 10;
inline constexpr int kMeasuredRuns = 30;

enum class CoreBindingMode { kAuto, kOn, kOff };
// CLEAVE_BIND_CORES (unset or empty: kAuto); any other value than auto/1/0 is an error naming it.
CoreBindingMode core_binding_mode_from_env();

// The split of a host's cores among its workers: `load` per worker (0: not busy, left unbound),
// `cpus` the host's allowed cores. Returns per worker the index into `cpus` it is bound to, or -1.
// Deterministic: the same numbers give the same split on every worker.
std::vector<int> split_cores(const std::vector<double>& load, int cpus);

// What this thread's worker decided (NOTE [Placed workers on few cores]).
struct CoreBinding {
  bool decided = false;  // the measurement ended and the workers exchanged their loads
  int cpu = -1;          // the core this thread is bound to; -1: not bound
  std::string summary;   // what worker 0 prints, e.g. "... cpu 0: rank 1 (0.10 ms/run), 2 (...)"
};
CoreBinding core_binding();

// The executor calls this after every run of a placed graph, on the thread that ran it, with the
// run's kernel seconds. Collective over the world group at the end of the measurement.
void note_placed_run(double compute_seconds);

// NOTE [SPMD workers on few cores]
// In a DATA_PARALLEL, SEMI_AUTO_PARALLEL or AUTO_PARALLEL job every worker runs the same step on
// its slice, so each computes about as much as the others, and each waits in the step's
// collectives. When a host runs more of them than it has cores, the kernel moves them between
// cores as they wait, and may keep three of four workers on one core and one on the other for
// tens of steps; every collective then waits for the crowded core. Measured on 4 workers of the
// MLP's `column` plan on 2 cores (plan_train_bench, 30 steps, 8 runs): 3.05-3.08 ms a step in
// five runs, 3.49, 3.65 and 4.40 in three; bound, 3.03-3.08 in all eight. LeNet's data-parallel
// step on 2 and 4 workers, the MLP's on 8 and its megatron plan on 2 measured the same bound and
// unbound (bench/README.md, "Workers bound to cores"). So at
// its first step's load such a worker binds every thread of its process to core
// cpus[local_rank % cpus.size()] of the cores it may run on: workers spread evenly, the same
// number on every core. CLEAVE_BIND_CORES: `auto` (the default) binds when the host has more of
// the job's workers than allowed cores, `1` always, `0` never. Local rank 0 prints what it did
// on stderr. Threads started later inherit the core. A process that joined no job (ranks as
// threads) is never bound.

// The core of cpus (by value) a worker of local rank `local_rank` of `local_size` binds to under
// `mode`, or -1 when it stays unbound (NOTE [SPMD workers on few cores]).
int spmd_core(int local_rank, int local_size, const std::vector<int>& cpus, CoreBindingMode mode);

struct SpmdBinding {
  int cpu = -1;         // the core every thread of this process is bound to; -1: not bound
  std::string summary;  // "4 workers of this job on this host's 2 cores: ..." or why not bound
};
// Binds this process as spmd_core says, the first time it is called in the process (later calls
// return the first answer). Throws Error for a bad CLEAVE_BIND_CORES.
const SpmdBinding& bind_spmd_worker();

// The cores this process may run on, counted as before bind_spmd_worker bound it to one: the
// cores the job's workers on this host share (NOTE [Ranks sharing cores] in
// cleave/runtime/pipeline.h), which a bound worker's own affinity no longer shows.
int cores_to_share();

}  // namespace cleave::runtime

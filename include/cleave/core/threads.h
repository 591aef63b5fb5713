// The OpenMP threads of this process's kernels, and the share of a host's cores a worker takes.
//
// NOTE [Threads per worker]
// Several workers of a job on one host share its cores. Each worker's kernels run OpenMP teams
// (and oneDNN, built on OpenMP, follows them); left alone, every worker starts one thread per
// core, so 8 workers on 2 cores run 16 busy threads and the job slows several times. Unless the
// user set OMP_NUM_THREADS, a worker that joins a job takes max(1, cores / workers on its host)
// threads, where cores are the CPUs this process may run on (its affinity mask), and the first
// worker of the host says once what it chose. cleave-run also passes that number to its workers
// as OMP_NUM_THREADS. The number applies to the thread that set it and to the threads cleave
// starts afterwards (data-pipeline workers adopt it when they start): OpenMP keeps it per
// thread, and its process-wide value comes from the environment at start only.
#pragma once

#include <optional>
#include <string>

namespace cleave::threads {

// The CPUs this process may run on (its affinity mask; at least 1).
int available_cores();

// The OpenMP threads a parallel region started by this thread would use.
int intra_op_threads();

// Makes `n` (>= 1) the OpenMP threads of this thread's parallel regions and of the threads that
// call adopt_intra_op_threads() after it. Throws Error for n < 1.
void set_intra_op_threads(int n);

// For a thread cleave starts: takes the number set_intra_op_threads() set, if any.
void adopt_intra_op_threads();

// OMP_NUM_THREADS, when the user set it to a non-empty value.
std::optional<std::string> user_thread_setting();

// max(1, cores / workers_on_host): a worker's share of `cores` (NOTE [Threads per worker]).
int thread_share(int cores, int workers_on_host);

// Applies NOTE [Threads per worker] for a worker with `workers_on_host` workers on its host:
// does nothing when OMP_NUM_THREADS is set or when the worker is alone on its host; otherwise
// sets this process's share and returns the line that says what it chose ("8 workers share
// this host's 2 cores: 1 OpenMP thread each ..."), for the first worker of the host to print.
std::optional<std::string> share_host_cores(int workers_on_host);

}  // namespace cleave::threads

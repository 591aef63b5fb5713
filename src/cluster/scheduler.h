// The scheduler of a dynamic-networking job (MS_ROLE=MS_SCHED): a gRPC service that registers the
// workers, assigns their ranks, serves the key-value store and barriers, tracks heartbeats, and
// tells every worker when the job failed.
//
// NOTE [Job lifecycle]
// A job is *forming* until MS_WORKER_NUM workers have registered (bounded by MS_TOPO_TIMEOUT),
// then *running*. Ranks are assigned when it forms: a worker's MS_NODE_ID is its rank; the other
// workers take the remaining ranks in order of (host name, arrival), so workers of one host get
// consecutive ranks. It ends *finished* when every worker has called Finish (the scheduler returns
// 0), or *failed* when a worker is lost (no heartbeat for CLEAVE_HEARTBEAT_TIMEOUT_MS) or the
// topology did not form in time. A failed job answers every heartbeat and every blocked call
// with the failure, so each worker stops with one line naming the lost rank; the scheduler
// returns 1 once every live worker has been told (or after one more heartbeat timeout).
//
// NOTE [Stuck collectives] and NOTE [Deadlocks], in cluster/liveness.h with the code that
// applies them, say when a rank that heartbeats still fails the job: it is stuck (a peer waits
// for it in a collective or at a barrier while it makes no progress) or it deadlocks with others.
// The service here keeps what the workers report and asks liveness.h for a verdict on every
// pass of its monitor (about every 100 ms).
//
// NOTE [What defines a job]
// A job is the scheduler and the workers that share its CLEAVE_JOB_TOKEN (cleave-run generates
// one per job). Without a token (seed 000's run.sh, processes started by hand), a job is the
// processes that run the same program with the same arguments: each worker sends its command
// (the executable's real path and its arguments) when it registers, and the scheduler refuses at
// once a worker whose command differs from its own, naming both -- so two jobs started on one
// MS_SCHED_PORT never merge, even with their workers interleaved (the second scheduler cannot
// bind the port and exits; its workers are refused). Two jobs of the very same command on one
// port cannot be told apart this way: give them different ports or tokens.
//
// NOTE [No silent waits]
// While the job forms, the scheduler logs every JobConfig::progress_interval() (10 s by default)
// how many workers have registered, from which hosts, and which MS_NODE_IDs are still free; each
// waiting worker prints the same line (WaitTopology answers "pending" with it after that
// interval). A worker that cannot reach the scheduler retries, saying so after 1 s and then at
// the same interval, until MS_TOPO_TIMEOUT; an MS_SCHED_HOST that does not resolve fails init()
// at once (cluster/config.cc).
//
// NOTE [Failing workers report]
// A worker that fails tells the scheduler why (Fail): its program reported an error
// (cleave::report_failure), an exception escaped (std::terminate handler, src/cluster/init.cc),
// or the process exits with a non-zero status (release at exit). The
// job fails at once with "rank R (host H, pid P) failed: <its error>"; blocked calls return it
// at once and every other worker learns it from its next heartbeat, so every process ends within
// about one heartbeat interval with that first error instead of a heartbeat timeout that would
// name whichever rank went silent first. So that launchers (cleave-run, run.sh) see the failing
// worker end first, it ends right after its report, the others wait 0.5 s after learning of it,
// and the scheduler stays at least 1 s after it.
#pragma once

#include <functional>

#include "cluster/config.h"

namespace cleave::cluster {

// Serves the job described by `config` (role kScheduler) on config.sched_host:sched_port.
// Blocks until the job finished (returns 0) or failed (returns 1); progress and failures are
// printed to stderr, one line each.
// `on_listening` (when given) is called once the port is bound (true) or could not be (false).
int run_scheduler(const JobConfig& config, const std::function<void(bool)>& on_listening = {});

}  // namespace cleave::cluster

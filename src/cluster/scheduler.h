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
// NOTE [Stuck collectives]
// A rank can stay alive (heartbeating) and still hold the job: it never enters a collective its
// peers wait in (a bug, a sleep, a deadlock on a lock), or it finished while they wait. Every
// heartbeat therefore reports how the worker progresses: the communication operation it waits in
// (the oldest in flight, from comm::comm_snapshot: its name, how long, and the world ranks it
// waits for), how many operations it has finished, how many ActivityScopes it has opened, and
// its process's CPU time. A worker *progresses* when, between two heartbeats, it finished an
// operation, opened a scope, or used at least kBusyPercent of a core (computing). The job fails
// with "rank P (host H, pid N) is stuck: ..." when some rank W has waited in one operation (or
// at one of the scheduler's barriers, for the ranks that have not arrived) for more than
// CLEAVE_STUCK_TIMEOUT_MS (default 30 s) and a peer P it waits for either
//   - is not waiting itself (no communication operation in flight, not at a barrier, not in a
//     store get) and has not progressed for as long, or
//   - has finished (called release or exited).
// A peer that computes (uses CPU) is never stuck, however long W waits: that is a slow step, and
// only the operation's own CLEAVE_COMM_TIMEOUT_MS bounds it. A peer that is itself inside a
// communication operation is not blamed either (every rank waiting: a slow transfer, a hang inside
// the library or a deadlock of mismatched operations); CLEAVE_COMM_TIMEOUT_MS bounds those. So a
// rank that does not arrive is named within CLEAVE_STUCK_TIMEOUT_MS plus two heartbeat intervals.
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

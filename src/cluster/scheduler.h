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
#pragma once

#include "cluster/config.h"

namespace cleave::cluster {

// Serves the job described by `config` (role kScheduler) on config.sched_host:sched_port.
// Blocks until the job finished (returns 0) or failed (returns 1); progress and failures are
// printed to stderr, one line each.
int run_scheduler(const JobConfig& config);

}  // namespace cleave::cluster

// The scheduler's verdicts on a job's workers: which one is lost (no heartbeat), which rank is
// stuck (a peer waits for it and it makes no progress) and which ranks deadlock (each waits only
// for ranks that wait too). Plain values and functions: no gRPC, no threads and no clock -- the
// scheduler (scheduler.cc) passes what the workers reported and the current time, and fails the
// job with the verdict's message -- so each verdict is tested without processes
// (tests/cluster/liveness_test.cc).
//
// NOTE [Stuck collectives]
// A rank can heartbeat and still hold the job: it never enters a collective its peers wait in, or
// it finished while they wait. Every heartbeat therefore reports the worker's oldest
// communication operation in flight (comm::comm_snapshot: its name, how long, the world ranks it
// waits for), how many operations it has finished, how many ActivityScopes it has opened, and its
// process's CPU time. A worker *progresses* between two heartbeats when it finished an operation,
// opened a scope, or used at least kBusyPercent of a core. The job fails with "rank P (host H, pid
// N) is stuck: ..." when some rank W has waited in one operation (or at one of the scheduler's
// barriers, for the ranks that have not arrived) for more than CLEAVE_STUCK_TIMEOUT_MS (default
// 30 s) for a peer P that has finished (called release or exited), or that is not waiting itself
// (no operation in flight, not at a barrier, not in a store get) and has not progressed for as
// long. A computing peer is never stuck (only CLEAVE_COMM_TIMEOUT_MS bounds a slow step); peers
// that wait too are NOTE [Deadlocks]. The verdict comes within CLEAVE_STUCK_TIMEOUT_MS plus two
// heartbeat intervals; CLEAVE_STUCK_TIMEOUT_MS=0 turns both checks off. Examples: docs/cluster.md.
//
// NOTE [Deadlocks]
// find_stuck blames no peer that waits itself. When ranks wait only for one another -- every
// rank of a set D waits (in a communication operation, at a barrier or for a store key) for
// longer than CLEAVE_STUCK_TIMEOUT_MS, makes no progress for as long, and every rank it waits
// for is in D -- nothing can ever end those waits: mismatched collective orders, receives whose
// sends never come. The job fails then with one line per rank of D saying what it waits for
// (operation, group, peers, tag), instead of waiting for CLEAVE_COMM_TIMEOUT_MS. A store get
// waits for no rank in particular: a set holding one is a deadlock only when it holds every
// live rank. (A transfer so slow that its ranks use almost no CPU for longer than the bound
// would look the same: raise CLEAVE_STUCK_TIMEOUT_MS, or set it to 0, for such jobs.)
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace cleave::cluster {

using Clock = std::chrono::steady_clock;

// What one heartbeat says of its worker (HeartbeatRequest in scheduler.proto).
struct Heartbeat {
  std::string activity;          // its innermost ActivityScope
  int64_t activity_changes = 0;  // ActivityScopes opened so far
  int64_t cpu_us = 0;            // CPU time its process has used
  int64_t comm_completed = 0;    // communication operations finished so far
  int comm_in_flight = 0;        // communication operations running now
  std::string comm_op;           // the oldest of them, e.g. "AllReduce on group 'world' (gloo)"
  std::vector<int> comm_peers;   // the world ranks it waits for
  std::chrono::milliseconds comm_waited{0};  // how long it has been running
};

// A worker waiting at one of the scheduler's barriers.
struct BarrierWait {
  std::string name;
  Clock::time_point since;
  // Filled by the scheduler when it asks for a verdict: whether the barrier has passed (every
  // rank arrived; the waiter is waking up), and otherwise the ranks that have not arrived.
  bool passed = false;
  std::vector<int> missing;
};

// A worker blocked in a store get (waiting for any rank to set the key).
struct StoreWait {
  std::string key;
  Clock::time_point since;
};

// What the scheduler knows of one worker, for the verdicts.
struct WorkerLiveness {
  // Who it is, for the messages.
  std::string host;
  int pid = 0;
  int rank = -1;  // -1 until the job forms
  // What it is doing: its last heartbeat's activity, or what the scheduler knows ("registering").
  std::string activity = "registering";
  bool finished = false;  // it called Finish (release, or its process exited with status 0)
  Clock::time_point finished_at;
  bool lost = false;  // declared lost (find_lost)
  // From its heartbeats (note_heartbeat); registration counts as the first.
  Clock::time_point last_seen;
  Clock::time_point last_progress;  // when it last did something other than wait
  Heartbeat last;                   // the counters and communication wait of last_seen
  // Its waits at the scheduler.
  std::optional<BarrierWait> barrier;
  std::optional<StoreWait> get;

  // "rank 1 (host vm, pid 4242)", or "a worker on host vm (pid 4242, not yet ranked)".
  std::string describe() const;
};

struct LivenessBounds {
  std::chrono::milliseconds heartbeat_timeout{10'000};  // CLEAVE_HEARTBEAT_TIMEOUT_MS
  std::chrono::milliseconds stuck_timeout{30'000};      // CLEAVE_STUCK_TIMEOUT_MS (0: off)
};

struct Verdict {
  enum class Kind { kLost, kStuck, kDeadlock };
  Kind kind;
  std::string message;   // the job's failure, e.g. "rank 1 (host vm, pid 4242) was lost: ..."
  int lost_worker = -1;  // kLost: the index of the lost worker, to mark it
  // kLost: the indices of the others named silent too (the rest of a lost host), to mark them
  // lost as well: the scheduler does not wait to tell them of the failure.
  std::vector<int> silent_workers;
};

// Records a heartbeat of `worker` received at `now`: the worker progressed when it finished a
// communication operation, opened an ActivityScope or used at least kBusyPercent of a core since
// its last heartbeat (NOTE [Stuck collectives]).
void note_heartbeat(WorkerLiveness& worker, const Heartbeat& heartbeat, Clock::time_point now);

// The first worker (by index) neither finished nor lost whose last heartbeat is older than the
// heartbeat timeout at `now`. Its message also names the other such workers silent for more than
// half the timeout ("; silent too: rank 3 (host b, pid 4243) for 9200 ms"): the rest of a host
// that went away, whose last heartbeats came up to an interval later.
std::optional<Verdict> find_lost(const std::vector<WorkerLiveness>& workers,
                                 const LivenessBounds& bounds, Clock::time_point now);

// A rank stuck at `now` (NOTE [Stuck collectives]); requires a formed job (every worker ranked
// 0..n-1). Communication waits count as the heartbeats reported them (no extrapolation past a
// worker's last heartbeat: its operation may have ended since); barrier and store waits are the
// scheduler's own. Nullopt when stuck_timeout is 0.
std::optional<Verdict> find_stuck(const std::vector<WorkerLiveness>& workers,
                                  const LivenessBounds& bounds, Clock::time_point now);

// A deadlock at `now` (NOTE [Deadlocks]); requires a formed job. Nullopt when stuck_timeout is 0.
std::optional<Verdict> find_deadlock(const std::vector<WorkerLiveness>& workers,
                                     const LivenessBounds& bounds, Clock::time_point now);

// The scheduler's verdict at `now`: once the job has formed a stuck rank, else a deadlock; then a
// lost worker. Nullopt while every worker is fine.
std::optional<Verdict> judge(const std::vector<WorkerLiveness>& workers, bool formed,
                             const LivenessBounds& bounds, Clock::time_point now);

}  // namespace cleave::cluster

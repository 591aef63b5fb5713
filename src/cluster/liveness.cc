#include "cluster/liveness.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <map>

namespace cleave::cluster {
namespace {

using std::chrono::duration_cast;
using std::chrono::milliseconds;

// A worker whose process used at least this share of one core between two heartbeats is
// computing, so it progresses (NOTE [Stuck collectives]).
constexpr int64_t kBusyPercent = 5;

// How long `worker` has gone without progress, as of its last heartbeat.
Clock::duration idle(const WorkerLiveness& worker) {
  return worker.last_seen - worker.last_progress;
}

// A rank waiting for other ranks: in a communication operation, or at a barrier.
struct Wait {
  const WorkerLiveness* waiter;
  milliseconds waited;
  Clock::time_point began;
  std::string op;          // "AllReduce on group 'world' (gloo)", "barrier 'after_compute'"
  bool at_scheduler;       // a barrier: the scheduler's own wait, known up to `now`
  std::vector<int> peers;  // world ranks
};

// Every wait of a worker neither finished nor lost that is longer than the bound at `now`.
std::vector<Wait> long_waits(const std::vector<WorkerLiveness>& workers, milliseconds bound,
                             Clock::time_point now) {
  std::vector<Wait> waits;
  for (const WorkerLiveness& w : workers) {
    if (w.finished || w.lost) continue;
    if (w.last.comm_in_flight > 0 && w.last.comm_waited > bound) {
      waits.push_back({&w, w.last.comm_waited, w.last_seen - w.last.comm_waited, w.last.comm_op,
                       false, w.last.comm_peers});
    }
    if (w.barrier && !w.barrier->passed && now - w.barrier->since > bound) {
      waits.push_back({&w, duration_cast<milliseconds>(now - w.barrier->since), w.barrier->since,
                       fmt::format("barrier '{}'", w.barrier->name), true, w.barrier->missing});
    }
  }
  return waits;
}

}  // namespace

std::string WorkerLiveness::describe() const {
  if (rank < 0) return fmt::format("a worker on host {} (pid {}, not yet ranked)", host, pid);
  return fmt::format("rank {} (host {}, pid {})", rank, host, pid);
}

void note_heartbeat(WorkerLiveness& worker, const Heartbeat& heartbeat, Clock::time_point now) {
  const int64_t wall_us =
      std::chrono::duration_cast<std::chrono::microseconds>(now - worker.last_seen).count();
  const bool busy = (heartbeat.cpu_us - worker.last.cpu_us) * 100 >= kBusyPercent * wall_us;
  if (busy || heartbeat.comm_completed != worker.last.comm_completed ||
      heartbeat.activity_changes != worker.last.activity_changes) {
    worker.last_progress = now;
  }
  worker.last_seen = now;
  worker.activity = heartbeat.activity;
  worker.last = heartbeat;
}

std::optional<Verdict> find_lost(const std::vector<WorkerLiveness>& workers,
                                 const LivenessBounds& bounds, Clock::time_point now) {
  auto silence = [&](const WorkerLiveness& worker) {
    return duration_cast<milliseconds>(now - worker.last_seen);
  };
  for (size_t id = 0; id < workers.size(); ++id) {
    const WorkerLiveness& worker = workers[id];
    if (worker.finished || worker.lost) continue;
    const milliseconds silent = silence(worker);
    if (silent <= bounds.heartbeat_timeout) continue;
    // The others silent for over half the timeout: the rest of a lost host, whose last
    // heartbeats came up to an interval later (named now rather than one by one later).
    std::vector<std::string> others;
    std::vector<int> silent_ids;
    for (size_t other = 0; other < workers.size(); ++other) {
      const WorkerLiveness& w = workers[other];
      if (other == id || w.finished || w.lost || silence(w) <= bounds.heartbeat_timeout / 2) {
        continue;
      }
      others.push_back(fmt::format("{} for {} ms", w.describe(), silence(w).count()));
      silent_ids.push_back(static_cast<int>(other));
    }
    return Verdict{
        Verdict::Kind::kLost,
        fmt::format(
            "{} was lost: no heartbeat for {} ms (CLEAVE_HEARTBEAT_TIMEOUT_MS={}); it was {}{}{}",
            worker.describe(), silent.count(), bounds.heartbeat_timeout.count(), worker.activity,
            others.empty() ? "" : "; silent too: ", fmt::join(others, ", ")),
        static_cast<int>(id), std::move(silent_ids)};
  }
  return std::nullopt;
}

std::optional<Verdict> find_stuck(const std::vector<WorkerLiveness>& workers,
                                  const LivenessBounds& bounds, Clock::time_point now) {
  const milliseconds bound = bounds.stuck_timeout;
  if (bound.count() == 0) return std::nullopt;
  std::vector<const WorkerLiveness*> by_rank(workers.size(), nullptr);
  for (const WorkerLiveness& w : workers) by_rank[static_cast<size_t>(w.rank)] = &w;
  // The peers a waiter blames: neither waiting nor progressing for longer than the bound.
  struct Culprit {
    std::vector<int> waiters;
    milliseconds waited{0};
    std::string op;
  };
  std::map<int, Culprit> culprits;  // by rank
  for (const Wait& wait : long_waits(workers, bound, now)) {
    const WorkerLiveness& waiter = *wait.waiter;
    for (int rank : wait.peers) {
      if (rank < 0 || rank >= static_cast<int>(by_rank.size())) continue;
      const WorkerLiveness& peer = *by_rank[static_cast<size_t>(rank)];
      if (peer.finished) {
        // Still waiting a bound after the peer finished, in a wait begun before that.
        const Clock::time_point seen = wait.at_scheduler ? now : waiter.last_seen;
        if (wait.began >= peer.finished_at || seen - peer.finished_at <= bound) continue;
        return Verdict{
            Verdict::Kind::kStuck,
            fmt::format(
                "{} is stuck: it has waited {} ms in {} (CLEAVE_STUCK_TIMEOUT_MS={}) for {}, "
                "which finished (called cleave::release or exited) {} ms earlier",
                waiter.describe(), wait.waited.count(), wait.op, bound.count(), peer.describe(),
                duration_cast<milliseconds>(seen - peer.finished_at).count())};
      }
      // A peer that waits itself (every rank waiting: a slow transfer, a hang inside the
      // library, mismatched operations) is not blamed; nor is one that computes.
      if (peer.lost || peer.last.comm_in_flight > 0 || peer.barrier || peer.get) continue;
      if (idle(peer) <= bound) continue;
      Culprit& c = culprits[rank];
      c.waiters.push_back(waiter.rank);
      if (wait.waited > c.waited) c.waited = wait.waited, c.op = wait.op;
    }
  }
  if (culprits.empty()) return std::nullopt;
  const auto& [rank, c] = *culprits.begin();
  const WorkerLiveness& stuck = *by_rank[static_cast<size_t>(rank)];
  std::vector<int> waiters = c.waiters;
  std::sort(waiters.begin(), waiters.end());
  waiters.erase(std::unique(waiters.begin(), waiters.end()), waiters.end());
  return Verdict{
      Verdict::Kind::kStuck,
      fmt::format(
          "{} is stuck: {} {} {} waited up to {} ms for it in {} (CLEAVE_STUCK_TIMEOUT_MS={}), "
          "while it made no progress for {} ms (no communication, no CPU use) outside any "
          "collective; it was {}",
          stuck.describe(), waiters.size() > 1 ? "ranks" : "rank", fmt::join(waiters, ", "),
          waiters.size() > 1 ? "have" : "has", c.waited.count(), c.op, bound.count(),
          duration_cast<milliseconds>(idle(stuck)).count(), stuck.activity)};
}

std::optional<Verdict> find_deadlock(const std::vector<WorkerLiveness>& workers,
                                     const LivenessBounds& bounds, Clock::time_point now) {
  const milliseconds bound = bounds.stuck_timeout;
  if (bound.count() == 0) return std::nullopt;
  struct Waiting {
    const WorkerLiveness* worker;
    milliseconds waited;
    std::string what;
    std::vector<int> peers;  // empty: any rank (a store get)
  };
  std::map<int, Waiting> stalled;  // D, by rank
  int live = 0;
  for (const WorkerLiveness& w : workers) {
    if (w.finished || w.lost) continue;
    ++live;
    if (idle(w) <= bound) continue;  // it progresses
    if (w.last.comm_in_flight > 0 && w.last.comm_waited > bound) {
      stalled[w.rank] = {
          &w, w.last.comm_waited,
          fmt::format("in {} for world rank{} {}", w.last.comm_op,
                      w.last.comm_peers.size() > 1 ? "s" : "", fmt::join(w.last.comm_peers, ", ")),
          w.last.comm_peers};
    } else if (w.barrier && now - w.barrier->since > bound) {
      if (w.barrier->passed) continue;
      const std::vector<int>& missing = w.barrier->missing;
      stalled[w.rank] = {&w, duration_cast<milliseconds>(now - w.barrier->since),
                         fmt::format("at barrier '{}' for rank{} {}", w.barrier->name,
                                     missing.size() > 1 ? "s" : "", fmt::join(missing, ", ")),
                         missing};
    } else if (w.get && now - w.get->since > bound) {
      stalled[w.rank] = {&w,
                         duration_cast<milliseconds>(now - w.get->since),
                         fmt::format("for store key '{}' (any rank may set it)", w.get->key),
                         {}};
    }
  }
  if (stalled.empty()) return std::nullopt;
  for (const auto& [rank, wait] : stalled) {
    if (wait.peers.empty() && static_cast<int>(stalled.size()) < live) return std::nullopt;
    for (int peer : wait.peers) {
      if (stalled.count(peer) == 0) return std::nullopt;  // it waits for a rank not stalled
    }
  }
  std::vector<int> ranks;
  std::string lines;
  for (const auto& [rank, wait] : stalled) {
    ranks.push_back(rank);
    lines += fmt::format("\n  {}: waiting {} ms {}", wait.worker->describe(), wait.waited.count(),
                         wait.what);
  }
  return Verdict{
      Verdict::Kind::kDeadlock,
      fmt::format(
          "deadlock: rank{} {} {} waited longer than CLEAVE_STUCK_TIMEOUT_MS={} ms, each for "
          "ranks that wait too, and none makes progress (mismatched collective order, or a "
          "receive whose send never comes); what each rank waits for:{}",
          ranks.size() > 1 ? "s" : "", fmt::join(ranks, ", "), ranks.size() > 1 ? "have" : "has",
          bound.count(), lines)};
}

std::optional<Verdict> judge(const std::vector<WorkerLiveness>& workers, bool formed,
                             const LivenessBounds& bounds, Clock::time_point now) {
  if (formed) {
    if (std::optional<Verdict> stuck = find_stuck(workers, bounds, now)) return stuck;
    if (std::optional<Verdict> deadlock = find_deadlock(workers, bounds, now)) return deadlock;
  }
  return find_lost(workers, bounds, now);
}

}  // namespace cleave::cluster

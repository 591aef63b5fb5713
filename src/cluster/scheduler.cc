#include "cluster/scheduler.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <condition_variable>
#include <cstdio>
#include <deque>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "scheduler.grpc.pb.h"

namespace cleave::cluster {
namespace {

namespace pb = ::cleave::cluster::proto;
using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

// A worker whose process used at least this share of one core between two heartbeats is
// computing, so it progresses (NOTE [Stuck collectives]).
constexpr int64_t kBusyPercent = 5;

void log_line(const std::string& line) {
  std::fprintf(stderr, "cleave scheduler: %s\n", line.c_str());
  std::fflush(stderr);
}

struct Worker {
  std::string host;
  std::string node_id;
  int pid = 0;
  int rank = -1;
  int local_rank = -1;
  int local_size = 0;
  Clock::time_point last_seen;
  std::string activity = "registering";
  bool finished = false;
  bool lost = false;
  bool told_failure = false;  // has received the failure in some reply
  // How it progresses, from its heartbeats (NOTE [Stuck collectives]).
  int64_t activity_changes = 0;
  int64_t cpu_us = 0;
  int64_t comm_completed = 0;
  int comm_in_flight = 0;
  std::string comm_op;
  std::vector<int> comm_peers;
  milliseconds comm_waited{0};      // as of last_seen
  Clock::time_point last_progress;  // when it last did something other than wait
  Clock::time_point finished_at;
  std::string barrier;  // the barrier it waits at, empty when none
  bool in_get = false;  // blocked in a store get (waiting for some rank: never blamed)
  std::string get_key;  // the key it waits for, while in_get
  Clock::time_point get_since;
  int64_t barrier_generation = 0;
  Clock::time_point barrier_since;

  std::string describe() const {
    if (rank < 0) return fmt::format("a worker on host {} (pid {}, not yet ranked)", host, pid);
    return fmt::format("rank {} (host {}, pid {})", rank, host, pid);
  }
};

struct BarrierState {
  int64_t generation = 0;
  std::set<int> arrived;  // ranks waiting in the current generation
};

// The state of one job, shared by the gRPC handlers and the monitor loop. Every member is guarded
// by mu_; handlers that block wait on cv_ for their condition or the job's failure.
class Job final : public pb::Scheduler::Service {
 public:
  explicit Job(JobConfig config)
      : config_(std::move(config)),
        started_(Clock::now()),
        next_progress_(started_ + config_.progress_interval()) {}

  // One pass of the monitor: declares lost workers and a topology timeout. Returns the exit
  // status once the job is over (0 finished, 1 failed), nullopt while it goes on.
  std::optional<int> monitor() {
    std::unique_lock lock(mu_);
    cv_.wait_for(lock, std::min(config_.heartbeat_interval, milliseconds(100)));
    Clock::time_point now = Clock::now();
    if (failure_) {
      bool all_told = std::all_of(workers_.begin(), workers_.end(), [](const Worker& w) {
        return w.lost || w.finished || w.told_failure;
      });
      // A worker that reported its failure ends first (NOTE [Failing workers report]): the
      // scheduler stays a second so that launchers see that worker end before it.
      const bool reporter_ended = !failure_reported_ || now - failed_at_ >= milliseconds(1000);
      if ((all_told && reporter_ended) ||
          now - failed_at_ > config_.heartbeat_timeout + config_.heartbeat_interval) {
        return 1;
      }
      return std::nullopt;
    }
    if (formed_ &&
        std::all_of(workers_.begin(), workers_.end(), [](const Worker& w) { return w.finished; })) {
      log_line(fmt::format("all {} workers finished; the job succeeded", workers_.size()));
      return 0;
    }
    if (!formed_ && now - started_ > config_.topo_timeout) {
      fail(fmt::format(
          "only {} of MS_WORKER_NUM={} workers registered within MS_TOPO_TIMEOUT={} s ({}); "
          "start the missing workers or raise MS_TOPO_TIMEOUT",
          workers_.size(), config_.worker_num,
          std::chrono::duration_cast<std::chrono::seconds>(config_.topo_timeout).count(),
          registered_and_missing()));
      return std::nullopt;
    }
    if (!formed_ && now >= next_progress_) {  // NOTE [No silent waits]
      log_line(progress(now));
      next_progress_ = now + config_.progress_interval();
    }
    if (formed_) check_stuck(now);
    if (failure_) return std::nullopt;
    for (Worker& worker : workers_) {
      if (worker.finished || worker.lost) continue;
      auto silent = std::chrono::duration_cast<milliseconds>(now - worker.last_seen);
      if (silent > config_.heartbeat_timeout) {
        worker.lost = true;
        fail(fmt::format(
            "{} was lost: no heartbeat for {} ms (CLEAVE_HEARTBEAT_TIMEOUT_MS={}); it was {}",
            worker.describe(), silent.count(), config_.heartbeat_timeout.count(), worker.activity));
        break;
      }
    }
    return std::nullopt;
  }

  grpc::Status Register(grpc::ServerContext*, const pb::RegisterRequest* request,
                        pb::RegisterReply* reply) override {
    std::lock_guard lock(mu_);
    std::string who = fmt::format("a worker on host {} (pid {})", request->host(), request->pid());
    auto refuse = [&](const std::string& why) {
      log_line(fmt::format("refused {}: {}", who, why));
      reply->mutable_status()->set_error(
          fmt::format("the scheduler at {} refused this worker: {}", config_.address(), why));
      return grpc::Status::OK;
    };
    if (config_.token.empty() && request->token().empty() && !config_.command.empty() &&
        !request->command().empty() && request->command() != config_.command) {
      // NOTE [What defines a job]
      return refuse(fmt::format(
          "it belongs to another job: it runs `{}` but this job's scheduler runs `{}` (two jobs "
          "on MS_SCHED_PORT={}? without CLEAVE_JOB_TOKEN a job is the processes running the same "
          "program with the same arguments; give each job its own MS_SCHED_PORT)",
          request->command(), config_.command, config_.sched_port));
    }
    if (request->token() != config_.token) {
      return refuse(
          "its CLEAVE_JOB_TOKEN does not match the job's token (is it from another job? the "
          "scheduler and every worker of one job must have the same CLEAVE_JOB_TOKEN; cleave-run "
          "sets it)");
    }
    if (request->worker_num() != config_.worker_num) {
      return refuse(
          fmt::format("its MS_WORKER_NUM={} differs from the scheduler's MS_WORKER_NUM={}",
                      request->worker_num(), config_.worker_num));
    }
    // A worker's retried Register (NOTE [No silent waits]) gets the id it already has.
    for (size_t id = 0; id < workers_.size(); ++id) {
      const Worker& w = workers_[id];
      if (w.host == request->host() && w.pid == request->pid() && !w.lost && !failure_) {
        reply->set_worker_id(static_cast<int64_t>(id));
        reply->mutable_status()->set_ok(true);
        return grpc::Status::OK;
      }
    }
    if (failure_) {
      reply->mutable_status()->set_unavailable(true);
      return refuse("the job has already failed: " + *failure_);
    }
    if (formed_ || static_cast<int>(workers_.size()) >= config_.worker_num) {
      return refuse(
          fmt::format("the job already has MS_WORKER_NUM={} workers; this worker is one too many",
                      config_.worker_num));
    }
    if (!request->node_id().empty()) {
      for (const Worker& other : workers_) {
        if (other.node_id == request->node_id()) {
          return refuse(fmt::format(
              "MS_NODE_ID={} is already taken by the worker on host {} (pid {}); each worker "
              "needs its own MS_NODE_ID",
              request->node_id(), other.host, other.pid));
        }
      }
    }
    Worker worker;
    worker.host = request->host();
    worker.node_id = request->node_id();
    worker.pid = request->pid();
    worker.last_seen = Clock::now();
    worker.last_progress = worker.last_seen;
    workers_.push_back(worker);
    reply->set_worker_id(static_cast<int64_t>(workers_.size()) - 1);
    reply->mutable_status()->set_ok(true);
    log_line(fmt::format("registered {}{} ({} of {})", who,
                         worker.node_id.empty() ? "" : " with MS_NODE_ID=" + worker.node_id,
                         workers_.size(), config_.worker_num));
    if (static_cast<int>(workers_.size()) == config_.worker_num) form();
    return grpc::Status::OK;
  }

  grpc::Status WaitTopology(grpc::ServerContext*, const pb::TopologyRequest* request,
                            pb::TopologyReply* reply) override {
    std::unique_lock lock(mu_);
    Worker* worker = find(request->worker_id(), reply->mutable_status());
    if (worker == nullptr) return grpc::Status::OK;
    worker->activity = "waiting for the other workers to register";
    bool ready = cv_.wait_for(lock, milliseconds(request->timeout_ms()),
                              [&] { return formed_ || failure_.has_value(); });
    if (failure_) return report_failure(*worker, reply->mutable_status());
    if (!ready) {  // NOTE [No silent waits]: the worker prints this and asks again
      reply->set_pending(true);
      reply->set_progress(progress(Clock::now()));
      reply->mutable_status()->set_ok(true);
      return grpc::Status::OK;
    }
    worker->activity = "running";
    reply->set_rank(worker->rank);
    reply->set_world_size(config_.worker_num);
    reply->set_local_rank(worker->local_rank);
    reply->set_local_size(worker->local_size);
    std::vector<std::string> hosts(workers_.size());
    for (const Worker& w : workers_) hosts[w.rank] = w.host;
    for (const std::string& host : hosts) reply->add_hosts(host);
    reply->mutable_status()->set_ok(true);
    return grpc::Status::OK;
  }

  grpc::Status Heartbeat(grpc::ServerContext*, const pb::HeartbeatRequest* request,
                         pb::HeartbeatReply* reply) override {
    std::lock_guard lock(mu_);
    Worker* worker = find(request->worker_id(), reply->mutable_status());
    if (worker == nullptr) return grpc::Status::OK;
    note_progress(*worker, *request);
    if (failure_) return report_failure(*worker, reply->mutable_status());
    reply->mutable_status()->set_ok(true);
    return grpc::Status::OK;
  }

  grpc::Status Set(grpc::ServerContext*, const pb::SetRequest* request,
                   pb::Status* reply) override {
    std::lock_guard lock(mu_);
    if (find(request->worker_id(), reply) == nullptr) return grpc::Status::OK;
    store_[request->key()] = request->value();
    cv_.notify_all();
    reply->set_ok(true);
    return grpc::Status::OK;
  }

  grpc::Status Get(grpc::ServerContext*, const pb::GetRequest* request,
                   pb::GetReply* reply) override {
    std::unique_lock lock(mu_);
    Worker* worker = find(request->worker_id(), reply->mutable_status());
    if (worker == nullptr) return grpc::Status::OK;
    worker->in_get = true;
    worker->get_key = request->key();
    worker->get_since = Clock::now();
    bool found = cv_.wait_for(lock, milliseconds(request->timeout_ms()), [&] {
      return store_.count(request->key()) > 0 || failure_.has_value();
    });
    worker->in_get = false;
    if (failure_) return report_failure(*worker, reply->mutable_status());
    if (!found) {
      reply->mutable_status()->set_unavailable(true);
      reply->mutable_status()->set_error(
          fmt::format("store key '{}' was not set by any worker within {} ms", request->key(),
                      request->timeout_ms()));
      return grpc::Status::OK;
    }
    reply->set_value(store_[request->key()]);
    reply->mutable_status()->set_ok(true);
    return grpc::Status::OK;
  }

  grpc::Status Add(grpc::ServerContext*, const pb::AddRequest* request,
                   pb::AddReply* reply) override {
    std::lock_guard lock(mu_);
    if (find(request->worker_id(), reply->mutable_status()) == nullptr) return grpc::Status::OK;
    std::string& slot = store_[request->key()];
    int64_t value = 0;
    if (!slot.empty()) {
      try {
        value = std::stoll(slot);
      } catch (const std::exception&) {
        reply->mutable_status()->set_error(fmt::format(
            "store key '{}' holds '{}', which is not an integer counter", request->key(), slot));
        return grpc::Status::OK;
      }
    }
    value += request->delta();
    slot = std::to_string(value);
    cv_.notify_all();
    reply->set_value(value);
    reply->mutable_status()->set_ok(true);
    return grpc::Status::OK;
  }

  grpc::Status Check(grpc::ServerContext*, const pb::CheckRequest* request,
                     pb::CheckReply* reply) override {
    std::lock_guard lock(mu_);
    if (find(request->worker_id(), reply->mutable_status()) == nullptr) return grpc::Status::OK;
    bool all_set = std::all_of(request->keys().begin(), request->keys().end(),
                               [&](const std::string& key) { return store_.count(key) > 0; });
    reply->set_all_set(all_set);
    reply->mutable_status()->set_ok(true);
    return grpc::Status::OK;
  }

  // NOTE [Barrier generations]
  // A barrier is named; each time all ranks have arrived its generation advances and the waiters
  // of that generation return, so the same name can be used again right away.
  grpc::Status Barrier(grpc::ServerContext*, const pb::BarrierRequest* request,
                       pb::Status* reply) override {
    std::unique_lock lock(mu_);
    Worker* worker = find(request->worker_id(), reply);
    if (worker == nullptr) return grpc::Status::OK;
    if (!formed_) {
      reply->set_error("barrier before every worker registered");
      return grpc::Status::OK;
    }
    BarrierState& barrier = barriers_[request->name()];
    int64_t generation = barrier.generation;
    barrier.arrived.insert(worker->rank);
    worker->barrier = request->name();
    worker->barrier_generation = generation;
    worker->barrier_since = Clock::now();
    if (static_cast<int>(barrier.arrived.size()) == config_.worker_num) {
      barrier.arrived.clear();
      ++barrier.generation;
      cv_.notify_all();
    }
    bool passed = cv_.wait_for(lock, milliseconds(request->timeout_ms()), [&] {
      return barrier.generation != generation || failure_.has_value();
    });
    worker->barrier.clear();
    if (failure_) return report_failure(*worker, reply);
    if (!passed) {
      std::vector<int> missing;
      for (int rank = 0; rank < config_.worker_num; ++rank) {
        if (barrier.arrived.count(rank) == 0) missing.push_back(rank);
      }
      barrier.arrived.erase(worker->rank);
      reply->set_unavailable(true);
      reply->set_error(fmt::format("barrier '{}' timed out after {} ms; ranks [{}] did not arrive",
                                   request->name(), request->timeout_ms(),
                                   fmt::join(missing, ", ")));
      return grpc::Status::OK;
    }
    reply->set_ok(true);
    return grpc::Status::OK;
  }

  // NOTE [Failing workers report]
  grpc::Status Fail(grpc::ServerContext*, const pb::FailRequest* request,
                    pb::Status* reply) override {
    std::lock_guard lock(mu_);
    Worker* worker = find(request->worker_id(), reply);
    if (worker == nullptr) return grpc::Status::OK;
    worker->told_failure = true;  // it knows: it is the one failing
    worker->activity = "failed: " + request->error();
    if (failure_) {
      log_line(fmt::format("{} failed too: {}", worker->describe(), request->error()));
    } else {
      fail(fmt::format("{} failed: {}", worker->describe(), request->error()));
      failure_reported_ = true;
    }
    reply->set_ok(true);
    return grpc::Status::OK;
  }

  // NOTE [Workers end together]: a worker that finished waits here (wait_for_job) until every
  // worker has, so that the job's processes end together, and all with status 1 when one fails
  // after others finished (seed 000's ranks 5-7 own no ops and finish first).
  grpc::Status Finish(grpc::ServerContext*, const pb::FinishRequest* request,
                      pb::Status* reply) override {
    std::unique_lock lock(mu_);
    Worker* worker = find(request->worker_id(), reply);
    if (worker == nullptr) return grpc::Status::OK;
    worker->finished = true;
    worker->finished_at = Clock::now();
    worker->activity = "finished, waiting for the other workers";
    cv_.notify_all();
    if (request->wait_for_job()) {
      cv_.wait(lock, [&] {
        return failure_.has_value() || std::all_of(workers_.begin(), workers_.end(),
                                                   [](const Worker& w) { return w.finished; });
      });
      if (failure_) return report_failure(*worker, reply);
    }
    reply->set_ok(true);
    return grpc::Status::OK;
  }

 private:
  Worker* find(int64_t worker_id, pb::Status* status) {
    if (worker_id < 0 || worker_id >= static_cast<int64_t>(workers_.size())) {
      status->set_error(fmt::format("worker id {} is unknown to the scheduler at {}", worker_id,
                                    config_.address()));
      return nullptr;
    }
    return &workers_[worker_id];
  }

  // A heartbeat: the worker is alive, and progressed when it finished a communication operation,
  // opened an ActivityScope or used the CPU since the last one (NOTE [Stuck collectives]).
  void note_progress(Worker& worker, const pb::HeartbeatRequest& request) {
    Clock::time_point now = Clock::now();
    const int64_t wall_us =
        std::chrono::duration_cast<std::chrono::microseconds>(now - worker.last_seen).count();
    const bool busy = (request.cpu_us() - worker.cpu_us) * 100 >= kBusyPercent * wall_us;
    if (busy || request.comm_completed() != worker.comm_completed ||
        request.activity_changes() != worker.activity_changes) {
      worker.last_progress = now;
    }
    worker.last_seen = now;
    worker.activity = request.activity();
    worker.activity_changes = request.activity_changes();
    worker.cpu_us = request.cpu_us();
    worker.comm_completed = request.comm_completed();
    worker.comm_in_flight = request.comm_in_flight();
    worker.comm_op = request.comm_op();
    worker.comm_peers.assign(request.comm_peers().begin(), request.comm_peers().end());
    worker.comm_waited = milliseconds(request.comm_waited_ms());
  }

  // Fails the job when a rank has waited in a communication operation or at a barrier for longer
  // than CLEAVE_STUCK_TIMEOUT_MS for a peer that is not waiting itself and has not progressed for
  // as long, or that has finished (NOTE [Stuck collectives]). Communication waits count as the
  // heartbeats reported them (no extrapolation past a worker's last heartbeat: its operation may
  // have ended since); barrier waits are the scheduler's own.
  void check_stuck(Clock::time_point now) {
    const milliseconds bound = config_.stuck_timeout;
    if (bound.count() == 0) return;
    std::vector<const Worker*> by_rank(workers_.size(), nullptr);
    for (const Worker& w : workers_) by_rank[static_cast<size_t>(w.rank)] = &w;
    struct Wait {
      const Worker* waiter;
      milliseconds waited;
      Clock::time_point began;
      std::string op;
      std::vector<int> peers;  // world ranks
    };
    std::vector<Wait> waits;
    for (const Worker& w : workers_) {
      if (w.finished || w.lost) continue;
      if (w.comm_in_flight > 0 && w.comm_waited > bound) {
        waits.push_back({&w, w.comm_waited, w.last_seen - w.comm_waited, w.comm_op, w.comm_peers});
      }
      if (!w.barrier.empty() && now - w.barrier_since > bound) {
        const BarrierState& b = barriers_.at(w.barrier);
        if (b.generation != w.barrier_generation) continue;  // passed; the waiter is waking up
        Wait wait{&w,
                  std::chrono::duration_cast<milliseconds>(now - w.barrier_since),
                  w.barrier_since,
                  fmt::format("barrier '{}'", w.barrier),
                  {}};
        for (int rank = 0; rank < config_.worker_num; ++rank) {
          if (b.arrived.count(rank) == 0) wait.peers.push_back(rank);
        }
        waits.push_back(std::move(wait));
      }
    }
    struct Culprit {
      std::vector<int> waiters;
      milliseconds waited{0};
      std::string op;
    };
    std::map<int, Culprit> culprits;  // by rank
    for (const Wait& wait : waits) {
      const Worker& waiter = *wait.waiter;
      for (int rank : wait.peers) {
        if (rank < 0 || rank >= static_cast<int>(by_rank.size())) continue;
        const Worker& peer = *by_rank[static_cast<size_t>(rank)];
        if (peer.finished) {
          // Still waiting a bound after the peer finished, in a wait begun before that.
          const Clock::time_point seen = wait.op.rfind("barrier", 0) == 0 ? now : waiter.last_seen;
          if (wait.began >= peer.finished_at || seen - peer.finished_at <= bound) continue;
          fail(fmt::format(
              "{} is stuck: it has waited {} ms in {} (CLEAVE_STUCK_TIMEOUT_MS={}) for {}, which "
              "finished (called cleave::release or exited) {} ms earlier",
              waiter.describe(), wait.waited.count(), wait.op, bound.count(), peer.describe(),
              std::chrono::duration_cast<milliseconds>(seen - peer.finished_at).count()));
          return;
        }
        // A peer that waits itself (every rank waiting: a slow transfer, a hang inside the
        // library, mismatched operations) is not blamed; nor is one that computes.
        if (peer.lost || peer.comm_in_flight > 0 || !peer.barrier.empty() || peer.in_get) {
          continue;
        }
        if (peer.last_seen - peer.last_progress <= bound) continue;
        Culprit& c = culprits[rank];
        c.waiters.push_back(waiter.rank);
        if (wait.waited > c.waited) c.waited = wait.waited, c.op = wait.op;
      }
    }
    if (culprits.empty()) {
      check_deadlock(now);
      return;
    }
    const auto& [rank, c] = *culprits.begin();
    const Worker& stuck = *by_rank[static_cast<size_t>(rank)];
    std::vector<int> waiters = c.waiters;
    std::sort(waiters.begin(), waiters.end());
    waiters.erase(std::unique(waiters.begin(), waiters.end()), waiters.end());
    fail(fmt::format(
        "{} is stuck: {} {} {} waited up to {} ms for it in {} (CLEAVE_STUCK_TIMEOUT_MS={}), while "
        "it made no progress for {} ms (no communication, no CPU use) outside any collective; it "
        "was {}",
        stuck.describe(), waiters.size() > 1 ? "ranks" : "rank", fmt::join(waiters, ", "),
        waiters.size() > 1 ? "have" : "has", c.waited.count(), c.op, bound.count(),
        std::chrono::duration_cast<milliseconds>(stuck.last_seen - stuck.last_progress).count(),
        stuck.activity));
  }

  // "3 of MS_WORKER_NUM=4 registered (host a: node ids 0, 1; host b: 1 without MS_NODE_ID);
  // missing: 1 worker, MS_NODE_ID 3 not taken".
  std::string registered_and_missing() const {
    std::map<std::string, std::pair<std::vector<int>, int>> by_host;
    std::set<int> taken;
    for (const Worker& w : workers_) {
      auto& [ids, without] = by_host[w.host];
      if (w.node_id.empty()) {
        ++without;
      } else {
        ids.push_back(std::stoi(w.node_id));
        taken.insert(ids.back());
      }
    }
    for (auto& [host, entry] : by_host) std::sort(entry.first.begin(), entry.first.end());
    std::vector<std::string> hosts;
    for (const auto& [host, entry] : by_host) {
      const auto& [ids, without] = entry;
      std::string text = "host " + host + ":";
      if (!ids.empty())
        text += fmt::format(" node id{} {}", ids.size() > 1 ? "s" : "", fmt::join(ids, ", "));
      if (without > 0)
        text += fmt::format("{} {} without MS_NODE_ID", ids.empty() ? "" : ",", without);
      hosts.push_back(text);
    }
    std::vector<int> free_ids;
    for (int id = 0; id < config_.worker_num; ++id) {
      if (taken.count(id) == 0) free_ids.push_back(id);
    }
    const int missing = config_.worker_num - static_cast<int>(workers_.size());
    std::string text = fmt::format(
        "{} of MS_WORKER_NUM={} registered{}; missing: {} worker{}", workers_.size(),
        config_.worker_num, hosts.empty() ? "" : fmt::format(" ({})", fmt::join(hosts, "; ")),
        missing, missing == 1 ? "" : "s");
    if (taken.empty()) return text;  // the workers use no MS_NODE_ID: no id can be missing
    if (!free_ids.empty() && static_cast<int>(free_ids.size()) <= 16) {
      text += fmt::format(", MS_NODE_ID {} not taken", fmt::join(free_ids, ", "));
    } else if (!free_ids.empty()) {
      text += fmt::format(", {} MS_NODE_IDs not taken (the first: {})", free_ids.size(),
                          free_ids.front());
    }
    return text;
  }

  std::string progress(Clock::time_point now) const {
    return fmt::format(
        "waiting for workers after {:.1f} s: {} (MS_TOPO_TIMEOUT={} s)",
        std::chrono::duration<double>(now - started_).count(), registered_and_missing(),
        std::chrono::duration_cast<std::chrono::seconds>(config_.topo_timeout).count());
  }

  // NOTE [Deadlocks]
  // check_stuck blames no peer that waits itself. When ranks wait only for one another -- every
  // rank of a set D waits (in a communication operation, at a barrier or for a store key) for
  // longer than CLEAVE_STUCK_TIMEOUT_MS, makes no progress for as long, and every rank it waits
  // for is in D -- nothing can ever end those waits: mismatched collective orders, receives whose
  // sends never come. The job fails then with one line per rank of D saying what it waits for
  // (operation, group, peers, tag), instead of waiting for CLEAVE_COMM_TIMEOUT_MS. A store get
  // waits for no rank in particular: a set holding one is a deadlock only when it holds every
  // live rank. (A transfer so slow that its ranks use almost no CPU for longer than the bound
  // would look the same: raise CLEAVE_STUCK_TIMEOUT_MS, or set it to 0, for such jobs.)
  void check_deadlock(Clock::time_point now) {
    const milliseconds bound = config_.stuck_timeout;
    struct Waiting {
      const Worker* worker;
      milliseconds waited;
      std::string what;
      std::vector<int> peers;  // empty: any rank (a store get)
    };
    std::map<int, Waiting> stalled;  // D, by rank
    int live = 0;
    for (const Worker& w : workers_) {
      if (w.finished || w.lost) continue;
      ++live;
      if (w.last_seen - w.last_progress <= bound) continue;  // it progresses
      if (w.comm_in_flight > 0 && w.comm_waited > bound) {
        stalled[w.rank] = {
            &w, w.comm_waited,
            fmt::format("in {} for world rank{} {}", w.comm_op, w.comm_peers.size() > 1 ? "s" : "",
                        fmt::join(w.comm_peers, ", ")),
            w.comm_peers};
      } else if (!w.barrier.empty() && now - w.barrier_since > bound) {
        const BarrierState& b = barriers_.at(w.barrier);
        if (b.generation != w.barrier_generation) continue;
        Waiting wait{&w, std::chrono::duration_cast<milliseconds>(now - w.barrier_since), "", {}};
        for (int rank = 0; rank < config_.worker_num; ++rank) {
          if (b.arrived.count(rank) == 0) wait.peers.push_back(rank);
        }
        wait.what = fmt::format("at barrier '{}' for rank{} {}", w.barrier,
                                wait.peers.size() > 1 ? "s" : "", fmt::join(wait.peers, ", "));
        stalled[w.rank] = std::move(wait);
      } else if (w.in_get && now - w.get_since > bound) {
        stalled[w.rank] = {&w,
                           std::chrono::duration_cast<milliseconds>(now - w.get_since),
                           fmt::format("for store key '{}' (any rank may set it)", w.get_key),
                           {}};
      }
    }
    if (stalled.empty()) return;
    for (const auto& [rank, wait] : stalled) {
      if (wait.peers.empty() && static_cast<int>(stalled.size()) < live) return;
      for (int peer : wait.peers) {
        if (stalled.count(peer) == 0) return;  // it waits for a rank that is not stalled
      }
    }
    std::vector<int> ranks;
    std::string lines;
    for (const auto& [rank, wait] : stalled) {
      ranks.push_back(rank);
      lines += fmt::format("\n  {}: waiting {} ms {}", wait.worker->describe(), wait.waited.count(),
                           wait.what);
    }
    fail(fmt::format(
        "deadlock: rank{} {} {} waited longer than CLEAVE_STUCK_TIMEOUT_MS={} ms, each for ranks "
        "that wait too, and none makes progress (mismatched collective order, or a receive "
        "whose send never comes); what each rank waits for:{}",
        ranks.size() > 1 ? "s" : "", fmt::join(ranks, ", "), ranks.size() > 1 ? "have" : "has",
        bound.count(), lines));
  }

  grpc::Status report_failure(Worker& worker, pb::Status* status) {
    worker.told_failure = true;
    status->set_ok(false);
    status->set_job_failed(true);
    status->set_unavailable(true);
    status->set_reported_by_worker(failure_reported_);
    status->set_error(*failure_);
    return grpc::Status::OK;
  }

  void fail(const std::string& reason) {
    if (failure_) return;
    failure_ = reason;
    failed_at_ = Clock::now();
    log_line("job failed: " + reason);
    cv_.notify_all();
  }

  // Assigns ranks as NOTE [Job lifecycle] says.
  void form() {
    int size = config_.worker_num;
    std::vector<bool> taken(size, false);
    for (Worker& worker : workers_) {
      if (worker.node_id.empty()) continue;
      worker.rank = std::stoi(worker.node_id);
      taken[worker.rank] = true;
    }
    std::vector<size_t> free_workers;
    for (size_t i = 0; i < workers_.size(); ++i) {
      if (workers_[i].rank < 0) free_workers.push_back(i);
    }
    std::stable_sort(free_workers.begin(), free_workers.end(),
                     [&](size_t a, size_t b) { return workers_[a].host < workers_[b].host; });
    int next = 0;
    for (size_t i : free_workers) {
      while (taken[next]) ++next;
      workers_[i].rank = next;
      taken[next] = true;
    }
    std::map<std::string, std::vector<Worker*>> by_host;
    for (Worker& worker : workers_) by_host[worker.host].push_back(&worker);
    for (auto& [host, members] : by_host) {
      std::sort(members.begin(), members.end(),
                [](const Worker* a, const Worker* b) { return a->rank < b->rank; });
      for (size_t i = 0; i < members.size(); ++i) {
        members[i]->local_rank = static_cast<int>(i);
        members[i]->local_size = static_cast<int>(members.size());
      }
    }
    formed_ = true;
    std::vector<std::string> ranks;
    for (const Worker& worker : workers_) ranks.push_back(worker.describe());
    log_line(fmt::format("all {} workers registered: {}", size, fmt::join(ranks, "; ")));
    cv_.notify_all();
  }

  const JobConfig config_;
  const Clock::time_point started_;
  Clock::time_point next_progress_;  // NOTE [No silent waits]
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Worker> workers_;  // indexed by worker id (arrival order); deque: stable references
  bool formed_ = false;
  std::optional<std::string> failure_;
  bool failure_reported_ = false;  // by the failing worker itself (Fail)
  Clock::time_point failed_at_;
  std::map<std::string, std::string> store_;
  std::map<std::string, BarrierState> barriers_;
};

}  // namespace

int run_scheduler(const JobConfig& config, const std::function<void(bool)>& on_listening) {
  Job job(config);
  grpc::ServerBuilder builder;
  int port = 0;
  builder.AddListeningPort(config.address(), grpc::InsecureServerCredentials(), &port);
  // A second job on the same port must fail to start, not share the port (gRPC's default).
  builder.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);
  builder.SetMaxReceiveMessageSize(-1);
  builder.SetMaxSendMessageSize(-1);
  builder.RegisterService(&job);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  if (server == nullptr || port == 0) {
    log_line(fmt::format(
        "cannot listen on {} (MS_SCHED_HOST:MS_SCHED_PORT); is the port in use by another job, "
        "or is MS_SCHED_HOST not an address of this host?",
        config.address()));
    if (on_listening) on_listening(false);
    return 1;
  }
  if (on_listening) on_listening(true);
  log_line(fmt::format("serving a job of MS_WORKER_NUM={} workers on {}", config.worker_num,
                       config.address()));
  std::optional<int> status;
  while (!status) status = job.monitor();
  server->Shutdown(std::chrono::system_clock::now() + milliseconds(500));
  return *status;
}

}  // namespace cleave::cluster

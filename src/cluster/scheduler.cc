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

#include "cluster/liveness.h"
#include "scheduler.grpc.pb.h"

namespace cleave::cluster {
namespace {

namespace pb = ::cleave::cluster::proto;
using std::chrono::milliseconds;

void log_line(const std::string& line) {
  std::fprintf(stderr, "cleave scheduler: %s\n", line.c_str());
  std::fflush(stderr);
}

struct Worker {
  WorkerLiveness live;  // who it is, its heartbeats and its waits, for the verdicts
  std::string node_id;
  int local_rank = -1;
  int local_size = 0;
  bool told_failure = false;       // has received the failure in some reply
  int64_t barrier_generation = 0;  // of the barrier it waits at (live.barrier)

  std::string describe() const { return live.describe(); }
};

// What a heartbeat says (cluster/liveness.h).
Heartbeat from_request(const pb::HeartbeatRequest& request) {
  return Heartbeat{request.activity(),
                   request.activity_changes(),
                   request.cpu_us(),
                   request.comm_completed(),
                   request.comm_in_flight(),
                   request.comm_op(),
                   {request.comm_peers().begin(), request.comm_peers().end()},
                   milliseconds(request.comm_waited_ms())};
}

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

  // One pass of the monitor: fails the job on a topology timeout or on the verdict of
  // cluster/liveness.h (a lost worker, a stuck rank, a deadlock). Returns the exit status once the
  // job is over (0 finished, 1 failed), nullopt while it goes on.
  std::optional<int> monitor() {
    std::unique_lock lock(mu_);
    cv_.wait_for(lock, std::min(config_.heartbeat_interval, milliseconds(100)));
    Clock::time_point now = Clock::now();
    if (failure_) {
      // A worker silent for longer than the heartbeat timeout cannot be told (its host or link
      // is gone): waiting for it would only delay this process's end.
      bool all_told = std::all_of(workers_.begin(), workers_.end(), [&](const Worker& w) {
        return w.live.lost || w.live.finished || w.told_failure ||
               now - w.live.last_seen > config_.heartbeat_timeout;
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
    if (formed_ && all_finished()) {
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
    const LivenessBounds bounds{config_.heartbeat_timeout, config_.stuck_timeout};
    if (std::optional<Verdict> verdict = judge(liveness(), formed_, bounds, now)) {
      if (verdict->kind == Verdict::Kind::kLost) {
        workers_[verdict->lost_worker].live.lost = true;
        for (int id : verdict->silent_workers) workers_[id].live.lost = true;
      }
      fail(verdict->message);
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
      const WorkerLiveness& w = workers_[id].live;
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
              request->node_id(), other.live.host, other.live.pid));
        }
      }
    }
    Worker worker;
    worker.live.host = request->host();
    worker.live.pid = request->pid();
    worker.live.last_seen = Clock::now();
    worker.live.last_progress = worker.live.last_seen;
    worker.node_id = request->node_id();
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
    worker->live.activity = "waiting for the other workers to register";
    bool ready = cv_.wait_for(lock, milliseconds(request->timeout_ms()),
                              [&] { return formed_ || failure_.has_value(); });
    if (failure_) return report_failure(*worker, reply->mutable_status());
    if (!ready) {  // NOTE [No silent waits]: the worker prints this and asks again
      reply->set_pending(true);
      reply->set_progress(progress(Clock::now()));
      reply->mutable_status()->set_ok(true);
      return grpc::Status::OK;
    }
    worker->live.activity = "running";
    reply->set_rank(worker->live.rank);
    reply->set_world_size(config_.worker_num);
    reply->set_local_rank(worker->local_rank);
    reply->set_local_size(worker->local_size);
    std::vector<std::string> hosts(workers_.size());
    for (const Worker& w : workers_) hosts[w.live.rank] = w.live.host;
    for (const std::string& host : hosts) reply->add_hosts(host);
    reply->mutable_status()->set_ok(true);
    return grpc::Status::OK;
  }

  grpc::Status Heartbeat(grpc::ServerContext*, const pb::HeartbeatRequest* request,
                         pb::HeartbeatReply* reply) override {
    std::lock_guard lock(mu_);
    Worker* worker = find(request->worker_id(), reply->mutable_status());
    if (worker == nullptr) return grpc::Status::OK;
    note_heartbeat(worker->live, from_request(*request), Clock::now());
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
    worker->live.get = StoreWait{request->key(), Clock::now()};
    bool found = cv_.wait_for(lock, milliseconds(request->timeout_ms()), [&] {
      return store_.count(request->key()) > 0 || failure_.has_value();
    });
    worker->live.get.reset();
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
    barrier.arrived.insert(worker->live.rank);
    worker->live.barrier = BarrierWait{request->name(), Clock::now()};
    worker->barrier_generation = generation;
    if (static_cast<int>(barrier.arrived.size()) == config_.worker_num) {
      barrier.arrived.clear();
      ++barrier.generation;
      cv_.notify_all();
    }
    bool passed = cv_.wait_for(lock, milliseconds(request->timeout_ms()), [&] {
      return barrier.generation != generation || failure_.has_value();
    });
    worker->live.barrier.reset();
    if (failure_) return report_failure(*worker, reply);
    if (!passed) {
      const std::vector<int> missing = not_arrived(barrier);
      barrier.arrived.erase(worker->live.rank);
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
    worker->live.activity = "failed: " + request->error();
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
    worker->live.finished = true;
    worker->live.finished_at = Clock::now();
    worker->live.activity = "finished, waiting for the other workers";
    cv_.notify_all();
    if (request->wait_for_job()) {
      cv_.wait(lock, [&] { return failure_.has_value() || all_finished(); });
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

  bool all_finished() const {
    return std::all_of(workers_.begin(), workers_.end(),
                       [](const Worker& w) { return w.live.finished; });
  }

  // What every worker reported, by worker id, with the state of the barrier each waits at.
  std::vector<WorkerLiveness> liveness() const {
    std::vector<WorkerLiveness> workers;
    for (const Worker& w : workers_) {
      WorkerLiveness& live = workers.emplace_back(w.live);
      if (!live.barrier) continue;
      const BarrierState& b = barriers_.at(live.barrier->name);
      live.barrier->passed = b.generation != w.barrier_generation;  // the waiter is waking up
      if (!live.barrier->passed) live.barrier->missing = not_arrived(b);
    }
    return workers;
  }

  // The ranks that have not arrived at `barrier` in its current generation.
  std::vector<int> not_arrived(const BarrierState& barrier) const {
    std::vector<int> ranks;
    for (int rank = 0; rank < config_.worker_num; ++rank) {
      if (barrier.arrived.count(rank) == 0) ranks.push_back(rank);
    }
    return ranks;
  }

  // "3 of MS_WORKER_NUM=4 registered (host a: node ids 0, 1; host b: 1 without MS_NODE_ID);
  // missing: 1 worker, MS_NODE_ID 3 not taken".
  std::string registered_and_missing() const {
    std::map<std::string, std::pair<std::vector<int>, int>> by_host;
    std::set<int> taken;
    for (const Worker& w : workers_) {
      auto& [ids, without] = by_host[w.live.host];
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
      worker.live.rank = std::stoi(worker.node_id);
      taken[worker.live.rank] = true;
    }
    std::vector<size_t> free_workers;
    for (size_t i = 0; i < workers_.size(); ++i) {
      if (workers_[i].live.rank < 0) free_workers.push_back(i);
    }
    std::stable_sort(free_workers.begin(), free_workers.end(), [&](size_t a, size_t b) {
      return workers_[a].live.host < workers_[b].live.host;
    });
    int next = 0;
    for (size_t i : free_workers) {
      while (taken[next]) ++next;
      workers_[i].live.rank = next;
      taken[next] = true;
    }
    std::map<std::string, std::vector<Worker*>> by_host;
    for (Worker& worker : workers_) by_host[worker.live.host].push_back(&worker);
    for (auto& [host, members] : by_host) {
      std::sort(members.begin(), members.end(),
                [](const Worker* a, const Worker* b) { return a->live.rank < b->live.rank; });
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

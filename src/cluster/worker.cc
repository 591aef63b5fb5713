#include "cluster/worker.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <grpcpp/grpcpp.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>

#include "cleave/comm/progress.h"
#include "cleave/core/error.h"
#include "scheduler.grpc.pb.h"

namespace cleave::cluster {

namespace pb = ::cleave::cluster::proto;
using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

namespace {

constexpr const char* kNoActivity = "running (between cleave::init and cleave::release)";
std::mutex activity_mu;
std::string activity_now = kNoActivity;
int64_t activity_opened = 0;  // ActivityScopes opened so far (a sign of progress)

int64_t cpu_time_us() {
  timespec t{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
  return static_cast<int64_t>(t.tv_sec) * 1'000'000 + t.tv_nsec / 1000;
}

std::string host_name() {
  char name[256] = {};
  if (gethostname(name, sizeof(name) - 1) != 0) return "unknown-host";
  return name;
}

std::string rank_text(int rank) {
  return rank < 0 ? fmt::format("worker (pid {}, not yet ranked)", getpid())
                  : fmt::format("rank {} (pid {})", rank, getpid());
}

}  // namespace

ActivityScope::ActivityScope(std::string activity) {
  std::lock_guard lock(activity_mu);
  previous_ = std::exchange(activity_now, std::move(activity));
  ++activity_opened;
}

ActivityScope::~ActivityScope() {
  std::lock_guard lock(activity_mu);
  activity_now = std::move(previous_);
}

std::string ActivityScope::current() {
  std::lock_guard lock(activity_mu);
  return activity_now;
}

std::string doing_now() {
  std::string activity = ActivityScope::current();
  comm::CommSnapshot comm = comm::comm_snapshot();
  if (comm.in_flight == 0) return activity;
  std::string waiting = fmt::format("waiting {} ms in {}", comm.waited.count(), comm.op);
  if (!comm.peers.empty()) {
    waiting += fmt::format(" for world rank{} {}", comm.peers.size() > 1 ? "s" : "",
                           fmt::join(comm.peers, ", "));
  }
  return activity == kNoActivity ? waiting : activity + ", " + waiting;
}

namespace {
std::atomic<void (*)()> before_stop{nullptr};
}  // namespace

void set_before_stop(void (*fn)()) { before_stop = fn; }

void stop_process(const std::string& line) {
  static std::atomic<bool> stopping{false};
  if (!stopping.exchange(true)) {
    std::string text = line + "\n";
    std::fflush(stdout);
    std::fflush(stderr);
    [[maybe_unused]] ssize_t written = ::write(STDERR_FILENO, text.data(), text.size());
    if (void (*fn)() = before_stop.load()) fn();
    std::_Exit(1);
  }
  // Another thread is already stopping the process.
  for (;;) pause();
}

namespace {

// NOTE [Failure hook] in cleave/comm/progress.h, on a worker: a failed communication operation
// waits until the scheduler has had time to notice a lost peer, measured in heartbeats rather
// than wall time (a loaded machine delays both alike). A peer lost at the failure's time t0 is
// declared lost once it has been silent for CLEAVE_HEARTBEAT_TIMEOUT_MS, so a healthy reply to
// a heartbeat sent after t0 + that timeout + an interval + 500 ms (the scheduler's monitor
// cadence, with room) means there is no verdict to wait for. The heartbeat thread stops the
// process when a reply says the job failed or the scheduler cannot be reached. 0 while no
// worker heartbeats.
std::atomic<int64_t> verdict_margin_ms{0};
std::atomic<int64_t> verdict_cap_ms{0};          // give up after this long whatever happens
std::atomic<int64_t> healthy_heartbeat_sent{0};  // steady-clock ms of the last healthy one

int64_t steady_ms() {
  return std::chrono::duration_cast<milliseconds>(Clock::now().time_since_epoch()).count();
}

void wait_for_verdict(const std::string& /*error*/) {
  const int64_t t0 = steady_ms();
  while (verdict_margin_ms.load() > 0 && steady_ms() < t0 + verdict_cap_ms.load() &&
         healthy_heartbeat_sent.load() < t0 + verdict_margin_ms.load()) {
    std::this_thread::sleep_for(milliseconds(20));
  }
}

}  // namespace

struct WorkerClient::Rpc {
  std::shared_ptr<grpc::Channel> channel;
  std::unique_ptr<pb::Scheduler::Stub> stub;
};

WorkerClient::WorkerClient(JobConfig config) : config_(std::move(config)), rpc_(new Rpc) {
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(-1);
  args.SetMaxSendMessageSize(-1);
  // Reconnect quickly: the scheduler may come up a moment after the workers (seed 000's run.sh).
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 100);
  args.SetInt(GRPC_ARG_MIN_RECONNECT_BACKOFF_MS, 100);
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 1000);
  rpc_->channel =
      grpc::CreateCustomChannel(config_.address(), grpc::InsecureChannelCredentials(), args);
  rpc_->stub = pb::Scheduler::NewStub(rpc_->channel);
}

WorkerClient::~WorkerClient() { stop_heartbeats(); }

namespace {

void set_deadline(grpc::ClientContext& context, milliseconds timeout) {
  context.set_deadline(std::chrono::system_clock::now() + timeout);
}

// The kind of the error a reply reports: the scheduler marks timeouts and lost workers.
ErrorKind error_kind(const pb::Status& status) {
  return status.unavailable() ? ErrorKind::kUnavailable : ErrorKind::kInvalidArgument;
}

// A job failed by a worker's own report (NOTE [Failing workers report] in scheduler.h): that
// worker ends right after its report; the others wait a moment so that it ends first and a
// launcher (cleave-run, run.sh) names it as the first process to fail.
void let_the_reporter_end_first(const pb::Status& status) {
  if (status.reported_by_worker()) std::this_thread::sleep_for(milliseconds(500));
}

// Turns the outcome of a call into this process's reaction: a lost scheduler or a failed job
// stops the process (NOTE [Stopping on a failed job]); any other error is the caller's to see.
void check_reply(const grpc::Status& transport, const pb::Status& status, const JobConfig& config,
                 int rank, const std::string& what) {
  if (!transport.ok()) {
    stop_process(fmt::format(
        "cleave: {} stops: lost the scheduler at {} during {} ({}); this process was {}",
        rank_text(rank), config.address(), what, transport.error_message(), doing_now()));
  }
  if (status.job_failed()) {
    let_the_reporter_end_first(status);
    stop_process(fmt::format("cleave: {} stops: the job failed: {}; this process was {}",
                             rank_text(rank), status.error(), doing_now()));
  }
  if (!status.ok()) {
    throw Error(error_kind(status), fmt::format("cleave: {}: {}", what, status.error()));
  }
}

}  // namespace

Topology WorkerClient::join() {
  ActivityScope activity("registering with the scheduler");
  pb::RegisterRequest request;
  request.set_token(config_.token);
  request.set_host(host_name());
  if (config_.node_id) request.set_node_id(std::to_string(*config_.node_id));
  request.set_pid(getpid());
  request.set_worker_num(config_.worker_num);
  request.set_command(config_.command);
  pb::RegisterReply reply;
  {
    // NOTE [No silent waits] in scheduler.h: fail-fast calls, retried while the scheduler is
    // unavailable (not started yet, connection refused), saying so after 1 s and then every
    // progress interval. Only UNAVAILABLE is retried: such a call never reached the scheduler, so
    // a retry cannot register this worker twice.
    const auto start = Clock::now();
    const auto deadline = start + config_.topo_timeout;
    auto next_note = start + milliseconds(1000);
    const auto topo_s =
        std::chrono::duration_cast<std::chrono::seconds>(config_.topo_timeout).count();
    // Waits for the connection in slices up to the next note; the scheduler answers a repeated
    // Register of this process with the same id, so a slice that ends just after its request
    // went out does no harm.
    auto call = [&](bool wait_for_ready, milliseconds timeout) {
      grpc::ClientContext context;
      context.set_wait_for_ready(wait_for_ready);
      set_deadline(context, std::max(milliseconds(1), timeout));
      return rpc_->stub->Register(&context, request, &reply);
    };
    std::string last_error = "no connection";
    for (;;) {
      auto now = Clock::now();
      const auto slice = std::chrono::duration_cast<milliseconds>(
          std::min(deadline, std::max(next_note, now + milliseconds(50))) - now);
      grpc::Status status = call(/*wait_for_ready=*/true, slice);
      if (status.ok()) break;
      now = Clock::now();
      const bool retry = status.error_code() == grpc::StatusCode::UNAVAILABLE ||
                         status.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED;
      if (status.error_code() != grpc::StatusCode::DEADLINE_EXCEEDED) {
        last_error = status.error_message();
      }
      if (!retry || now >= deadline) {
        CLEAVE_UNAVAILABLE(
            "cleave::init: cannot reach the scheduler at {} (MS_SCHED_HOST:MS_SCHED_PORT) within "
            "MS_TOPO_TIMEOUT={} s: {}; is a process with MS_ROLE=MS_SCHED running there?",
            config_.address(), topo_s, last_error);
      }
      if (now >= next_note) {
        // Why there is no connection ("Connection refused", ...): one fail-fast call.
        status = call(/*wait_for_ready=*/false, milliseconds(500));
        if (status.ok()) break;
        if (status.error_code() != grpc::StatusCode::DEADLINE_EXCEEDED) {
          last_error = status.error_message();
        }
        std::fprintf(stderr,
                     "cleave: worker (pid %d) cannot reach the scheduler at %s yet (%s) after %lld "
                     "s; retrying until MS_TOPO_TIMEOUT=%lld s (is a process with "
                     "MS_ROLE=MS_SCHED running there?)\n",
                     static_cast<int>(getpid()), config_.address().c_str(), last_error.c_str(),
                     static_cast<long long>(
                         std::chrono::duration_cast<std::chrono::seconds>(now - start).count()),
                     static_cast<long long>(topo_s));
        std::fflush(stderr);
        next_note = now + config_.progress_interval();
      }
    }
  }
  if (!reply.status().ok()) {
    throw Error(error_kind(reply.status()),
                fmt::format("cleave::init: {}", reply.status().error()));
  }
  worker_id_ = reply.worker_id();
  heartbeat_thread_ = std::thread([this] { heartbeat_loop(); });
  verdict_margin_ms = (config_.heartbeat_timeout + config_.heartbeat_interval).count() + 500;
  verdict_cap_ms = 3 * config_.heartbeat_timeout.count() + config_.heartbeat_interval.count();
  comm::set_failure_hook(wait_for_verdict);

  // NOTE [No silent waits] in scheduler.h: asks every progress interval and prints the
  // scheduler's progress line while the job forms; the scheduler fails the job at MS_TOPO_TIMEOUT.
  ActivityScope waiting("waiting for the other workers to register");
  pb::TopologyRequest topology_request;
  topology_request.set_worker_id(worker_id_);
  topology_request.set_timeout_ms(config_.progress_interval().count());
  pb::TopologyReply topology_reply;
  const auto give_up = Clock::now() + config_.topo_timeout + config_.heartbeat_timeout;
  for (;;) {
    topology_reply.Clear();
    grpc::ClientContext context;
    set_deadline(context, config_.progress_interval() + config_.heartbeat_timeout);
    grpc::Status status = rpc_->stub->WaitTopology(&context, topology_request, &topology_reply);
    check_reply(status, topology_reply.status(), config_, rank_, "cleave::init");
    if (!topology_reply.pending()) break;
    std::fprintf(stderr, "cleave: worker (pid %d) %s\n", static_cast<int>(getpid()),
                 topology_reply.progress().c_str());
    std::fflush(stderr);
    if (Clock::now() > give_up) {
      CLEAVE_UNAVAILABLE("cleave::init: the job did not form within MS_TOPO_TIMEOUT: {}",
                         topology_reply.progress());
    }
  }
  Topology topology;
  topology.rank = rank_ = topology_reply.rank();
  topology.world_size = topology_reply.world_size();
  topology.local_rank = topology_reply.local_rank();
  topology.local_size = topology_reply.local_size();
  topology.hosts.assign(topology_reply.hosts().begin(), topology_reply.hosts().end());
  return topology;
}

void WorkerClient::heartbeat_loop() {
  Clock::time_point last_reply = Clock::now();
  std::unique_lock lock(mu_);
  while (!stopping_) {
    lock.unlock();
    pb::HeartbeatRequest request;
    request.set_worker_id(worker_id_);
    {
      std::lock_guard activity_lock(activity_mu);
      request.set_activity(activity_now);
      request.set_activity_changes(activity_opened);
    }
    request.set_cpu_us(cpu_time_us());
    comm::CommSnapshot comm = comm::comm_snapshot();
    request.set_comm_completed(comm.completed);
    request.set_comm_in_flight(comm.in_flight);
    request.set_comm_op(comm.op);
    for (int peer : comm.peers) request.add_comm_peers(peer);
    request.set_comm_waited_ms(comm.waited.count());
    pb::HeartbeatReply reply;
    const int64_t sent = steady_ms();
    grpc::ClientContext context;
    set_deadline(context, std::min(config_.heartbeat_timeout, 2 * config_.heartbeat_interval));
    grpc::Status status = rpc_->stub->Heartbeat(&context, request, &reply);
    lock.lock();
    if (stopping_) break;
    Clock::time_point now = Clock::now();
    if (status.ok()) {
      last_reply = now;
      if (!reply.status().job_failed()) healthy_heartbeat_sent = sent;
      if (reply.status().job_failed()) {
        let_the_reporter_end_first(reply.status());
        stop_process(fmt::format("cleave: {} stops: the job failed: {}; this process was {}",
                                 rank_text(rank_), reply.status().error(), doing_now()));
      }
    } else if (now - last_reply > config_.heartbeat_timeout) {
      stop_process(
          fmt::format("cleave: {} stops: lost the scheduler at {}: no heartbeat reply for {} ms "
                      "(CLEAVE_HEARTBEAT_TIMEOUT_MS={}; {}); this process was {}",
                      rank_text(rank_), config_.address(),
                      std::chrono::duration_cast<milliseconds>(now - last_reply).count(),
                      config_.heartbeat_timeout.count(), status.error_message(), doing_now()));
    }
    cv_.wait_for(lock, config_.heartbeat_interval, [&] { return stopping_; });
  }
}

void WorkerClient::stop_heartbeats() {
  verdict_margin_ms = 0;
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  if (heartbeat_thread_.joinable()) heartbeat_thread_.join();
}

void WorkerClient::set(const std::string& key, const std::vector<uint8_t>& value) {
  pb::SetRequest request;
  request.set_worker_id(worker_id_);
  request.set_key(key);
  request.set_value(std::string(value.begin(), value.end()));
  pb::Status reply;
  grpc::ClientContext context;
  set_deadline(context, config_.comm_timeout);
  grpc::Status status = rpc_->stub->Set(&context, request, &reply);
  check_reply(status, reply, config_, rank_, fmt::format("store set of key '{}'", key));
}

std::vector<uint8_t> WorkerClient::get(const std::string& key, milliseconds timeout) {
  ActivityScope activity(fmt::format("waiting for store key '{}'", key));
  pb::GetRequest request;
  request.set_worker_id(worker_id_);
  request.set_key(key);
  request.set_timeout_ms(timeout.count());
  pb::GetReply reply;
  grpc::ClientContext context;
  set_deadline(context, timeout + config_.heartbeat_timeout);
  grpc::Status status = rpc_->stub->Get(&context, request, &reply);
  check_reply(status, reply.status(), config_, rank_, fmt::format("store get of key '{}'", key));
  return std::vector<uint8_t>(reply.value().begin(), reply.value().end());
}

int64_t WorkerClient::add(const std::string& key, int64_t delta) {
  pb::AddRequest request;
  request.set_worker_id(worker_id_);
  request.set_key(key);
  request.set_delta(delta);
  pb::AddReply reply;
  grpc::ClientContext context;
  set_deadline(context, config_.comm_timeout);
  grpc::Status status = rpc_->stub->Add(&context, request, &reply);
  check_reply(status, reply.status(), config_, rank_, fmt::format("store add to key '{}'", key));
  return reply.value();
}

bool WorkerClient::check(const std::vector<std::string>& keys) {
  pb::CheckRequest request;
  request.set_worker_id(worker_id_);
  for (const std::string& key : keys) request.add_keys(key);
  pb::CheckReply reply;
  grpc::ClientContext context;
  set_deadline(context, config_.comm_timeout);
  grpc::Status status = rpc_->stub->Check(&context, request, &reply);
  check_reply(status, reply.status(), config_, rank_, "store check");
  return reply.all_set();
}

void WorkerClient::barrier(const std::string& name, milliseconds timeout) {
  ActivityScope activity(fmt::format("waiting at barrier '{}'", name));
  pb::BarrierRequest request;
  request.set_worker_id(worker_id_);
  request.set_name(name);
  request.set_timeout_ms(timeout.count());
  pb::Status reply;
  grpc::ClientContext context;
  set_deadline(context, timeout + config_.heartbeat_timeout);
  grpc::Status status = rpc_->stub->Barrier(&context, request, &reply);
  check_reply(status, reply, config_, rank_, fmt::format("barrier '{}'", name));
}

void WorkerClient::report_failure(const std::string& error) {
  if (worker_id_ < 0) return;
  {
    std::lock_guard lock(mu_);
    if (stopping_) return;  // finished or already reported
  }
  pb::FailRequest request;
  request.set_worker_id(worker_id_);
  request.set_error(error);
  pb::Status reply;
  grpc::ClientContext context;
  set_deadline(context, std::min(config_.heartbeat_timeout, milliseconds(2000)));
  rpc_->stub->Fail(&context, request, &reply);  // best effort: the heartbeats stop anyway
  stop_heartbeats();
}

void WorkerClient::finish() {
  // NOTE [Workers end together] (scheduler.cc): a worker that finished waits for the others,
  // heartbeating, for as long as they run; a failure meanwhile stops it with status 1.
  ActivityScope activity("finished, waiting for the other workers to finish");
  pb::FinishRequest request;
  request.set_worker_id(worker_id_);
  request.set_wait_for_job(true);
  pb::Status reply;
  grpc::ClientContext context;
  set_deadline(context, std::chrono::hours(24 * 365));
  grpc::Status status = rpc_->stub->Finish(&context, request, &reply);
  stop_heartbeats();
  check_reply(status, reply, config_, rank_, "cleave::release");
}

namespace {

class SchedulerStore final : public comm::Store {
 public:
  explicit SchedulerStore(std::shared_ptr<WorkerClient> client) : client_(std::move(client)) {}
  void set(const std::string& key, const std::vector<uint8_t>& value) override {
    client_->set(key, value);
  }
  std::vector<uint8_t> get(const std::string& key, milliseconds timeout) override {
    return client_->get(key, timeout);
  }
  int64_t add(const std::string& key, int64_t delta) override { return client_->add(key, delta); }
  bool check(const std::vector<std::string>& keys) override { return client_->check(keys); }

 private:
  std::shared_ptr<WorkerClient> client_;
};

}  // namespace

std::shared_ptr<comm::Store> make_scheduler_store(std::shared_ptr<WorkerClient> client) {
  return std::make_shared<SchedulerStore>(std::move(client));
}

}  // namespace cleave::cluster

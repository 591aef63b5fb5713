// cleave::init() and cleave::release() (include/cleave/cluster/cluster.h): join the job in the
// mode join.h chooses, pick the backend, make the world group, and leave the job at release or
// at exit. The rank and group queries are in groups.cc.
#include <fmt/format.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <exception>
#include <mutex>
#include <optional>
#include <string>
#include <utility>

#include "cleave/cluster/activity.h"
#include "cleave/cluster/cluster.h"
#include "cleave/comm/group_registry.h"
#include "cleave/comm/process_group.h"
#include "cleave/core/error.h"
#include "cleave/core/threads.h"
#include "cluster/config.h"
#include "cluster/join.h"
#include "cluster/scheduler.h"
#include "cluster/state.h"
#include "cluster/worker.h"

namespace cleave {
namespace cluster {
namespace {

std::mutex state_mu;
ClusterState state;

}  // namespace

std::mutex& state_mutex() { return state_mu; }

ClusterState& process_state() { return state; }

ClusterState& initialized_state(const char* what) {
  CLEAVE_CHECK_ARG(state.initialized, "cleave::{}: call cleave::init() first", what);
  return state;
}

}  // namespace cluster

namespace {

using cluster::ClusterState;

std::string choose_backend(const std::string& requested, JoinMode mode) {
  if (requested.empty()) return mode == JoinMode::kMpi ? "mpi" : "gloo";
  if (requested == "gloo" || requested == "mpi" || requested == "nccl") {
    if (!comm::backend_available(requested)) {
      CLEAVE_UNIMPLEMENTED(
          "cleave::init: backend '{}' is not available in this build (gloo always is; mpi when "
          "built with OpenMPI, nccl when built with CUDA and NCCL)",
          requested);
    }
    return requested;
  }
  if (requested == "hccl") {
    CLEAVE_UNIMPLEMENTED(
        "cleave::init: backend 'hccl' (Huawei Ascend) is not available: cleave has no Ascend "
        "support; use 'gloo' (CPU, TCP), 'mpi' (under mpirun) or 'nccl' (NVIDIA GPUs)");
  }
  CLEAVE_FAIL(
      "cleave::init: unknown backend '{}'; expected one of gloo, mpi, nccl (or \"\" for "
      "the default of the device)",
      requested);
}

// The address this worker's Gloo transport listens on (NOTE [Backend rendezvous]).
std::string transport_host(const std::string& sched_host) {
  if (std::optional<std::string> ip = cluster::env_value("MS_WORKER_IP")) return *ip;
  if (sched_host == "127.0.0.1" || sched_host == "localhost") return "127.0.0.1";
  char name[256] = {};
  if (gethostname(name, sizeof(name) - 1) != 0) return "127.0.0.1";
  return name;
}

// NOTE [Backend rendezvous]
// The world comm::ProcessGroup is made inside init(). In dynamic networking its backend meets
// through the scheduler's store (Gloo exchanges its TCP addresses there; NCCL its unique id); the
// Gloo transport listens on MS_WORKER_IP when set, 127.0.0.1 when the scheduler is on loopback,
// and this host's name otherwise. Under mpirun the "mpi" backend needs no store. A rank table
// gives ranks but no store to meet through: no world group is made then (collectives need MS_*
// variables or mpirun), and standalone needs none (world size 1, collectives are identities).
void connect_backend(ClusterState& s) {
  const cluster::Membership& m = s.membership;
  if (m.mode == JoinMode::kStandalone || (m.mode == JoinMode::kRankTable && !m.client)) return;
  CLEAVE_CHECK_ARG(m.mode != JoinMode::kMpi || s.backend == "mpi",
                   "cleave::init('{}'): under mpirun only the 'mpi' backend can meet without a "
                   "scheduler; call init() or init(\"mpi\"), or start the job with cleave-run",
                   s.backend);
  comm::ProcessGroupOptions options;
  options.backend = s.backend;
  options.store = m.store;
  options.rank = m.rank;
  options.size = m.world_size;
  options.name = kWorldGroup;
  options.timeout = s.comm_timeout;
  if (m.client) {
    options.host = !m.transport_host.empty() ? m.transport_host
                                             : transport_host(m.client->config().sched_host);
  }
  cluster::ActivityScope activity(
      fmt::format("connecting the '{}' backend of the world group", s.backend));
  s.world = comm::create_process_group(options);
  comm::register_group(kWorldGroup, s.world);
}

// Registered with on_exit, which passes the process's exit status. A worker ending with status 0
// tells the scheduler it finished and waits for the others (NOTE [Workers end together] in
// scheduler.cc); one ending with another status only stops its heartbeats, so the scheduler
// declares it lost (naming it and what it was doing) and stops the job.
void release_at_exit(int exit_status, void*) {
  try {
    std::lock_guard lock(cluster::state_mutex());
    ClusterState& state = cluster::process_state();
    if (!state.initialized) return;
    const std::shared_ptr<cluster::WorkerClient>& client = state.membership.client;
    if (client && exit_status == 0) client->finish();
    // NOTE [Failing workers report]: at once, rather than a heartbeat timeout later (does
    // nothing after report_failure).
    if (client && exit_status != 0) {
      client->report_failure(
          fmt::format("its process exited with status {} (its log has the cause)", exit_status));
      // End now, before the other workers (they wait a moment for it): the backend's teardown
      // and static destructors are of no use to a process that failed. (Rank 0 of a rank table
      // still serves the job: it waits below until every rank was told.)
      if (!cluster::serves_rank_table_rendezvous()) {
        std::fflush(nullptr);
        std::_Exit(exit_status);
      }
    }
    // The backend's threads go before the static objects they use.
    comm::clear_groups();
    state = ClusterState();
    cluster::end_rank_table_rendezvous();
  } catch (const std::exception& error) {
    std::fprintf(stderr, "cleave: release at exit failed: %s\n", error.what());
  }
}

void release_at_exit_once() {
  static bool registered = (on_exit(release_at_exit, nullptr), true);
  (void)registered;
}

// NOTE [Failing workers report] in cluster/scheduler.h, for a process that dies of an uncaught
// exception: the job learns its message before the process aborts.
std::terminate_handler previous_terminate = nullptr;

[[noreturn]] void report_then_terminate() {
  std::string what = "terminated (std::terminate was called)";
  if (std::exception_ptr error = std::current_exception()) {
    try {
      std::rethrow_exception(error);
    } catch (const std::exception& e) {
      what = std::string("terminated by an uncaught exception: ") + e.what();
    } catch (...) {
      what = "terminated by an uncaught exception of an unknown type";
    }
  }
  std::fprintf(stderr, "cleave: %s\n", what.c_str());
  std::fflush(stderr);
  std::shared_ptr<cluster::WorkerClient> client;
  {
    // Never wait: this process is dying.
    std::unique_lock lock(cluster::state_mutex(), std::try_to_lock);
    if (lock.owns_lock()) client = cluster::process_state().membership.client;
  }
  if (client) client->report_failure(what);
  if (previous_terminate != nullptr) previous_terminate();
  std::abort();
}

void install_terminate_handler() {
  static bool installed = (previous_terminate = std::set_terminate(report_then_terminate), true);
  (void)installed;
}

}  // namespace

void init(const std::string& backend) {
  std::lock_guard lock(cluster::state_mutex());
  ClusterState& state = cluster::process_state();
  if (state.initialized) {
    CLEAVE_CHECK_ARG(backend.empty() || backend == state.backend,
                     "cleave::init: already initialized with backend '{}'; got '{}'", state.backend,
                     backend);
    return;
  }
  const cluster::JoinChoice choice = cluster::choose_join_mode();
  ClusterState s;
  switch (choice.mode) {
    case JoinMode::kDynamic: {
      const cluster::JobConfig config = cluster::read_job_config();
      s.backend = choose_backend(backend, choice.mode);
      if (config.role == cluster::Role::kScheduler) {
        // NOTE [The scheduler ends its process]: seed 000's run.sh starts the same program as
        // the scheduler and reads its exit status; nothing after init() runs in this role.
        const int status = cluster::run_scheduler(config);
        std::fflush(stdout);
        std::fflush(stderr);
        std::_Exit(status);
      }
      s.comm_timeout = config.comm_timeout;
      s.membership = cluster::join_dynamic(config);
      release_at_exit_once();
      install_terminate_handler();
      break;
    }
    case JoinMode::kMpi:
      s.comm_timeout = cluster::read_comm_timeout();
      s.membership = cluster::join_mpi();
      s.backend = choose_backend(backend, choice.mode);
      break;
    case JoinMode::kRankTable:
      s.comm_timeout = cluster::read_comm_timeout();
      s.backend = choose_backend(backend, choice.mode);
      s.membership = cluster::join_rank_table(choice.rank_table);
      if (s.membership.client) release_at_exit_once();
      break;
    case JoinMode::kStandalone:
      s.backend = choose_backend(backend, choice.mode);
      s.membership = cluster::join_standalone();
      break;
  }
  s.groups = cluster::GroupTable(s.membership.rank, s.membership.world_size);
  connect_backend(s);
  s.initialized = true;
  // NOTE [Threads per worker] in cleave/core/threads.h: the first worker of a host says it.
  const std::optional<std::string> share = threads::share_host_cores(s.membership.local_size);
  if (share && s.membership.local_rank == 0) std::fprintf(stderr, "cleave: %s\n", share->c_str());
  state = std::move(s);
}

void release() {
  std::shared_ptr<cluster::WorkerClient> client;
  {
    std::lock_guard lock(cluster::state_mutex());
    ClusterState& state = cluster::initialized_state("release");
    client = std::move(state.membership.client);
    state = ClusterState();
    comm::clear_groups();
  }
  if (client) client->finish();
  cluster::end_rank_table_rendezvous();
}

void report_failure(const std::string& error) {
  try {
    std::shared_ptr<cluster::WorkerClient> client;
    {
      std::lock_guard lock(cluster::state_mutex());
      client = cluster::process_state().membership.client;
    }
    if (client) client->report_failure(error);
  } catch (const std::exception&) {
    // Best effort: the process is failing anyway.
  }
}

bool is_initialized() {
  std::lock_guard lock(cluster::state_mutex());
  return cluster::process_state().initialized;
}

JoinMode join_mode() {
  std::lock_guard lock(cluster::state_mutex());
  return cluster::initialized_state("join_mode").membership.mode;
}

const std::string& get_backend() {
  std::lock_guard lock(cluster::state_mutex());
  return cluster::initialized_state("get_backend").backend;
}

}  // namespace cleave

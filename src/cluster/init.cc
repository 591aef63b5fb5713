// cleave::init() and the rank/group queries (include/cleave/cluster/cluster.h).
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <future>
#include <map>
#include <mutex>
#include <set>
#include <thread>
#include <utility>

#include "cleave/cluster/cluster.h"
#include "cleave/comm/group_registry.h"
#include "cleave/comm/process_group.h"
#include "cleave/comm/store.h"
#include "cleave/core/env.h"
#include "cleave/core/error.h"
#include "cluster/config.h"
#include "cluster/rank_table.h"
#include "cluster/scheduler.h"
#include "cluster/worker.h"

namespace cleave {
namespace {

using cluster::env_value;

struct ClusterState {
  bool initialized = false;
  JoinMode mode = JoinMode::kStandalone;
  std::string backend;
  int rank = 0;
  int world_size = 1;
  int local_rank = 0;
  int local_size = 1;
  std::shared_ptr<cluster::WorkerClient> client;  // dynamic networking only
  std::shared_ptr<comm::Store> store;
  std::chrono::milliseconds comm_timeout{300'000};
  std::map<std::string, std::vector<int>> groups;  // created groups: world rank of each member
  std::shared_ptr<comm::ProcessGroup> world;       // null when standalone or from a rank table
  std::string transport_host;  // where this rank's Gloo transport listens (when known)
};

std::mutex state_mu;
ClusterState state;

// Rank 0 of a rank table serves the job's rendezvous on this thread (NOTE [Rank-table
// rendezvous]); its exit status once every rank has finished.
// Never destroyed, so that a thread still serving at exit does not end the process.
std::thread* table_scheduler = nullptr;
std::atomic<int> table_scheduler_status{0};
std::atomic<bool> table_scheduler_done{false};
std::atomic<int64_t> table_scheduler_wait_ms{0};

// Rank 0 stopping (its job failed): the scheduler on its thread must first tell every other
// rank, or they would only see it vanish. It ends once all were told, bounded by a heartbeat
// timeout after the failure.
void wait_for_table_scheduler() {
  const auto end =
      std::chrono::steady_clock::now() + std::chrono::milliseconds(table_scheduler_wait_ms.load());
  while (!table_scheduler_done && std::chrono::steady_clock::now() < end) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

void require_initialized(const char* what) {
  CLEAVE_CHECK_ARG(state.initialized, "cleave::{}: call cleave::init() first", what);
}

bool is_world(const std::string& group) { return comm::is_world_group_name(group); }

const std::vector<int>& group_ranks(const std::string& group, const char* what) {
  auto it = state.groups.find(group);
  CLEAVE_CHECK_ARG(it != state.groups.end(),
                   "cleave::{}: group '{}' does not exist; create it with create_group(name, "
                   "ranks) (the world group is '{}')",
                   what, group, kWorldGroup);
  return it->second;
}

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

int mpi_var(const char* name, int lo) {
  std::string text = env_value(name).value_or("");
  try {
    size_t used = 0;
    int value = std::stoi(text, &used);
    if (used == text.size() && value >= lo) return value;
  } catch (const std::exception&) {
  }
  CLEAVE_FAIL("cleave::init: {}='{}' is invalid; expected an integer >= {} (set by mpirun)", name,
              text, lo);
}

void join_mpi(ClusterState& s) {
  s.mode = JoinMode::kMpi;
  s.world_size = mpi_var("OMPI_COMM_WORLD_SIZE", 1);
  s.rank = mpi_var("OMPI_COMM_WORLD_RANK", 0);
  CLEAVE_CHECK_ARG(s.rank < s.world_size,
                   "cleave::init: OMPI_COMM_WORLD_RANK={} must be below OMPI_COMM_WORLD_SIZE={}",
                   s.rank, s.world_size);
  s.local_rank =
      env_value("OMPI_COMM_WORLD_LOCAL_RANK") ? mpi_var("OMPI_COMM_WORLD_LOCAL_RANK", 0) : s.rank;
  s.local_size = env_value("OMPI_COMM_WORLD_LOCAL_SIZE") ? mpi_var("OMPI_COMM_WORLD_LOCAL_SIZE", 1)
                                                         : s.world_size;
}

void join_rank_table(ClusterState& s, const std::string& path) {
  s.mode = JoinMode::kRankTable;
  std::vector<cluster::RankTableEntry> table = cluster::read_rank_table(path);
  std::string rank_text = env_value("RANK_ID").value_or("");
  int rank = -1;
  try {
    size_t used = 0;
    rank = std::stoi(rank_text, &used);
    if (used != rank_text.size()) rank = -1;
  } catch (const std::exception&) {
  }
  CLEAVE_CHECK_ARG(
      rank >= 0 && rank < static_cast<int>(table.size()),
      "cleave::init: RANK_ID='{}' is invalid; expected a rank in 0..{} (RANK_TABLE_FILE "
      "'{}' lists {} ranks)",
      rank_text, table.size() - 1, path, table.size());
  s.rank = rank;
  s.world_size = static_cast<int>(table.size());
  s.local_rank = 0;
  s.local_size = 0;
  for (const cluster::RankTableEntry& entry : table) {
    if (entry.host != table[rank].host) continue;
    if (entry.rank < rank) ++s.local_rank;
    ++s.local_size;
  }
  if (std::optional<std::string> device = env_value("DEVICE_ID")) {
    CLEAVE_CHECK_ARG(*device == std::to_string(table[rank].device_id),
                     "cleave::init: DEVICE_ID={} differs from device_id {} of rank {} in "
                     "RANK_TABLE_FILE '{}'",
                     *device, table[rank].device_id, rank, path);
  }
  if (!env::is_set("CLEAVE_RANK_TABLE_PORT")) return;  // ranks only: no rendezvous
  // NOTE [Rank-table rendezvous]
  // A rank table names the hosts but no meeting point, so with CLEAVE_RANK_TABLE_PORT set, rank
  // 0 serves the job's scheduler (the same gRPC service as MS_ROLE=MS_SCHED) on a thread, at
  // its server_id and that port, and every rank (rank 0 too) joins it as a worker whose
  // MS_NODE_ID is its RANK_ID. The world group then meets through the scheduler's store as in
  // dynamic networking, each rank's Gloo transport listening on its own server_id, and the job
  // has heartbeats, barriers, and failure and stuck-rank detection. Rank 0's release() waits
  // until every rank has finished (it serves the job), and exits 1 if the job failed; when the
  // job fails, rank 0 stops only after its scheduler has told every other rank.
  cluster::JobConfig config = cluster::rank_table_job_config(table[0].host, s.world_size, rank);
  if (rank == 0) {
    cluster::JobConfig served = config;
    served.role = cluster::Role::kScheduler;
    auto listening = std::make_shared<std::promise<bool>>();
    std::future<bool> ready = listening->get_future();
    table_scheduler = new std::thread([served, listening] {
      table_scheduler_status =
          cluster::run_scheduler(served, [listening](bool ok) { listening->set_value(ok); });
      table_scheduler_done = true;
    });
    if (!ready.get()) {
      table_scheduler->join();
      delete std::exchange(table_scheduler, nullptr);
      CLEAVE_FAIL(
          "cleave::init: rank 0 cannot serve the rank table's rendezvous on {} (server_id of "
          "rank 0 in RANK_TABLE_FILE '{}', port CLEAVE_RANK_TABLE_PORT); is the port in use, or "
          "is that server_id not an address of this host?",
          config.address(), path);
    }
  }
  if (rank == 0) {
    table_scheduler_wait_ms =
        (config.heartbeat_timeout + 2 * config.heartbeat_interval).count() + 1000;
    cluster::set_before_stop(wait_for_table_scheduler);
  }
  s.comm_timeout = config.comm_timeout;
  s.client = std::make_shared<cluster::WorkerClient>(config);
  cluster::Topology topology = s.client->join();
  CLEAVE_ASSERT(topology.rank == rank, "rank-table rendezvous gave rank {} to RANK_ID {}",
                topology.rank, rank);
  s.store = cluster::make_scheduler_store(s.client);
  s.transport_host = table[rank].host;
}

// Rank 0 of a rank table: waits for the scheduler it serves to end (every rank finished, or the
// job failed and every rank was told); a failed job ends this process with status 1.
void join_table_scheduler() {
  if (table_scheduler == nullptr) return;
  table_scheduler->join();
  delete std::exchange(table_scheduler, nullptr);
  if (table_scheduler_status != 0) {
    cluster::stop_process(
        "cleave: rank 0 (pid " + std::to_string(getpid()) +
        ") stops: the job it served through the rank table's rendezvous failed (see the "
        "'cleave scheduler:' lines above)");
  }
}

// The address this worker's Gloo transport listens on (NOTE [Backend rendezvous]).
std::string transport_host(const std::string& sched_host) {
  if (std::optional<std::string> ip = env_value("MS_WORKER_IP")) return *ip;
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
  if (s.mode == JoinMode::kStandalone || (s.mode == JoinMode::kRankTable && !s.client)) return;
  CLEAVE_CHECK_ARG(s.mode != JoinMode::kMpi || s.backend == "mpi",
                   "cleave::init('{}'): under mpirun only the 'mpi' backend can meet without a "
                   "scheduler; call init() or init(\"mpi\"), or start the job with cleave-run",
                   s.backend);
  comm::ProcessGroupOptions options;
  options.backend = s.backend;
  options.store = s.store;
  options.rank = s.rank;
  options.size = s.world_size;
  options.name = kWorldGroup;
  options.timeout = s.comm_timeout;
  if (s.client) {
    options.host = !s.transport_host.empty() ? s.transport_host
                                             : transport_host(s.client->config().sched_host);
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
    std::lock_guard lock(state_mu);
    if (!state.initialized) return;
    if (state.client && exit_status == 0) state.client->finish();
    // NOTE [Failing workers report]: at once, rather than a heartbeat timeout later (does
    // nothing after report_failure).
    if (state.client && exit_status != 0) {
      state.client->report_failure(
          fmt::format("its process exited with status {} (its log has the cause)", exit_status));
      // End now, before the other workers (they wait a moment for it): the backend's teardown
      // and static destructors are of no use to a process that failed. (Rank 0 of a rank table
      // still serves the job: it waits below until every rank was told.)
      if (table_scheduler == nullptr) {
        std::fflush(nullptr);
        std::_Exit(exit_status);
      }
    }
    // The backend's threads go before the static objects they use.
    comm::clear_groups();
    state = ClusterState();
    join_table_scheduler();
  } catch (const std::exception& error) {
    std::fprintf(stderr, "cleave: release at exit failed: %s\n", error.what());
  }
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
    std::unique_lock lock(state_mu, std::try_to_lock);  // never wait: this process is dying
    if (lock.owns_lock()) client = state.client;
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
  std::lock_guard lock(state_mu);
  if (state.initialized) {
    CLEAVE_CHECK_ARG(backend.empty() || backend == state.backend,
                     "cleave::init: already initialized with backend '{}'; got '{}'", state.backend,
                     backend);
    return;
  }
  ClusterState s;
  if (env_value("MS_ROLE")) {
    cluster::JobConfig config = cluster::read_job_config();
    s.backend = choose_backend(backend, JoinMode::kDynamic);
    if (config.role == cluster::Role::kScheduler) {
      // NOTE [The scheduler ends its process]: seed 000's run.sh starts the same program as the
      // scheduler and reads its exit status; nothing after init() runs in this role.
      int status = cluster::run_scheduler(config);
      std::fflush(stdout);
      std::fflush(stderr);
      std::_Exit(status);
    }
    s.mode = JoinMode::kDynamic;
    s.comm_timeout = config.comm_timeout;
    s.client = std::make_shared<cluster::WorkerClient>(config);
    cluster::Topology topology = s.client->join();
    s.rank = topology.rank;
    s.world_size = topology.world_size;
    s.local_rank = topology.local_rank;
    s.local_size = topology.local_size;
    s.store = cluster::make_scheduler_store(s.client);
    static bool registered = (on_exit(release_at_exit, nullptr), true);
    (void)registered;
    install_terminate_handler();
  } else if (env_value("OMPI_COMM_WORLD_RANK") || env_value("OMPI_COMM_WORLD_SIZE")) {
    s.comm_timeout = cluster::read_comm_timeout();
    join_mpi(s);
    s.backend = choose_backend(backend, s.mode);
  } else if (std::optional<std::string> table = env_value("RANK_TABLE_FILE")
                                                    ? env_value("RANK_TABLE_FILE")
                                                    : env_value("MINDSPORE_HCCL_CONFIG_PATH")) {
    // MINDSPORE_HCCL_CONFIG_PATH: seed 001's (MindSpore 0.x's) name for the rank table.
    s.comm_timeout = cluster::read_comm_timeout();
    s.backend = choose_backend(backend, JoinMode::kRankTable);
    join_rank_table(s, *table);
    if (s.client) {
      static bool registered = (on_exit(release_at_exit, nullptr), true);
      (void)registered;
    }
  } else {
    s.mode = JoinMode::kStandalone;
    s.backend = choose_backend(backend, s.mode);
    s.store = comm::make_memory_store();  // the one rank shares it with itself
  }
  connect_backend(s);
  s.initialized = true;
  state = std::move(s);
}

void release() {
  std::shared_ptr<cluster::WorkerClient> client;
  {
    std::lock_guard lock(state_mu);
    require_initialized("release");
    client = std::move(state.client);
    state = ClusterState();
    comm::clear_groups();
  }
  if (client) client->finish();
  join_table_scheduler();
}

void report_failure(const std::string& error) {
  try {
    std::shared_ptr<cluster::WorkerClient> client;
    {
      std::lock_guard lock(state_mu);
      client = state.client;
    }
    if (client) client->report_failure(error);
  } catch (const std::exception&) {
    // Best effort: the process is failing anyway.
  }
}

bool is_initialized() {
  std::lock_guard lock(state_mu);
  return state.initialized;
}

JoinMode join_mode() {
  std::lock_guard lock(state_mu);
  require_initialized("join_mode");
  return state.mode;
}

const std::string& get_backend() {
  std::lock_guard lock(state_mu);
  require_initialized("get_backend");
  return state.backend;
}

int get_rank(const std::string& group) {
  std::lock_guard lock(state_mu);
  require_initialized("get_rank");
  if (is_world(group)) return state.rank;
  const std::vector<int>& ranks = group_ranks(group, "get_rank");
  auto it = std::find(ranks.begin(), ranks.end(), state.rank);
  CLEAVE_CHECK_ARG(it != ranks.end(),
                   "cleave::get_rank: this process (rank {}) is not a member of group '{}' "
                   "(world ranks [{}])",
                   state.rank, group, fmt::join(ranks, ", "));
  return static_cast<int>(it - ranks.begin());
}

int get_group_size(const std::string& group) {
  std::lock_guard lock(state_mu);
  require_initialized("get_group_size");
  if (is_world(group)) return state.world_size;
  return static_cast<int>(group_ranks(group, "get_group_size").size());
}

int get_local_rank() {
  std::lock_guard lock(state_mu);
  require_initialized("get_local_rank");
  return state.local_rank;
}

int get_local_size() {
  std::lock_guard lock(state_mu);
  require_initialized("get_local_size");
  return state.local_size;
}

void create_group(const std::string& name, const std::vector<int>& ranks) {
  std::lock_guard lock(state_mu);
  require_initialized("create_group");
  CLEAVE_CHECK_ARG(!name.empty(), "cleave::create_group: the group name must not be empty");
  CLEAVE_CHECK_ARG(!is_world(name) && state.groups.count(name) == 0,
                   "cleave::create_group: group '{}' already exists; destroy_group it first or "
                   "pick another name",
                   name);
  CLEAVE_CHECK_ARG(!ranks.empty(), "cleave::create_group: group '{}' has no ranks", name);
  std::set<int> seen;
  for (int rank : ranks) {
    CLEAVE_CHECK_ARG(rank >= 0 && rank < state.world_size,
                     "cleave::create_group: group '{}' lists rank {}; expected ranks in 0..{} "
                     "(world size {})",
                     name, rank, state.world_size - 1, state.world_size);
    CLEAVE_CHECK_ARG(seen.insert(rank).second,
                     "cleave::create_group: group '{}' lists rank {} twice", name, rank);
  }
  CLEAVE_CHECK_ARG(std::is_sorted(ranks.begin(), ranks.end()),
                   "cleave::create_group: group '{}' lists ranks [{}]; they must be ascending",
                   name, fmt::join(ranks, ", "));
  if (state.world && seen.count(state.rank) > 0) {
    cluster::ActivityScope activity(fmt::format("creating group '{}'", name));
    comm::register_group(name, comm::create_subgroup(*state.world, ranks, name));
  }
  state.groups[name] = ranks;
}

void destroy_group(const std::string& name) {
  std::lock_guard lock(state_mu);
  require_initialized("destroy_group");
  CLEAVE_CHECK_ARG(!is_world(name), "cleave::destroy_group: the world group cannot be destroyed");
  group_ranks(name, "destroy_group");
  state.groups.erase(name);
  comm::unregister_group(name);
}

int get_world_rank_from_group_rank(const std::string& group, int group_rank) {
  std::lock_guard lock(state_mu);
  require_initialized("get_world_rank_from_group_rank");
  int size = is_world(group)
                 ? state.world_size
                 : static_cast<int>(group_ranks(group, "get_world_rank_from_group_rank").size());
  CLEAVE_CHECK_ARG(group_rank >= 0 && group_rank < size,
                   "cleave::get_world_rank_from_group_rank: group rank {} is outside group '{}' "
                   "of size {}",
                   group_rank, group, size);
  return is_world(group) ? group_rank : state.groups.at(group)[group_rank];
}

int get_group_rank_from_world_rank(int world_rank, const std::string& group) {
  std::lock_guard lock(state_mu);
  require_initialized("get_group_rank_from_world_rank");
  CLEAVE_CHECK_ARG(world_rank >= 0 && world_rank < state.world_size,
                   "cleave::get_group_rank_from_world_rank: world rank {} is outside 0..{}",
                   world_rank, state.world_size - 1);
  if (is_world(group)) return world_rank;
  const std::vector<int>& ranks = group_ranks(group, "get_group_rank_from_world_rank");
  auto it = std::find(ranks.begin(), ranks.end(), world_rank);
  CLEAVE_CHECK_ARG(it != ranks.end(),
                   "cleave::get_group_rank_from_world_rank: world rank {} is not in group '{}' "
                   "(world ranks [{}])",
                   world_rank, group, fmt::join(ranks, ", "));
  return static_cast<int>(it - ranks.begin());
}

namespace cluster {

std::shared_ptr<comm::Store> job_store() {
  std::lock_guard lock(state_mu);
  require_initialized("cluster::job_store");
  return state.store;
}

void barrier(const std::string& name) {
  std::shared_ptr<WorkerClient> client;
  std::chrono::milliseconds timeout;
  {
    std::lock_guard lock(state_mu);
    require_initialized("cluster::barrier");
    CLEAVE_CHECK_ARG(state.mode == JoinMode::kDynamic || state.mode == JoinMode::kStandalone ||
                         (state.mode == JoinMode::kRankTable && state.client),
                     "cleave::cluster::barrier: needs dynamic networking (MS_ROLE), a rank table "
                     "with CLEAVE_RANK_TABLE_PORT, or a standalone process; use the backend's "
                     "barrier under mpirun");
    client = state.client;
    timeout = state.comm_timeout;
  }
  if (client) client->barrier(name, timeout);
}

}  // namespace cluster
}  // namespace cleave

#include "cluster/join.h"

#include <unistd.h>

#include <atomic>
#include <chrono>
#include <future>
#include <thread>
#include <utility>

#include "cleave/core/env.h"
#include "cleave/core/error.h"
#include "cluster/scheduler.h"

namespace cleave::cluster {
namespace {

// A whole decimal integer >= lo set by mpirun in variable `name`; throws otherwise.
int mpi_var(const EnvLookup& env, const char* name, int lo) {
  std::string text = env(name).value_or("");
  try {
    size_t used = 0;
    int value = std::stoi(text, &used);
    if (used == text.size() && value >= lo) return value;
  } catch (const std::exception&) {
  }
  CLEAVE_FAIL("cleave::init: {}='{}' is invalid; expected an integer >= {} (set by mpirun)", name,
              text, lo);
}

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

// Starts serving `served` (role kScheduler) on table_scheduler; throws when its port cannot be
// bound.
void serve_rank_table_rendezvous(const JobConfig& served, const std::string& path) {
  auto listening = std::make_shared<std::promise<bool>>();
  std::future<bool> ready = listening->get_future();
  table_scheduler = new std::thread([served, listening] {
    table_scheduler_status =
        run_scheduler(served, [listening](bool ok) { listening->set_value(ok); });
    table_scheduler_done = true;
  });
  if (!ready.get()) {
    table_scheduler->join();
    delete std::exchange(table_scheduler, nullptr);
    CLEAVE_FAIL(
        "cleave::init: rank 0 cannot serve the rank table's rendezvous on {} (server_id of "
        "rank 0 in RANK_TABLE_FILE '{}', port CLEAVE_RANK_TABLE_PORT); is the port in use, or "
        "is that server_id not an address of this host?",
        served.address(), path);
  }
  table_scheduler_wait_ms =
      (served.heartbeat_timeout + 2 * served.heartbeat_interval).count() + 1000;
  set_before_stop(wait_for_table_scheduler);
}

}  // namespace

JoinChoice choose_join_mode(const EnvLookup& env) {
  if (env("MS_ROLE")) return {JoinMode::kDynamic, ""};
  if (env("OMPI_COMM_WORLD_RANK") || env("OMPI_COMM_WORLD_SIZE")) return {JoinMode::kMpi, ""};
  if (std::optional<std::string> table = env("RANK_TABLE_FILE")) {
    return {JoinMode::kRankTable, *table};
  }
  if (std::optional<std::string> table = env("MINDSPORE_HCCL_CONFIG_PATH")) {
    return {JoinMode::kRankTable, *table};
  }
  return {JoinMode::kStandalone, ""};
}

Membership join_dynamic(const JobConfig& config) {
  Membership m;
  m.mode = JoinMode::kDynamic;
  m.client = std::make_shared<WorkerClient>(config);
  const Topology topology = m.client->join();
  m.rank = topology.rank;
  m.world_size = topology.world_size;
  m.local_rank = topology.local_rank;
  m.local_size = topology.local_size;
  m.store = make_scheduler_store(m.client);
  return m;
}

Membership join_mpi(const EnvLookup& env) {
  Membership m;
  m.mode = JoinMode::kMpi;
  m.world_size = mpi_var(env, "OMPI_COMM_WORLD_SIZE", 1);
  m.rank = mpi_var(env, "OMPI_COMM_WORLD_RANK", 0);
  CLEAVE_CHECK_ARG(m.rank < m.world_size,
                   "cleave::init: OMPI_COMM_WORLD_RANK={} must be below OMPI_COMM_WORLD_SIZE={}",
                   m.rank, m.world_size);
  m.local_rank =
      env("OMPI_COMM_WORLD_LOCAL_RANK") ? mpi_var(env, "OMPI_COMM_WORLD_LOCAL_RANK", 0) : m.rank;
  m.local_size = env("OMPI_COMM_WORLD_LOCAL_SIZE") ? mpi_var(env, "OMPI_COMM_WORLD_LOCAL_SIZE", 1)
                                                   : m.world_size;
  return m;
}

Membership rank_table_place(const std::vector<RankTableEntry>& table, const std::string& path,
                            const EnvLookup& env) {
  Membership m;
  m.mode = JoinMode::kRankTable;
  const std::string rank_text = env("RANK_ID").value_or("");
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
  m.rank = rank;
  m.world_size = static_cast<int>(table.size());
  m.local_rank = 0;
  m.local_size = 0;
  for (const RankTableEntry& entry : table) {
    if (entry.host != table[rank].host) continue;
    if (entry.rank < rank) ++m.local_rank;
    ++m.local_size;
  }
  if (std::optional<std::string> device = env("DEVICE_ID")) {
    CLEAVE_CHECK_ARG(*device == std::to_string(table[rank].device_id),
                     "cleave::init: DEVICE_ID={} differs from device_id {} of rank {} in "
                     "RANK_TABLE_FILE '{}'",
                     *device, table[rank].device_id, rank, path);
  }
  return m;
}

Membership join_rank_table(const std::string& path) {
  const std::vector<RankTableEntry> table = read_rank_table(path);
  Membership m = rank_table_place(table, path);
  if (!env::is_set("CLEAVE_RANK_TABLE_PORT")) return m;  // ranks only: no rendezvous
  // NOTE [Rank-table rendezvous]
  // A rank table names the hosts but no meeting point, so with CLEAVE_RANK_TABLE_PORT set, rank
  // 0 serves the job's scheduler (the same gRPC service as MS_ROLE=MS_SCHED) on a thread, at
  // its server_id and that port, and every rank (rank 0 too) joins it as a worker whose
  // MS_NODE_ID is its RANK_ID. The world group then meets through the scheduler's store as in
  // dynamic networking, each rank's Gloo transport listening on its own server_id, and the job
  // has heartbeats, barriers, and failure and stuck-rank detection. Rank 0's release() waits
  // until every rank has finished (it serves the job), and exits 1 if the job failed; when the
  // job fails, rank 0 stops only after its scheduler has told every other rank.
  const JobConfig config = rank_table_job_config(table[0].host, m.world_size, m.rank);
  if (m.rank == 0) {
    JobConfig served = config;
    served.role = Role::kScheduler;
    serve_rank_table_rendezvous(served, path);
  }
  m.client = std::make_shared<WorkerClient>(config);
  const Topology topology = m.client->join();
  CLEAVE_ASSERT(topology.rank == m.rank, "rank-table rendezvous gave rank {} to RANK_ID {}",
                topology.rank, m.rank);
  m.store = make_scheduler_store(m.client);
  m.transport_host = table[m.rank].host;
  return m;
}

bool serves_rank_table_rendezvous() { return table_scheduler != nullptr; }

void end_rank_table_rendezvous() {
  if (table_scheduler == nullptr) return;
  table_scheduler->join();
  delete std::exchange(table_scheduler, nullptr);
  if (table_scheduler_status != 0) {
    stop_process("cleave: rank 0 (pid " + std::to_string(getpid()) +
                 ") stops: the job it served through the rank table's rendezvous failed (see the "
                 "'cleave scheduler:' lines above)");
  }
}

Membership join_standalone() {
  Membership m;
  m.mode = JoinMode::kStandalone;
  m.store = comm::make_memory_store();  // the one rank shares it with itself
  return m;
}

}  // namespace cleave::cluster

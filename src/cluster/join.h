// How cleave::init() joins a job (include/cleave/cluster/cluster.h; docs/cluster.md
// "cleave::init"; DESIGN.md "Cluster formation"): choose_join_mode() is the one place that
// decides the mode from the environment, and one function per mode finds this process's place
// in the job -- its ranks, and the scheduler and store when the mode has them. init() (init.cc)
// then chooses the backend and makes the world group.
//
// The parts that only read variables (choose_join_mode, join_mpi, rank_table_place) take them
// through an EnvLookup, so tests give them variables without touching the process's
// environment; the others register with a scheduler and need a job of real processes.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "cleave/cluster/cluster.h"
#include "cleave/comm/store.h"
#include "cluster/config.h"
#include "cluster/rank_table.h"
#include "cluster/worker.h"

namespace cleave::cluster {

// This process's place in its job, as a join mode finds it.
struct Membership {
  JoinMode mode = JoinMode::kStandalone;
  int rank = 0;
  int world_size = 1;
  int local_rank = 0;  // among the ranks of this host
  int local_size = 1;
  // The scheduler's client: dynamic networking, and a rank table with a rendezvous.
  std::shared_ptr<WorkerClient> client;
  // The job's store: the scheduler's, or this process's own when standalone; null under mpirun
  // and a rank table without a rendezvous.
  std::shared_ptr<comm::Store> store;
  // Where this rank's Gloo transport listens; empty: decided from the scheduler's address
  // (NOTE [Backend rendezvous] in init.cc).
  std::string transport_host;
};

// One environment variable: nullopt when unset or empty (cluster::env_value).
using EnvLookup = std::function<std::optional<std::string>(const char*)>;

// How this process joins: the first mode, in cleave::init's order, whose variables are set.
struct JoinChoice {
  JoinMode mode = JoinMode::kStandalone;
  std::string rank_table;  // kRankTable: the table's path
};
//   MS_ROLE                                         -> kDynamic
//   OMPI_COMM_WORLD_RANK or OMPI_COMM_WORLD_SIZE    -> kMpi
//   RANK_TABLE_FILE, or seed 001's (MindSpore 0.x's) MINDSPORE_HCCL_CONFIG_PATH -> kRankTable
//   none of these                                   -> kStandalone
JoinChoice choose_join_mode(const EnvLookup& env = env_value);

// kDynamic, as a worker (config.role kWorker): registers with the scheduler, starts the
// heartbeats and blocks until the job has formed (bounded by MS_TOPO_TIMEOUT). Throws
// cleave::Error when the scheduler refuses this worker or the job does not form in time.
Membership join_dynamic(const JobConfig& config);

// kMpi: this rank's place from OpenMPI's OMPI_COMM_WORLD_SIZE and _RANK, and _LOCAL_RANK and
// _LOCAL_SIZE when set (else the world's). Throws cleave::Error naming a bad variable.
Membership join_mpi(const EnvLookup& env = env_value);

// kRankTable without a rendezvous: the place of rank RANK_ID in `table` (read from `path`, which
// the errors name); DEVICE_ID, when set, must be that rank's device_id. Throws cleave::Error
// naming a bad RANK_ID or DEVICE_ID.
Membership rank_table_place(const std::vector<RankTableEntry>& table, const std::string& path,
                            const EnvLookup& env = env_value);

// kRankTable: reads the table at `path`, takes this rank's place in it and, with
// CLEAVE_RANK_TABLE_PORT set, meets the other ranks at the scheduler rank 0 serves (NOTE
// [Rank-table rendezvous] in join.cc), blocking until every rank has joined. Throws cleave::Error
// for a bad table or variable, or when rank 0 cannot serve.
Membership join_rank_table(const std::string& path);

// Whether this process serves a rank table's rendezvous (it is rank 0 and the job goes on).
bool serves_rank_table_rendezvous();
// Rank 0 of a rank table's rendezvous: waits until the scheduler it serves has ended (every rank
// finished, or the job failed and every rank was told); a failed job ends this process with
// status 1. Does nothing in any other process.
void end_rank_table_rendezvous();

// kStandalone: rank 0 of 1, with a store of its own.
Membership join_standalone();

}  // namespace cleave::cluster

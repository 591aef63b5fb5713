// Joining a job: cleave::init() and the rank and group queries of MindSpore's
// mindspore.communication module.
//
// init() decides how this process joins (DESIGN.md "Cluster formation"; docs/cluster.md):
//   1. MS_ROLE set: dynamic networking. MS_ROLE=MS_SCHED makes this process the job's scheduler:
//      init() serves the job and then ENDS THE PROCESS, with status 0 when every worker finished
//      and 1 when the job failed (seed 000's run.sh starts the same program in both roles).
//      MS_ROLE=MS_WORKER registers with MS_SCHED_HOST:MS_SCHED_PORT, waits for MS_WORKER_NUM
//      workers and takes its rank (MS_NODE_ID when given).
//   2. OpenMPI's OMPI_COMM_WORLD_RANK / _SIZE / _LOCAL_RANK (mpirun): ranks from MPI.
//   3. RANK_TABLE_FILE + RANK_ID (+ DEVICE_ID): a static JSON rank table (seed 001's format).
//   4. none of these: standalone, world size 1.
// Every bad environment value is a cleave::Error naming the variable, the value and what is
// expected.
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "cleave/comm/group_registry.h"
#include "cleave/comm/store.h"

namespace cleave {

// The name of the group of all ranks. MindSpore's names for it ("hccl_world_group",
// "nccl_world_group") are accepted wherever a group name is.
inline constexpr const char* kWorldGroup = comm::kWorldGroup;

// How this process joined its job.
enum class JoinMode { kStandalone, kDynamic, kMpi, kRankTable };

// Joins the job (see above). `backend`: "" (the default for the device: "gloo" on CPU, "mpi"
// under mpirun), "gloo", "mpi" or "nccl"; "hccl" and anything else are refused with the list of
// backends. Calling it again with the same backend does nothing. Blocks until every worker has
// joined (bounded by MS_TOPO_TIMEOUT). Throws cleave::Error on a bad environment or a refusal.
void init(const std::string& backend = "");

// Leaves the job: tells the scheduler this worker finished and forgets every group. init() must
// have been called. Also run at normal process exit when the process did not call it.
void release();

bool is_initialized();

// Tells the job that this process failed with `error` (one line: what went wrong, as the user
// should read it): in dynamic networking and rank-table rendezvous the scheduler fails the job at
// once with "rank R (host H, pid P) failed: <error>", and every other process stops with that
// line within about a heartbeat interval (NOTE [Failing workers report] in
// src/cluster/scheduler.h). Call it where the program catches the error that ends it, then exit
// with a non-zero status; a process that exits non-zero without calling it is reported as
// "exited with status N". Does nothing standalone, under mpirun or before init(); never throws.
void report_failure(const std::string& error);
JoinMode join_mode();
// The backend init() chose ("gloo", "mpi", "nccl").
const std::string& get_backend();

// This process's rank in `group` (its index in the group's rank list). Throws if this process is
// not a member.
int get_rank(const std::string& group = kWorldGroup);
// The number of ranks in `group`.
int get_group_size(const std::string& group = kWorldGroup);
// This process's index among the ranks of its host, and their number.
int get_local_rank();
int get_local_size();

// Creates group `name` of the world ranks `ranks` (group rank i is world rank ranks[i]). Every
// member calls it with the same arguments. Throws for a taken or empty name, an empty rank list,
// a repeated rank or a rank outside 0..world size-1.
void create_group(const std::string& name, const std::vector<int>& ranks);
void destroy_group(const std::string& name);
// The world rank of `group_rank` in `group`, and back.
int get_world_rank_from_group_rank(const std::string& group, int group_rank);
int get_group_rank_from_world_rank(int world_rank, const std::string& group);

namespace cluster {

// The job's shared key-value store (the scheduler's, in dynamic networking; a process-local one
// when standalone). Null under mpirun and rank tables, which have no scheduler.
std::shared_ptr<comm::Store> job_store();

// Blocks until every rank has called barrier(name); bounded by CLEAVE_COMM_TIMEOUT_MS. Returns
// at once when standalone. Requires dynamic networking or standalone.
void barrier(const std::string& name);

}  // namespace cluster
}  // namespace cleave

// The environment of a dynamic-networking job (seed 000's MS_* variables plus cleave's own), read
// and checked in one place. Every bad value is a cleave::Error naming the variable, the value and
// what is expected; docs/cluster.md lists every variable with its default.
#pragma once

#include <chrono>
#include <optional>
#include <string>

namespace cleave::cluster {

enum class Role { kScheduler, kWorker };

struct JobConfig {
  Role role = Role::kWorker;
  std::string sched_host;                               // MS_SCHED_HOST
  int sched_port = 0;                                   // MS_SCHED_PORT
  int worker_num = 0;                                   // MS_WORKER_NUM
  std::optional<int> node_id;                           // MS_NODE_ID: fixes this worker's rank
  std::string token;                                    // CLEAVE_JOB_TOKEN (empty when unset)
  std::chrono::milliseconds topo_timeout{600'000};      // MS_TOPO_TIMEOUT (seconds)
  std::chrono::milliseconds heartbeat_interval{1'000};  // CLEAVE_HEARTBEAT_INTERVAL_MS
  std::chrono::milliseconds heartbeat_timeout{10'000};  // CLEAVE_HEARTBEAT_TIMEOUT_MS
  std::chrono::milliseconds comm_timeout{300'000};      // CLEAVE_COMM_TIMEOUT_MS
  std::chrono::milliseconds stuck_timeout{30'000};      // CLEAVE_STUCK_TIMEOUT_MS (0: off)
  // This process's program (its executable's path) and arguments, one string; empty when not
  // known. Without a token it defines the job (NOTE [What defines a job] in scheduler.h).
  std::string command;

  // How often the scheduler and a waiting worker report registration progress: every 10 s, or
  // a quarter of MS_TOPO_TIMEOUT when that is shorter (at least 0.5 s).
  std::chrono::milliseconds progress_interval() const;

  std::string address() const { return sched_host + ":" + std::to_string(sched_port); }
};

// The value of environment variable `name`, or nullopt when unset or empty.
std::optional<std::string> env_value(const char* name);

// Reads the job's variables; requires MS_ROLE to be set. Throws cleave::Error on a bad value.
JobConfig read_job_config();

// The configuration of a rank-table job's rendezvous (NOTE [Rank-table rendezvous] in
// src/cluster/join.cc): rank 0 serves the job on `sched_host` (its server_id) at
// CLEAVE_RANK_TABLE_PORT, and rank `rank` joins it as a worker with that rank.
JobConfig rank_table_job_config(const std::string& sched_host, int worker_num, int rank);

// CLEAVE_COMM_TIMEOUT_MS (every join mode reads it), default 300000 ms.
std::chrono::milliseconds read_comm_timeout();

}  // namespace cleave::cluster

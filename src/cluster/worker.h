// A worker's side of the control plane: registration, heartbeats, the scheduler's key-value store
// and barriers (see NOTE [Job lifecycle] in cluster/scheduler.h).
//
// NOTE [Stopping on a failed job]
// A worker must never hang when the job fails. Its heartbeat thread asks the scheduler every
// CLEAVE_HEARTBEAT_INTERVAL_MS whether the job is healthy. When the reply says the job failed (a
// lost rank), or when the scheduler has not answered for CLEAVE_HEARTBEAT_TIMEOUT_MS, the thread
// prints ONE line -- who was lost, and what this process was doing (its current Activity) -- and
// ends the process with status 1 at once, even when the main thread is blocked in a collective.
// A blocked store or barrier call that learns of the failure does the same.
#pragma once

#include <atomic>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "cleave/cluster/activity.h"
#include "cleave/comm/store.h"
#include "cluster/config.h"

namespace cleave::cluster {

// Prints `line` to stderr and ends the process with status 1 (no destructors run: other threads
// may be blocked inside a communication library).
[[noreturn]] void stop_process(const std::string& line);

// Called by stop_process after its line and before the process ends: rank 0 of a rank table
// waits there until the scheduler it serves has told every rank (src/cluster/join.cc).
void set_before_stop(void (*fn)());

// What this process is doing, for a failure line: the innermost ActivityScope, and the
// communication operation it waits in, if any ("in AllReduce on group 'world', waiting 2104 ms in
// AllReduce on group 'world' (gloo) for world rank 2").
std::string doing_now();

struct Topology {
  int rank = 0;
  int world_size = 1;
  int local_rank = 0;
  int local_size = 1;
  std::vector<std::string> hosts;  // host of each rank
};

class WorkerClient {
 public:
  explicit WorkerClient(JobConfig config);
  // Stops the heartbeats (without telling the scheduler the worker finished).
  ~WorkerClient();

  // Registers with the scheduler (waiting up to MS_TOPO_TIMEOUT for it to come up), starts the
  // heartbeats and blocks until every worker has registered. Throws cleave::Error when the
  // scheduler refuses this worker or the topology does not form in time.
  Topology join();

  // The scheduler's key-value store (comm::Store semantics). Throw cleave::Error on timeout.
  void set(const std::string& key, const std::vector<uint8_t>& value);
  std::vector<uint8_t> get(const std::string& key, std::chrono::milliseconds timeout);
  int64_t add(const std::string& key, int64_t delta);
  bool check(const std::vector<std::string>& keys);

  // Blocks until every worker has called barrier(name) (NOTE [Barrier generations]).
  void barrier(const std::string& name, std::chrono::milliseconds timeout);

  // Tells the scheduler this worker failed with `error` (NOTE [Failing workers report] in
  // cluster/scheduler.h) and stops the heartbeats; best effort, bounded by 2 s. Does nothing
  // before join() or after finish() or an earlier report.
  void report_failure(const std::string& error);

  // Tells the scheduler this worker finished, waits until every worker has (or the job failed:
  // then the process stops with status 1), and stops the heartbeats.
  void finish();

  const JobConfig& config() const { return config_; }

 private:
  struct Rpc;
  void heartbeat_loop();
  void stop_heartbeats();

  JobConfig config_;
  std::unique_ptr<Rpc> rpc_;
  int64_t worker_id_ = -1;
  int rank_ = -1;
  std::mutex mu_;
  std::condition_variable cv_;
  bool stopping_ = false;
  std::thread heartbeat_thread_;
};

// comm::Store over a worker's connection to the scheduler.
std::shared_ptr<comm::Store> make_scheduler_store(std::shared_ptr<WorkerClient> client);

}  // namespace cleave::cluster

// A job of real processes on 127.0.0.1 for the cluster tests: the scheduler and workers all run
// cluster_test_program, started as seed 000's run.sh does (same program, MS_ROLE per process),
// with short timeouts (heartbeat every 200 ms, a worker lost after 3 s).
#pragma once

#include "cluster/processes.h"

namespace cleave::testing {

using std::chrono::milliseconds;
using std::chrono::seconds;

constexpr const char* kProgram = CLEAVE_CLUSTER_TEST_PROGRAM;

// One job: its variables and its processes.
class Job {
 public:
  Job(const std::string& name, int worker_num) : processes_(name) {
    env_ = {{"MS_SCHED_HOST", "127.0.0.1"},
            {"MS_SCHED_PORT", std::to_string(free_port())},
            {"MS_WORKER_NUM", std::to_string(worker_num)},
            {"CLEAVE_JOB_TOKEN", "token-" + name},
            {"MS_TOPO_TIMEOUT", "10"},
            {"CLEAVE_HEARTBEAT_INTERVAL_MS", "200"},
            {"CLEAVE_HEARTBEAT_TIMEOUT_MS", "3000"}};
  }

  pid_t scheduler(const std::vector<std::string>& args = {"roundtrip"}) {
    return start("MS_SCHED", args, {}, "scheduler.log");
  }
  // A worker logging to worker_<log_id>.log; `extra` overrides variables (MS_NODE_ID, a token).
  pid_t worker(const std::string& log_id, const std::vector<std::string>& args,
               const std::map<std::string, std::string>& extra = {}) {
    return start("MS_WORKER", args, extra, "worker_" + log_id + ".log");
  }

  std::optional<int> wait(pid_t pid, milliseconds timeout = seconds(15)) {
    return processes_.wait(pid, timeout);
  }
  // Starts any program (cleave-run) with the job's variables minus MS_ROLE, plus `extra`.
  pid_t start_program(const std::vector<std::string>& argv,
                      const std::map<std::string, std::string>& extra, const std::string& log) {
    std::map<std::string, std::string> env = env_;
    for (const auto& [key, value] : extra) env[key] = value;
    return processes_.start(argv, env, log);
  }
  std::string path(const std::string& name) const { return processes_.path(name); }
  const std::map<std::string, std::string>& env() const { return env_; }
  std::string log(const std::string& name) { return read_text(processes_.path(name)); }
  bool wait_for_log(const std::string& name, const std::string& text,
                    milliseconds timeout = seconds(10)) {
    return wait_for_text(processes_.path(name), text, timeout);
  }

 private:
  pid_t start(const std::string& role, const std::vector<std::string>& args,
              const std::map<std::string, std::string>& extra, const std::string& log) {
    std::map<std::string, std::string> env = env_;
    env["MS_ROLE"] = role;
    for (const auto& [key, value] : extra) env[key] = value;
    std::vector<std::string> argv = {kProgram};
    argv.insert(argv.end(), args.begin(), args.end());
    return processes_.start(argv, env, log);
  }

  Processes processes_;
  std::map<std::string, std::string> env_;
};

}  // namespace cleave::testing

// cleave-run: starts one host's part of a job -- the scheduler (on the host with --node_rank 0)
// and --local_worker_num workers -- all running the same PROGRAM with the MS_* variables of
// seed 000, and watches them:
//   * every process's output goes to DIR/scheduler.log or DIR/worker_<rank>.log, and with --join
//     also to this terminal, each line prefixed with "[rank R]" or "[scheduler]";
//   * SIGINT and SIGTERM are forwarded to every process;
//   * the first process that fails (non-zero status or a signal) stops the others (SIGTERM, then
//     SIGKILL after a grace period); cleave-run prints its last log lines and exits with its
//     status.
// See docs/cluster.md.
#include <fcntl.h>
#include <fmt/format.h>
#include <poll.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <deque>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "cleave/core/env.h"
#include "cleave/core/threads.h"
#include "cleave/flags.h"

namespace {

using Clock = std::chrono::steady_clock;
constexpr size_t kTailLines = 20;
constexpr auto kStopGrace = std::chrono::seconds(5);

volatile sig_atomic_t pending_signal = 0;

void on_signal(int signal) { pending_signal = signal; }

struct Child {
  std::string name;  // "scheduler" or "rank R"
  std::string log_path;
  pid_t pid = -1;
  int out_fd = -1;  // read end of the child's stdout+stderr, -1 once closed
  std::ofstream log;
  std::string partial;  // output after the last newline
  std::deque<std::string> tail;
  std::optional<int> status;  // exit status, 128+signal when killed
};

std::string random_token() {
  std::random_device device;
  return fmt::format("{:08x}{:08x}{:08x}{:08x}", device(), device(), device(), device());
}

// Starts `argv` with `env` added to this process's environment; its stdout and stderr go into
// a pipe whose read end the Child keeps.
void spawn(Child& child, const std::vector<std::string>& argv,
           const std::map<std::string, std::string>& env) {
  int fds[2];
  if (pipe(fds) != 0) throw std::runtime_error(std::string("pipe: ") + std::strerror(errno));
  pid_t pid = fork();
  if (pid < 0) throw std::runtime_error(std::string("fork: ") + std::strerror(errno));
  if (pid == 0) {
    dup2(fds[1], STDOUT_FILENO);
    dup2(fds[1], STDERR_FILENO);
    close(fds[0]);
    close(fds[1]);
    signal(SIGINT, SIG_DFL);
    signal(SIGTERM, SIG_DFL);
    for (const auto& [key, value] : env) setenv(key.c_str(), value.c_str(), 1);
    std::vector<char*> args;
    for (const std::string& arg : argv) args.push_back(const_cast<char*>(arg.c_str()));
    args.push_back(nullptr);
    execvp(args[0], args.data());
    std::fprintf(stderr, "cleave-run: cannot start '%s': %s\n", args[0], std::strerror(errno));
    _exit(127);
  }
  close(fds[1]);
  fcntl(fds[0], F_SETFL, O_NONBLOCK);
  child.pid = pid;
  child.out_fd = fds[0];
}

void emit_line(Child& child, const std::string& line, bool join) {
  child.log << line << '\n';
  child.log.flush();
  child.tail.push_back(line);
  if (child.tail.size() > kTailLines) child.tail.pop_front();
  if (join) std::printf("[%s] %s\n", child.name.c_str(), line.c_str());
}

// Reads what the child wrote; closes its pipe at end of file.
void drain(Child& child, bool join) {
  char buffer[4096];
  for (;;) {
    ssize_t n = read(child.out_fd, buffer, sizeof(buffer));
    if (n > 0) {
      child.partial.append(buffer, static_cast<size_t>(n));
      size_t newline;
      while ((newline = child.partial.find('\n')) != std::string::npos) {
        emit_line(child, child.partial.substr(0, newline), join);
        child.partial.erase(0, newline + 1);
      }
      continue;
    }
    if (n < 0 && (errno == EAGAIN || errno == EINTR)) break;
    if (!child.partial.empty()) emit_line(child, child.partial, join);
    child.partial.clear();
    close(child.out_fd);
    child.out_fd = -1;
    break;
  }
  if (join) std::fflush(stdout);
}

void signal_all(std::vector<Child>& children, int signal) {
  for (Child& child : children) {
    if (!child.status) kill(child.pid, signal);
  }
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{
      "cleave-run: starts a cleave job's scheduler and workers on this host (docs/cluster.md)"};
  cleave::flags::setup(app, {{"CLEAVE_JOB_TOKEN",
                              "the job's secret; required on every host of a job over several "
                              "hosts (one host: generated)"}});
  int worker_num = 0;
  int local_worker_num = -1;
  std::string master_addr = "127.0.0.1";
  int master_port = 8118;
  int node_rank = 0;
  std::string log_dir = ".";
  bool join = false;
  int cluster_time_out = 0;
  std::vector<std::string> command;
  app.add_option("--worker_num", worker_num, "workers of the whole job (MS_WORKER_NUM)")
      ->required()
      ->check(cleave::flags::positive());
  app.add_option("--local_worker_num", local_worker_num,
                 "workers started on this host (default: --worker_num)")
      ->check(cleave::flags::positive())
      ->default_str("");
  app.add_option("--master_addr", master_addr, "the scheduler's address (MS_SCHED_HOST)");
  app.add_option("--master_port", master_port, "the scheduler's port (MS_SCHED_PORT)")
      ->check(cleave::flags::integer_in(1, 65535));
  app.add_option("--node_rank", node_rank,
                 "this host's index; host 0 runs the scheduler, and its workers take ranks "
                 "node_rank*local_worker_num ...")
      ->check(cleave::flags::non_negative());
  app.add_option("--log_dir", log_dir, "folder of scheduler.log and worker_<rank>.log");
  app.add_flag("--join", join, "also show every process's output here, prefixed by its rank");
  app.add_option("--cluster_time_out", cluster_time_out,
                 "seconds to wait for every worker to join (MS_TOPO_TIMEOUT; default: 600)")
      ->check(cleave::flags::positive())
      ->default_str("");
  app.add_option("command", command, "PROGRAM [ARGS...] (after --)")->required();
  if (auto status = cleave::flags::parse(app, argc, argv)) return *status;

  if (local_worker_num < 0) local_worker_num = worker_num;
  auto usage_error = [](const std::string& message) {
    std::fprintf(stderr, "cleave-run: %s\n", message.c_str());
    return 2;
  };
  if (local_worker_num > worker_num) {
    return usage_error(
        fmt::format("--local_worker_num {} exceeds --worker_num {}", local_worker_num, worker_num));
  }
  if ((node_rank + 1) * local_worker_num > worker_num) {
    return usage_error(fmt::format(
        "--node_rank {} with --local_worker_num {} would start ranks up to {}, beyond "
        "--worker_num {}",
        node_rank, local_worker_num, (node_rank + 1) * local_worker_num - 1, worker_num));
  }
  std::string token = cleave::env::text("CLEAVE_JOB_TOKEN");
  if (token.empty()) {
    if (local_worker_num != worker_num) {
      return usage_error(
          "a job over several hosts needs the same CLEAVE_JOB_TOKEN on every host: export "
          "CLEAVE_JOB_TOKEN=<any secret string> before cleave-run on each host");
    }
    token = random_token();
  }
  std::error_code error;
  std::filesystem::create_directories(log_dir, error);
  if (error) {
    return usage_error(fmt::format("cannot create --log_dir '{}': {}", log_dir, error.message()));
  }

  std::map<std::string, std::string> common = {
      {"MS_SCHED_HOST", master_addr},
      {"MS_SCHED_PORT", std::to_string(master_port)},
      {"MS_WORKER_NUM", std::to_string(worker_num)},
      {"RANK_SIZE", std::to_string(worker_num)},
      {"CLEAVE_JOB_TOKEN", token},
  };
  if (cluster_time_out > 0) common["MS_TOPO_TIMEOUT"] = std::to_string(cluster_time_out);
  // NOTE [Threads per worker] in cleave/core/threads.h: every process of this host, from its
  // start (OpenMP reads the variable once, when the process starts).
  if (!cleave::threads::user_thread_setting() && local_worker_num > 1) {
    const int cores = cleave::threads::available_cores();
    const int share = cleave::threads::thread_share(cores, local_worker_num);
    common["OMP_NUM_THREADS"] = std::to_string(share);
    std::fprintf(stderr,
                 "cleave-run: %d workers share this host's %d core%s: OMP_NUM_THREADS=%d for each "
                 "(set OMP_NUM_THREADS to choose another number)\n",
                 local_worker_num, cores, cores == 1 ? "" : "s", share);
  }

  struct sigaction action = {};
  action.sa_handler = on_signal;
  sigaction(SIGINT, &action, nullptr);
  sigaction(SIGTERM, &action, nullptr);
  signal(SIGPIPE, SIG_IGN);

  std::vector<Child> children;
  children.reserve(static_cast<size_t>(local_worker_num) + 1);
  try {
    if (node_rank == 0) {
      Child& scheduler = children.emplace_back();
      scheduler.name = "scheduler";
      scheduler.log_path = log_dir + "/scheduler.log";
      scheduler.log.open(scheduler.log_path);
      std::map<std::string, std::string> env = common;
      env["MS_ROLE"] = "MS_SCHED";
      spawn(scheduler, command, env);
    }
    for (int i = 0; i < local_worker_num; ++i) {
      int rank = node_rank * local_worker_num + i;
      Child& worker = children.emplace_back();
      worker.name = fmt::format("rank {}", rank);
      worker.log_path = fmt::format("{}/worker_{}.log", log_dir, rank);
      worker.log.open(worker.log_path);
      std::map<std::string, std::string> env = common;
      env["MS_ROLE"] = "MS_WORKER";
      env["MS_NODE_ID"] = std::to_string(rank);
      env["RANK_ID"] = std::to_string(rank);
      spawn(worker, command, env);
    }
  } catch (const std::exception& failure) {
    std::fprintf(stderr, "cleave-run: %s\n", failure.what());
    signal_all(children, SIGKILL);
    return 1;
  }

  Child* failed = nullptr;
  int forwarded_signal = 0;
  bool kill_pending = false;  // SIGKILL the rest at kill_at
  Clock::time_point kill_at;
  for (;;) {
    if (pending_signal != 0) {
      forwarded_signal = pending_signal;
      pending_signal = 0;
      signal_all(children, forwarded_signal);
      if (!kill_pending) kill_at = Clock::now() + kStopGrace;
      kill_pending = true;
    }
    std::vector<pollfd> fds;
    std::vector<Child*> owners;
    for (Child& child : children) {
      if (child.out_fd < 0) continue;
      fds.push_back({child.out_fd, POLLIN, 0});
      owners.push_back(&child);
    }
    if (!fds.empty()) {
      poll(fds.data(), fds.size(), 100);
      for (size_t i = 0; i < fds.size(); ++i) {
        if (fds[i].revents != 0) drain(*owners[i], join);
      }
    }
    int wait_status = 0;
    pid_t pid;
    while ((pid = waitpid(-1, &wait_status, WNOHANG)) > 0) {
      for (Child& child : children) {
        if (child.pid != pid) continue;
        child.status =
            WIFEXITED(wait_status) ? WEXITSTATUS(wait_status) : 128 + WTERMSIG(wait_status);
        if (*child.status != 0 && failed == nullptr && forwarded_signal == 0) {
          failed = &child;
          std::fprintf(stderr,
                       "cleave-run: %s (pid %d) failed with status %d; stopping the other "
                       "processes\n",
                       child.name.c_str(), child.pid, *child.status);
          signal_all(children, SIGTERM);
          kill_at = Clock::now() + kStopGrace;
          kill_pending = true;
        }
      }
    }
    bool all_exited = true;
    bool all_closed = true;
    for (const Child& child : children) {
      all_exited = all_exited && child.status.has_value();
      all_closed = all_closed && child.out_fd < 0;
    }
    if (all_exited && all_closed) break;
    if (all_exited && fds.empty()) break;
    if (kill_pending && Clock::now() > kill_at) {
      signal_all(children, SIGKILL);
      kill_pending = false;
    }
    if (fds.empty()) usleep(50'000);
  }

  if (failed != nullptr) {
    std::fprintf(stderr, "cleave-run: last lines of %s (%s):\n", failed->name.c_str(),
                 failed->log_path.c_str());
    for (const std::string& line : failed->tail) std::fprintf(stderr, "  %s\n", line.c_str());
    // The cause last, where the eye lands: the scheduler's verdict when it has one (it names
    // the rank that failed first, whatever order the processes ended in), else the failed
    // process's last non-empty line.
    auto last_line = [](const Child& child) {
      for (auto line = child.tail.rbegin(); line != child.tail.rend(); ++line) {
        if (line->find_first_not_of(" \t\r") != std::string::npos) return *line;
      }
      return std::string("(its log is empty)");
    };
    const std::string verdict_prefix = "cleave scheduler: job failed: ";
    std::string verdict;
    for (const Child& child : children) {
      if (child.name != "scheduler") continue;
      for (const std::string& line : child.tail) {
        if (line.rfind(verdict_prefix, 0) == 0) verdict = line.substr(verdict_prefix.size());
      }
    }
    Child* culprit = failed;
    if (!verdict.empty()) {
      for (Child& child : children) {  // "rank R (host ..."
        if (verdict.rfind(child.name + " (", 0) == 0) culprit = &child;
      }
      std::fprintf(stderr, "cleave-run: the job failed: %s\n", verdict.c_str());
      std::fprintf(stderr, "cleave-run: %s's last line: %s\n", culprit->name.c_str(),
                   last_line(*culprit).c_str());
    } else {
      std::fprintf(stderr, "cleave-run: %s failed first (status %d): %s\n", failed->name.c_str(),
                   *failed->status, last_line(*failed).c_str());
    }
    std::fprintf(stderr, "cleave-run: its log: %s\n", culprit->log_path.c_str());
    if (culprit->status && *culprit->status != 0) return *culprit->status;
    return *failed->status;
  }
  if (forwarded_signal != 0) return 128 + forwarded_signal;
  std::fprintf(stderr, "cleave-run: every process succeeded; logs in %s (%sworker_<rank>.log)\n",
               std::filesystem::absolute(log_dir).lexically_normal().c_str(),
               node_rank == 0 ? "scheduler.log, " : "");
  return 0;
}

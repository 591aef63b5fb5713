#include "cluster/config.h"

#include <netdb.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <limits>

#include "cleave/core/env.h"
#include "cleave/core/error.h"

namespace cleave::cluster {

std::optional<std::string> env_value(const char* name) {
  const char* value = std::getenv(name);
  if (value == nullptr || *value == '\0') return std::nullopt;
  return std::string(value);
}

namespace {

// Parses a whole decimal integer in [lo, hi]; nullopt on anything else.
std::optional<long long> parse_int(const std::string& text, long long lo, long long hi) {
  if (text.empty()) return std::nullopt;
  size_t used = 0;
  long long value = 0;
  try {
    value = std::stoll(text, &used, 10);
  } catch (const std::exception&) {
    return std::nullopt;
  }
  if (used != text.size() || value < lo || value > hi) return std::nullopt;
  return value;
}

long long int_var(const char* name, long long fallback, long long lo, long long hi,
                  const char* expected) {
  std::optional<std::string> text = env_value(name);
  if (!text) return fallback;
  std::optional<long long> value = parse_int(*text, lo, hi);
  CLEAVE_CHECK_ARG(value.has_value(), "cleave::init: {}='{}' is invalid; expected {}", name, *text,
                   expected);
  return *value;
}

// A CLEAVE_* duration of the table (NOTE [Environment variables] in cleave/core/env.h).
std::chrono::milliseconds ms_var(const char* name, int64_t min = 1) {
  return std::chrono::milliseconds(env::integer(name, min, std::numeric_limits<int>::max()));
}

// The variables of every job kind: token and timeouts.
void read_common(JobConfig& config) {
  config.token = env::text("CLEAVE_JOB_TOKEN");
  config.topo_timeout = std::chrono::seconds(
      int_var("MS_TOPO_TIMEOUT", 600, 1, 1'000'000, "a positive integer number of seconds"));
  config.heartbeat_interval = ms_var("CLEAVE_HEARTBEAT_INTERVAL_MS");
  config.heartbeat_timeout = ms_var("CLEAVE_HEARTBEAT_TIMEOUT_MS");
  config.comm_timeout = read_comm_timeout();
  config.stuck_timeout = ms_var("CLEAVE_STUCK_TIMEOUT_MS", 0);
  CLEAVE_CHECK_ARG(config.heartbeat_timeout > config.heartbeat_interval,
                   "cleave::init: CLEAVE_HEARTBEAT_TIMEOUT_MS={} must be larger than "
                   "CLEAVE_HEARTBEAT_INTERVAL_MS={}",
                   config.heartbeat_timeout.count(), config.heartbeat_interval.count());
}
// This process's executable and arguments (NOTE [What defines a job] in scheduler.h): the
// executable's real path, so that `./train` and `/abs/path/train` are one program, then every
// argument after argv[0], quoted when it holds a space.
std::string this_command() {
  char exe[4096] = {};
  const ssize_t n = ::readlink("/proc/self/exe", exe, sizeof(exe) - 1);
  std::ifstream in("/proc/self/cmdline", std::ios::binary);
  const std::string cmdline{std::istreambuf_iterator<char>(in), {}};
  if (n <= 0 || cmdline.empty()) return "";
  std::string out(exe, static_cast<size_t>(n));
  size_t begin = cmdline.find('\0');  // skip argv[0]
  while (begin != std::string::npos && begin + 1 < cmdline.size()) {
    const size_t end = cmdline.find('\0', begin + 1);
    const std::string arg =
        cmdline.substr(begin + 1, end == std::string::npos ? std::string::npos : end - begin - 1);
    out += arg.find_first_of(" \t'") == std::string::npos || arg.empty() ? " " + arg
                                                                         : " '" + arg + "'";
    begin = end;
  }
  return out;
}

// MS_SCHED_HOST must resolve: a name that can never resolve fails the process at once instead
// of a worker retrying until MS_TOPO_TIMEOUT. A temporary failure of the resolver only warns
// (gRPC resolves again on every connection attempt).
void check_resolves(const std::string& host) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  const int rc = ::getaddrinfo(host.c_str(), nullptr, &hints, &found);
  if (found != nullptr) ::freeaddrinfo(found);
  if (rc == 0) return;
  if (rc == EAI_AGAIN) {
    std::fprintf(stderr,
                 "cleave: MS_SCHED_HOST='%s' could not be resolved yet (%s); connecting anyway, "
                 "it is resolved again on every attempt\n",
                 host.c_str(), gai_strerror(rc));
    return;
  }
  CLEAVE_FAIL(
      "cleave::init: MS_SCHED_HOST='{}' does not resolve to an address ({}); expected the "
      "scheduler's host name or IP address as this host resolves it (e.g. 127.0.0.1 when every "
      "process runs here)",
      host, gai_strerror(rc));
}

}  // namespace

std::chrono::milliseconds JobConfig::progress_interval() const {
  return std::clamp(topo_timeout / 4, std::chrono::milliseconds(500),
                    std::chrono::milliseconds(10'000));
}

std::chrono::milliseconds read_comm_timeout() { return ms_var("CLEAVE_COMM_TIMEOUT_MS"); }

JobConfig read_job_config() {
  JobConfig config;
  std::string role = env_value("MS_ROLE").value_or("");
  if (role == "MS_SCHED") {
    config.role = Role::kScheduler;
  } else if (role == "MS_WORKER") {
    config.role = Role::kWorker;
  } else {
    CLEAVE_FAIL(
        "cleave::init: MS_ROLE='{}' is invalid; expected MS_SCHED (the scheduler) or MS_WORKER "
        "(a worker); unset it to run standalone",
        role);
  }
  std::optional<std::string> host = env_value("MS_SCHED_HOST");
  CLEAVE_CHECK_ARG(host.has_value(),
                   "cleave::init: MS_ROLE={} needs MS_SCHED_HOST (the scheduler's address, e.g. "
                   "127.0.0.1), which is not set",
                   role);
  config.sched_host = *host;
  check_resolves(config.sched_host);
  CLEAVE_CHECK_ARG(env_value("MS_SCHED_PORT").has_value(),
                   "cleave::init: MS_ROLE={} needs MS_SCHED_PORT (the scheduler's port, e.g. "
                   "8118), which is not set",
                   role);
  config.sched_port =
      static_cast<int>(int_var("MS_SCHED_PORT", 0, 1, 65535, "a port number in 1..65535"));
  CLEAVE_CHECK_ARG(env_value("MS_WORKER_NUM").has_value(),
                   "cleave::init: MS_ROLE={} needs MS_WORKER_NUM (the number of workers of the "
                   "job), which is not set",
                   role);
  config.worker_num = static_cast<int>(
      int_var("MS_WORKER_NUM", 0, 1, 1 << 20, "a positive integer (the number of workers)"));
  if (config.role == Role::kWorker && env_value("MS_NODE_ID")) {
    config.node_id =
        static_cast<int>(int_var("MS_NODE_ID", 0, 0, config.worker_num - 1,
                                 fmt::format("an integer rank in 0..{} (MS_WORKER_NUM={})",
                                             config.worker_num - 1, config.worker_num)
                                     .c_str()));
  }
  read_common(config);
  config.command = this_command();
  return config;
}

JobConfig rank_table_job_config(const std::string& sched_host, int worker_num, int rank) {
  JobConfig config;
  config.role = Role::kWorker;
  config.sched_host = sched_host;
  config.sched_port = static_cast<int>(env::integer("CLEAVE_RANK_TABLE_PORT", 1, 65535));
  config.worker_num = worker_num;
  config.node_id = rank;
  read_common(config);
  return config;
}
}  // namespace cleave::cluster

// The table of CLEAVE_* variables (NOTE [Environment variables] in cleave/core/env.h).
#include "cleave/core/env.h"

#include <algorithm>
#include <cstdlib>
#include <string>

#include "cleave/core/error.h"

namespace cleave::env {
namespace {

// Sorted by name; docs/environment.md lists the same rows in the same order.
constexpr Variable kVariables[] = {
    {"CLEAVE_BIND_CORES", "auto, 1 or 0", "auto",
     "binds workers to cores: each busy worker of a placed job by its measured load, each "
     "worker of a DATA_PARALLEL, SEMI_AUTO_PARALLEL or AUTO_PARALLEL job to core (local rank % "
     "cores) at its first step; auto when the host's workers outnumber its cores, 1 always, 0 "
     "never"},
    {"CLEAVE_COMM_SHM", "0 or 1", "1",
     "1: collectives of a gloo group among ranks of one host go through shared memory; 0: all "
     "over TCP"},
    {"CLEAVE_COMM_SHM_ROUND_KB", "kilobytes from 4 to 1024", "",
     "the bytes per rank and round of the shared-memory collectives (for measurements); unset: "
     "chosen by the host's load"},
    {"CLEAVE_COMM_TIMEOUT_MS", "a number of milliseconds from 1 to 2147483647", "300000",
     "bound of store gets, barriers and the backend's collectives, in every join mode (under "
     "mpirun a collective past it ends the MPI job)"},
    {"CLEAVE_CPU_CACHE_MB", "megabytes from 0 to 1048576", "2048",
     "how much freed CPU tensor memory the allocator keeps for reuse"},
    {"CLEAVE_HEARTBEAT_INTERVAL_MS", "a number of milliseconds from 1 to 2147483647", "1000",
     "the period of a worker's heartbeat to the scheduler"},
    {"CLEAVE_HEARTBEAT_TIMEOUT_MS", "a number of milliseconds from 1 to 2147483647", "10000",
     "the silence after which the scheduler declares a worker lost, and a worker the scheduler "
     "(above CLEAVE_HEARTBEAT_INTERVAL_MS)"},
    {"CLEAVE_JOB_TOKEN", "any text", "",
     "the job's secret: a worker whose token differs from the scheduler's is refused (cleave-run "
     "makes one per job)"},
    {"CLEAVE_RANK_TABLE_PORT", "a port number from 1 to 65535", "",
     "rank-table jobs: the port rank 0 serves the rendezvous on; unset: ranks only, no "
     "communication group"},
    {"CLEAVE_RPC_SHM", "0 or 1", "1",
     "1: the cut edges of a placed network go through shared memory when every worker is on "
     "this host; 0: through the world group"},
    {"CLEAVE_RPC_SPIN_US", "microseconds from 0 to 1000000", "2000",
     "how long a placed graph's wait for a message polls, yielding the core, before it sleeps"},
    {"CLEAVE_RPC_ZERO_COPY", "0 or 1", "1",
     "1: a placed graph writes and reads its messages in place in the mailbox slots; 0: copies "
     "them (for comparison)"},
    {"CLEAVE_STUCK_TIMEOUT_MS", "a number of milliseconds from 0 to 2147483647", "30000",
     "how long a rank may wait in a collective for a peer that makes no progress before the "
     "scheduler fails the job naming that peer; 0 turns it off"},
};

[[noreturn]] void invalid(const Variable& v, const std::string& value) {
  CLEAVE_FAIL("{}='{}' is invalid; expected {} ({}; default {})", v.name, value, v.accepted,
              v.meaning, v.fallback.empty() ? std::string("unset") : std::string(v.fallback));
}

}  // namespace

std::span<const Variable> variables() { return kVariables; }

const Variable& variable(std::string_view name) {
  for (const Variable& v : kVariables) {
    if (v.name == name) return v;
  }
  CLEAVE_ASSERT(false, "environment variable {} is not in the table of src/core/env.cc", name);
  return kVariables[0];
}

bool is_set(std::string_view name) {
  variable(name);
  const char* value = std::getenv(std::string(name).c_str());
  return value != nullptr && *value != '\0';
}

std::string text(std::string_view name) {
  const Variable& v = variable(name);
  const char* value = std::getenv(std::string(name).c_str());
  return value != nullptr && *value != '\0' ? std::string(value) : std::string(v.fallback);
}

bool flag(std::string_view name) {
  const std::string value = text(name);
  if (value == "0" || value == "1") return value == "1";
  invalid(variable(name), value);
}

int64_t integer(std::string_view name, int64_t min, int64_t max) {
  const std::string value = text(name);
  const Variable& v = variable(name);
  const bool digits = !value.empty() && value.size() <= 19 &&
                      std::all_of(value.begin() + (value[0] == '-' ? 1 : 0), value.end(),
                                  [](char c) { return c >= '0' && c <= '9'; });
  if (!digits || value == "-") invalid(v, value);
  size_t used = 0;
  int64_t n = 0;
  try {
    n = std::stoll(value, &used, 10);
  } catch (const std::exception&) {
    invalid(v, value);
  }
  if (used != value.size() || n < min || n > max) invalid(v, value);
  return n;
}

size_t choice(std::string_view name, std::initializer_list<std::string_view> choices) {
  const std::string value = text(name);
  const auto it = std::find(choices.begin(), choices.end(), value);
  if (it == choices.end()) invalid(variable(name), value);
  return static_cast<size_t>(it - choices.begin());
}

}  // namespace cleave::env

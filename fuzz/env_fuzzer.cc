// The environment variables cleave reads: every CLEAVE_* variable of the table in src/core/env.cc
// through env::flag, env::integer and env::text, and MindSpore's MS_* job variables through
// cluster::read_job_config. The input is lines "<byte><value>": the byte picks the variable, the
// rest of the line is its value. Any values give settings or a cleave::Error.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

#include "cleave/core/env.h"
#include "cleave/core/error.h"
#include "cluster/config.h"
#include "fuzz_util.h"

namespace {

constexpr size_t kMaxValue = 4096;  // libFuzzer's default -max_len

// One environment entry "NAME=value" per variable, in storage of our own given to putenv once:
// a value is written in place, and an empty value reads as unset (env::is_set, env_value).
// (setenv would copy every value and glibc never frees the old ones.)
struct Variable {
  std::string name;
  std::vector<char> entry;  // "NAME=" then the value, NUL-terminated
  void set(std::string_view value) {
    value = value.substr(0, std::min(value.find('\0'), kMaxValue));  // a value ends at its NUL
    std::copy(value.begin(), value.end(), entry.begin() + name.size() + 1);
    entry[name.size() + 1 + value.size()] = '\0';
  }
};

std::vector<Variable>& variables() {
  static std::vector<Variable> vars = [] {
    std::vector<Variable> out;
    std::vector<std::string> names;
    for (const auto& v : cleave::env::variables()) names.emplace_back(v.name);
    for (const char* name : {"MS_ROLE", "MS_SCHED_PORT", "MS_WORKER_NUM", "MS_NODE_ID",
                             "MS_TOPO_TIMEOUT", "MS_WORKER_IP"}) {
      names.emplace_back(name);
    }
    out.reserve(names.size());  // putenv keeps pointers into the entries
    for (const std::string& name : names) {
      Variable v{name, std::vector<char>(name.size() + 2 + kMaxValue, '\0')};
      std::copy(name.begin(), name.end(), v.entry.begin());
      v.entry[name.size()] = '=';
      out.push_back(std::move(v));
      ::putenv(out.back().entry.data());
    }
    // A name that always resolves: read_job_config resolves MS_SCHED_HOST.
    ::setenv("MS_SCHED_HOST", "127.0.0.1", 1);
    return out;
  }();
  return vars;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::vector<Variable>& vars = variables();
  for (Variable& v : vars) v.set("");

  std::string_view input(reinterpret_cast<const char*>(data), size);
  while (!input.empty()) {
    const size_t end = std::min(input.find('\n'), input.size());
    std::string_view line = input.substr(0, end);
    input.remove_prefix(std::min(end + 1, input.size()));
    if (line.empty()) continue;
    vars[static_cast<uint8_t>(line[0]) % vars.size()].set(line.substr(1));
  }

  for (const auto& v : cleave::env::variables()) {
    cleave::env::is_set(v.name);
    cleave::env::text(v.name);
    try {
      cleave::env::flag(v.name);
    } catch (const cleave::Error&) {
    }
    try {
      cleave::env::integer(v.name, 0, 2147483647);
    } catch (const cleave::Error&) {
    }
    try {
      cleave::env::choice(v.name, {"auto", "0", "1"});
    } catch (const cleave::Error&) {
    }
  }
  try {
    cleave::cluster::read_job_config();
  } catch (const cleave::Error&) {
  }
  try {
    cleave::cluster::read_comm_timeout();
  } catch (const cleave::Error&) {
  }
  return 0;
}

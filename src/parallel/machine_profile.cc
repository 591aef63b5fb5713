// Machine profiles (include/cleave/parallel/machine_profile.h): the running machine, the JSON
// form, and the once-per-process warning about a profile of another machine.
#include "cleave/parallel/machine_profile.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <sched.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <thread>
#include <utility>

#include "cleave/core/atomic_file.h"
#include "cleave/core/error.h"
#include "parallel/default_profile.h"

namespace cleave::parallel {

namespace {

using nlohmann::json;

constexpr const char* kFormat = "cleave-machine-profile";
constexpr const char* kWhat = "machine profile";
constexpr Collective kCollectives[] = {Collective::kAllReduce, Collective::kAllGather,
                                       Collective::kReduceScatter, Collective::kAllToAll,
                                       Collective::kBroadcast};

std::string cpu_model_name() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("model name", 0) != 0) continue;
    const size_t colon = line.find(':');
    if (colon == std::string::npos) continue;
    std::string name = line.substr(colon + 1);
    const size_t first = name.find_first_not_of(" \t");
    const size_t last = name.find_last_not_of(" \t\r");
    return first == std::string::npos ? "" : name.substr(first, last - first + 1);
  }
  return "unknown";
}

bool cpu_has(std::string_view ext) {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_cpu_init();
  if (ext == "avx512f") return __builtin_cpu_supports("avx512f");
  if (ext == "avx2") return __builtin_cpu_supports("avx2");
  if (ext == "fma") return __builtin_cpu_supports("fma");
  if (ext == "avx") return __builtin_cpu_supports("avx");
  if (ext == "sse4_2") return __builtin_cpu_supports("sse4.2");
#endif
  return false;
}

// The reader of one profile: every access names the key path ("comm.shm.collectives.all_reduce[0]
// .latency_s") and the source in its error.
class Reader {
 public:
  explicit Reader(std::string source) : source_(std::move(source)) {}

  [[noreturn]] void fail(const std::string& key, const std::string& problem) const {
    CLEAVE_FAIL("{} '{}': key \"{}\" {}", kWhat, source_, key, problem);
  }

  static std::string kind(const json& v) {
    if (v.is_string()) return fmt::format("the string {}", v.dump());
    if (v.is_boolean()) return fmt::format("the boolean {}", v.dump());
    if (v.is_number()) return fmt::format("the number {}", v.dump());
    if (v.is_array()) return "an array";
    if (v.is_object()) return "an object";
    return "null";
  }

  const json& at(const json& obj, const std::string& path, const char* key,
                 const char* expected) const {
    const std::string full = path.empty() ? key : path + "." + key;
    if (!obj.contains(key)) fail(full, fmt::format("is missing; expected {}", expected));
    return obj.at(key);
  }
  const json& object(const json& obj, const std::string& path, const char* key) const {
    const json& v = at(obj, path, key, "an object");
    require_object(v, join(path, key));
    return v;
  }
  const json& array(const json& obj, const std::string& path, const char* key,
                    const char* expected) const {
    const json& v = at(obj, path, key, expected);
    if (!v.is_array()) fail(join(path, key), fmt::format("is {}; expected {}", kind(v), expected));
    return v;
  }
  std::string string(const json& obj, const std::string& path, const char* key) const {
    const json& v = at(obj, path, key, "a string");
    if (!v.is_string()) fail(join(path, key), fmt::format("is {}; expected a string", kind(v)));
    return v.get<std::string>();
  }
  bool boolean(const json& obj, const std::string& path, const char* key) const {
    const json& v = at(obj, path, key, "true or false");
    if (!v.is_boolean())
      fail(join(path, key), fmt::format("is {}; expected true or false", kind(v)));
    return v.get<bool>();
  }
  // A number > 0 (`positive`) or >= 0, finite; `what` says what it measures.
  double number(const json& obj, const std::string& path, const char* key, bool positive,
                const char* what) const {
    const std::string expected = fmt::format("a number {} ({})", positive ? "> 0" : ">= 0", what);
    const json& v = at(obj, path, key, expected.c_str());
    if (!v.is_number()) fail(join(path, key), fmt::format("is {}; expected {}", kind(v), expected));
    const double d = v.get<double>();
    if (!std::isfinite(d) || d < 0 || (positive && d == 0)) {
      fail(join(path, key), fmt::format("is {}; expected {}", v.dump(), expected));
    }
    return d;
  }
  int64_t integer(const json& obj, const std::string& path, const char* key, int64_t min) const {
    const std::string expected = fmt::format("a whole number >= {}", min);
    const json& v = at(obj, path, key, expected.c_str());
    if (!v.is_number_integer() || v.get<int64_t>() < min) {
      fail(join(path, key), fmt::format("is {}; expected {}", kind(v), expected));
    }
    return v.get<int64_t>();
  }

  // An element of an array that must be an object (`path` names it).
  void require_object(const json& v, const std::string& path) const {
    if (!v.is_object()) fail(path, fmt::format("is {}; expected an object", kind(v)));
  }
  // Calls each(element, its path) for every element of `arr` (named `arr_path`), each of which
  // must be an object.
  template <typename F>
  void each_object(const json& arr, const std::string& arr_path, F&& each) const {
    for (size_t i = 0; i < arr.size(); ++i) {
      const std::string p = index(arr_path, i);
      require_object(arr[i], p);
      each(arr[i], p);
    }
  }

  static std::string join(const std::string& path, const char* key) {
    return path.empty() ? key : path + "." + key;
  }
  static std::string index(const std::string& path, size_t i) {
    return fmt::format("{}[{}]", path, i);
  }

 private:
  std::string source_;
};

std::vector<std::string> strings_of(const Reader& r, const json& obj, const std::string& path,
                                    const char* key) {
  const json& arr = r.array(obj, path, key, "an array of strings");
  std::vector<std::string> out;
  for (size_t i = 0; i < arr.size(); ++i) {
    if (!arr[i].is_string()) {
      r.fail(Reader::index(Reader::join(path, key), i),
             fmt::format("is {}; expected a string", Reader::kind(arr[i])));
    }
    out.push_back(arr[i].get<std::string>());
  }
  return out;
}

// A table's timed op slices ("ops", optional: NOTE [Measured op slices]): each a key and its
// seconds, ascending in key, each key once.
std::vector<OpTiming> ops_of(const Reader& r, const json& table, const std::string& path) {
  std::vector<OpTiming> out;
  if (!table.contains("ops")) return out;
  const json& arr = r.array(table, path, "ops", "an array of timed op slices");
  r.each_object(arr, Reader::join(path, "ops"), [&](const json& e, const std::string& p) {
    OpTiming t;
    t.key = r.string(e, p, "key");
    if (t.key.empty()) r.fail(Reader::join(p, "key"), "is empty; expected an op slice's key");
    if (!out.empty() && t.key <= out.back().key) {
      r.fail(Reader::join(p, "key"),
             fmt::format("is \"{}\"; expected the keys ascending, each once (it follows \"{}\")",
                         t.key, out.back().key));
    }
    t.seconds = r.number(e, p, "seconds", true, "seconds of one call");
    out.push_back(std::move(t));
  });
  return out;
}

// A class's points: `work_key` is "flops" or "bytes", the rate key "<work_key>_per_s".
std::vector<ComputePoint> points_of(const Reader& r, const json& table, const std::string& path,
                                    const char* cls, const char* work_key) {
  const json& arr = r.array(table, path, cls, "an array of measured points");
  const std::string arr_path = Reader::join(path, cls);
  if (arr.empty()) r.fail(arr_path, "is empty; expected at least one measured point");
  const std::string rate_key = std::string(work_key) + "_per_s";
  const std::string rate_what = std::string(work_key) + " per second";
  std::vector<ComputePoint> out;
  r.each_object(arr, arr_path, [&](const json& e, const std::string& p) {
    ComputePoint point;
    point.size_class = r.string(e, p, "class");
    point.shape = r.string(e, p, "shape");
    point.work = r.number(e, p, work_key, true, work_key);
    point.rate = r.number(e, p, rate_key.c_str(), true, rate_what.c_str());
    if (!out.empty() && point.work <= out.back().work) {
      r.fail(Reader::join(p, work_key),
             fmt::format("is {}; expected the points ascending in {} (the one before has {})",
                         point.work, work_key, out.back().work));
    }
    out.push_back(std::move(point));
  });
  return out;
}

BackendProfile backend_of(const Reader& r, const json& comm, const char* name) {
  const std::string path = Reader::join("comm", name);
  const json& b = r.object(comm, "comm", name);
  BackendProfile out;
  out.measured = r.boolean(b, path, "measured");
  if (!out.measured) {
    out.reason = r.string(b, path, "reason");
    return out;
  }
  out.ranks = r.string(b, path, "ranks");
  const json& colls = r.object(b, path, "collectives");
  const std::string colls_path = Reader::join(path, "collectives");
  for (Collective c : kCollectives) {
    const json& arr = r.array(colls, colls_path, collective_key(c), "an array of group sizes");
    const std::string arr_path = Reader::join(colls_path, collective_key(c));
    if (arr.empty()) r.fail(arr_path, "is empty; expected at least one group size");
    std::vector<CollectiveFit>& fits = out.collectives[c];
    r.each_object(arr, arr_path, [&](const json& e, const std::string& p) {
      CollectiveFit fit;
      fit.group_size = r.integer(e, p, "group_size", 2);
      if (!fits.empty() && fit.group_size <= fits.back().group_size) {
        r.fail(Reader::join(p, "group_size"),
               fmt::format("is {}; expected the group sizes ascending (the one before is {})",
                           fit.group_size, fits.back().group_size));
      }
      fit.latency_s = r.number(e, p, "latency_s", false, "seconds");
      fit.bandwidth_bytes_per_s = r.number(e, p, "bandwidth_bytes_per_s", true, "bytes per second");
      const json& pts = r.array(e, p, "points", "an array of measured points");
      r.each_object(pts, Reader::join(p, "points"), [&](const json& pt, const std::string& pp) {
        fit.points.push_back({r.number(pt, pp, "bytes_sent", false, "bytes"),
                              r.number(pt, pp, "seconds", true, "seconds")});
      });
      fits.push_back(std::move(fit));
    });
  }
  if (b.contains("shared_cores")) {
    const json& arr = r.array(b, path, "shared_cores", "an array of job and group sizes");
    r.each_object(
        arr, Reader::join(path, "shared_cores"), [&](const json& v, const std::string& p) {
          SharedCoresLatency e;
          e.ranks = r.integer(v, p, "ranks", 2);
          e.group_size = r.integer(v, p, "group_size", 2);
          if (e.group_size > e.ranks) {
            r.fail(
                Reader::join(p, "group_size"),
                fmt::format("is {}; expected at most the job's ranks ({})", e.group_size, e.ranks));
          }
          if (!out.shared_cores.empty()) {
            const SharedCoresLatency& before = out.shared_cores.back();
            if (std::pair(e.ranks, e.group_size) <= std::pair(before.ranks, before.group_size)) {
              r.fail(p,
                     fmt::format("has ranks {} and group_size {}; expected the entries ascending "
                                 "in ranks, then group_size, each pair once (the one before has "
                                 "{} and {})",
                                 e.ranks, e.group_size, before.ranks, before.group_size));
            }
          }
          e.latency_s = r.number(v, p, "latency_s", true, "seconds");
          out.shared_cores.push_back(e);
        });
  }
  return out;
}

// Written with ordered_json: the file reads in the order of NOTE [Machine profile].
using ojson = nlohmann::ordered_json;

ojson points_json(const std::vector<ComputePoint>& points, const char* work_key) {
  ojson arr = ojson::array();
  for (const ComputePoint& p : points) {
    arr.push_back({{"class", p.size_class},
                   {"shape", p.shape},
                   {work_key, p.work},
                   {std::string(work_key) + "_per_s", p.rate}});
  }
  return arr;
}

std::atomic<bool>& warned() {
  static std::atomic<bool> flag{false};
  return flag;
}

}  // namespace

MachineInfo this_machine() {
  MachineInfo m;
  m.cpu_model = cpu_model_name();
  for (const char* ext : kIsaExtensions) {
    if (cpu_has(ext)) m.isa.emplace_back(ext);
  }
  cpu_set_t set;
  CPU_ZERO(&set);
  m.cores = sched_getaffinity(0, sizeof(set), &set) == 0
                ? CPU_COUNT(&set)
                : static_cast<int64_t>(std::thread::hardware_concurrency());
  return m;
}

std::string machine_difference(const MachineInfo& profile, const MachineInfo& running) {
  std::vector<std::string> diffs;
  if (profile.cpu_model != running.cpu_model) {
    diffs.push_back(fmt::format("CPU \"{}\" in the profile, \"{}\" here", profile.cpu_model,
                                running.cpu_model));
  }
  if (profile.isa != running.isa) {
    diffs.push_back(fmt::format("ISA [{}] in the profile, [{}] here", fmt::join(profile.isa, " "),
                                fmt::join(running.isa, " ")));
  }
  if (profile.cores != running.cores) {
    diffs.push_back(fmt::format("cores: {} in the profile, {} here", profile.cores, running.cores));
  }
  return fmt::format("{}", fmt::join(diffs, "; "));
}

const char* collective_key(Collective c) {
  switch (c) {
    case Collective::kAllReduce:
      return "all_reduce";
    case Collective::kAllGather:
      return "all_gather";
    case Collective::kReduceScatter:
      return "reduce_scatter";
    case Collective::kAllToAll:
      return "all_to_all";
    case Collective::kBroadcast:
      return "broadcast";
  }
  return "?";
}

std::string profile_to_json(const MachineProfile& profile) {
  const MachineInfo& m = profile.machine;
  ojson compute = ojson::array();
  for (const ComputeTable& t : profile.compute) {
    ojson table = {{"threads", t.threads},
                   {"matmul", points_json(t.matmul, "flops")},
                   {"convolution", points_json(t.convolution, "flops")},
                   {"memory", points_json(t.memory, "bytes")}};
    if (!t.ops.empty()) {
      ojson ops = ojson::array();
      for (const OpTiming& o : t.ops) ops.push_back({{"key", o.key}, {"seconds", o.seconds}});
      table["ops"] = std::move(ops);
    }
    compute.push_back(std::move(table));
  }
  ojson comm = ojson::object();
  for (const char* name : kProfileBackends) {
    const auto it = profile.backends.find(name);
    if (it == profile.backends.end() || !it->second.measured) {
      const std::string reason = it == profile.backends.end() ? "not measured" : it->second.reason;
      comm[name] = {{"measured", false}, {"reason", reason}};
      continue;
    }
    const BackendProfile& b = it->second;
    ojson colls = ojson::object();
    for (const auto& [c, fits] : b.collectives) {
      ojson arr = ojson::array();
      for (const CollectiveFit& f : fits) {
        ojson pts = ojson::array();
        for (const CollectivePoint& p : f.points) {
          pts.push_back({{"bytes_sent", p.bytes_sent}, {"seconds", p.seconds}});
        }
        arr.push_back({{"group_size", f.group_size},
                       {"latency_s", f.latency_s},
                       {"bandwidth_bytes_per_s", f.bandwidth_bytes_per_s},
                       {"points", std::move(pts)}});
      }
      colls[collective_key(c)] = std::move(arr);
    }
    comm[name] = {{"measured", true}, {"ranks", b.ranks}, {"collectives", std::move(colls)}};
    if (!b.shared_cores.empty()) {
      ojson shared = ojson::array();
      for (const SharedCoresLatency& e : b.shared_cores) {
        shared.push_back(
            {{"ranks", e.ranks}, {"group_size", e.group_size}, {"latency_s", e.latency_s}});
      }
      comm[name]["shared_cores"] = std::move(shared);
    }
  }
  const ojson file = {{"format", kFormat},
                      {"version", 1},
                      {"machine",
                       {{"cpu_model", m.cpu_model},
                        {"isa", m.isa},
                        {"cores", m.cores},
                        {"measured_at", m.measured_at},
                        {"backends", m.backends}}},
                      {"compute", std::move(compute)},
                      {"comm", std::move(comm)}};
  return file.dump(1) + "\n";
}

MachineProfile profile_from_json(std::string_view text, const std::string& source) {
  json file;
  try {
    file = json::parse(text);
  } catch (const json::exception& e) {
    CLEAVE_FAIL("{} '{}' is not valid JSON ({}); expected a file written by cleave-calibrate",
                kWhat, source, e.what());
  }
  const Reader r(source);
  CLEAVE_CHECK_ARG(file.is_object(),
                   "{} '{}' is {}; expected a JSON object written by "
                   "cleave-calibrate",
                   kWhat, source, Reader::kind(file));
  const std::string format = r.string(file, "", "format");
  if (format != kFormat) {
    r.fail("format", fmt::format("is \"{}\"; expected \"{}\"", format, kFormat));
  }
  const int64_t version = r.integer(file, "", "version", 0);
  if (version != 1) r.fail("version", fmt::format("is {}; expected 1", version));

  MachineProfile p;
  const json& m = r.object(file, "", "machine");
  p.machine.cpu_model = r.string(m, "machine", "cpu_model");
  p.machine.isa = strings_of(r, m, "machine", "isa");
  p.machine.cores = r.integer(m, "machine", "cores", 1);
  p.machine.measured_at = r.string(m, "machine", "measured_at");
  p.machine.backends = strings_of(r, m, "machine", "backends");

  const json& compute = r.array(file, "", "compute", "an array of tables, one per thread count");
  if (compute.empty()) r.fail("compute", "is empty; expected at least one table");
  for (size_t i = 0; i < compute.size(); ++i) {
    const std::string path = Reader::index("compute", i);
    r.require_object(compute[i], path);
    ComputeTable t;
    t.threads = r.integer(compute[i], path, "threads", 1);
    if (!p.compute.empty() && t.threads <= p.compute.back().threads) {
      r.fail(Reader::join(path, "threads"),
             fmt::format("is {}; expected the tables ascending in threads", t.threads));
    }
    t.matmul = points_of(r, compute[i], path, "matmul", "flops");
    t.convolution = points_of(r, compute[i], path, "convolution", "flops");
    t.memory = points_of(r, compute[i], path, "memory", "bytes");
    t.ops = ops_of(r, compute[i], path);
    p.compute.push_back(std::move(t));
  }

  const json& comm = r.object(file, "", "comm");
  for (const char* name : kProfileBackends) p.backends[name] = backend_of(r, comm, name);
  for (const std::string& b : p.machine.backends) {
    if (!p.backends.contains(b) || !p.backends.at(b).measured) {
      r.fail("machine.backends",
             fmt::format("names \"{}\", which \"comm\" does not hold as measured; expected only "
                         "measured backends",
                         b));
    }
  }
  return p;
}

void add_op_timings(ComputeTable& table, const std::vector<OpTiming>& timings) {
  std::map<std::string, double> merged;
  for (const OpTiming& t : table.ops) merged[t.key] = t.seconds;
  for (const OpTiming& t : timings) merged[t.key] = t.seconds;
  table.ops.clear();
  for (const auto& [key, seconds] : merged) table.ops.push_back({key, seconds});
}

MachineProfile load_machine_profile(const std::string& path) {
  return profile_from_json(read_whole_file(path, kWhat), path);
}

void save_machine_profile(const MachineProfile& profile, const std::string& path) {
  write_file_atomically(path, profile_to_json(profile), kWhat);
}

bool warn_if_other_machine(const MachineProfile& profile, const std::string& source) {
  const std::string diff = machine_difference(profile.machine, this_machine());
  if (diff.empty() || warned().exchange(true)) return false;
  const std::string text = fmt::format(
      "cleave: warning: the machine profile {} was measured on another machine ({}): the cost "
      "model's seconds may not fit this one. Run `cleave-calibrate -o FILE` here and name FILE "
      "in set_auto_parallel_context's cost_model_profile. (This warning is printed once.)\n",
      source, diff);
  std::fputs(text.c_str(), stderr);
  return true;
}

void reset_machine_warning_for_testing() { warned() = false; }

const MachineProfile& default_machine_profile() {
  static const MachineProfile profile =
      profile_from_json(default_machine_profile_json(), "the default profile");
  return profile;
}

}  // namespace cleave::parallel

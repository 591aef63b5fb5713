// Machine profile: what a machine was measured to do, the input of the calibrated cost model
// (cleave/parallel/calibrated_cost_model.h). cleave-calibrate writes one; a profile measured on
// the machine cleave is developed on ships compiled into the library (default_machine_profile()).
//
// NOTE [Machine profile]
// A profile holds, for the machine it was measured on (CPU model, ISA extensions, cores):
//   compute   per thread count, per compute class (matmul, convolution, memory), measured points
//             of increasing size: the work (flops, or bytes read and written) and the rate
//             (flops/s, bytes/s) cleave's own ops reached on it. The size class of a point
//             ("small", "medium", "large") and its shape are kept for the reader. Optionally
//             ("ops"), op slices of a model timed whole (NOTE [Measured op slices]).
//   comm      per backend ("shm": shared memory between the ranks of one host; "gloo": Gloo over
//             TCP; "mpi"; "nccl"), either measured, with per collective and group size a latency
//             and a bandwidth (time = latency_s + bytes_sent / bandwidth_bytes_per_s, bytes_sent
//             being what each rank sends in a ring algorithm, as the redistribution planner
//             counts it) fitted to the measured points kept beside them; or not measured, with
//             the reason ("no GPU", "not launched by mpirun"). A measured backend may add
//             "shared_cores": the latency of a collective in a job of more ranks than cores,
//             per job size and group size (NOTE [Collectives of ranks sharing cores]).
// The JSON form is docs/design/cost_model.md's. Reading checks every key: a missing key, a value
// of the wrong type, a negative or zero rate is an Error naming the file, the key and what was
// expected.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "cleave/parallel/cost_model.h"

namespace cleave::parallel {

// The machine a profile was measured on, or the one running this process.
struct MachineInfo {
  std::string cpu_model;         // /proc/cpuinfo's "model name"
  std::vector<std::string> isa;  // the vector extensions it has, of kIsaExtensions
  int64_t cores = 0;             // CPUs this process may run on
  std::string measured_at;       // UTC time of the measurement (ISO 8601); empty for this_machine
  std::vector<std::string> backends;  // the backends measured; empty for this_machine
};

// The extensions a MachineInfo records, widest first.
inline constexpr const char* kIsaExtensions[] = {"avx512f", "avx2", "fma", "avx", "sse4_2"};

// The machine running this process (measured_at and backends empty).
MachineInfo this_machine();

// "" when `running` is the machine `profile` describes (same CPU model, ISA and cores); else one
// sentence naming what differs ("cores: 64 in the profile, 2 here").
std::string machine_difference(const MachineInfo& profile, const MachineInfo& running);

// One measured point of a compute class: `work` flops (matmul, convolution) or bytes (memory) at
// `rate` of them per second.
struct ComputePoint {
  std::string size_class;  // "small", "medium", "large"
  std::string shape;       // what was run: "gemm 256x256x256", "add 1048576 float32"
  double work = 0;
  double rate = 0;
};

// One op slice timed on the machine (NOTE [Measured op slices] in cleave/parallel/search.h):
// the slice's forward and the gradients its key names, one call, in seconds.
struct OpTiming {
  std::string key;  // parallel::op_slice_key
  double seconds = 0;
};

// The compute points measured with `threads` OpenMP threads, each class ascending in work, and
// the op slices timed with as many (ascending in key, each key once; none unless a tool timed a
// model's slices: cleave-plan --time-ops).
struct ComputeTable {
  int64_t threads = 1;
  std::vector<ComputePoint> matmul, convolution, memory;
  std::vector<OpTiming> ops;
};

// Puts `timings` into `table` (a key it holds already takes the new time), keeping it ascending
// in key.
void add_op_timings(ComputeTable& table, const std::vector<OpTiming>& timings);

// One measured collective: each rank sent `bytes_sent` bytes, and it took `seconds`.
struct CollectivePoint {
  double bytes_sent = 0;
  double seconds = 0;
};

// A collective over groups of `group_size` ranks: the fit and the points it was fitted to.
struct CollectiveFit {
  int64_t group_size = 2;
  double latency_s = 0;
  double bandwidth_bytes_per_s = 0;
  std::vector<CollectivePoint> points;
};

// A collective's latency in a job whose `ranks` outnumber the machine's cores (NOTE
// [Collectives of ranks sharing cores] in cleave/parallel/calibrated_cost_model.h): the step time
// one small AllReduce over a group of `group_size` of them adds, measured with every rank of the
// job computing between its collectives, the ranks bound to the cores in turn.
struct SharedCoresLatency {
  int64_t ranks = 2;
  int64_t group_size = 2;
  double latency_s = 0;
};

struct BackendProfile {
  bool measured = false;
  std::string reason;  // why it was not measured (empty when measured)
  std::string ranks;   // how the ranks ran: "threads", "processes"
  // Every Collective, each with its fits ascending in group size (measured backends).
  std::map<Collective, std::vector<CollectiveFit>> collectives;
  // Optional (a profile of a machine with as many cores as ranks has none): ascending in ranks,
  // then in group size, each pair once.
  std::vector<SharedCoresLatency> shared_cores;
};

struct MachineProfile {
  MachineInfo machine;
  std::vector<ComputeTable> compute;  // ascending in threads
  // "shm", "gloo", "mpi", "nccl" (every one of kProfileBackends).
  std::map<std::string, BackendProfile> backends;
};

// The backends a profile describes, measured or not.
inline constexpr const char* kProfileBackends[] = {"shm", "gloo", "mpi", "nccl"};

// "all_reduce", "all_gather", "reduce_scatter", "all_to_all", "broadcast": the profile's keys.
const char* collective_key(Collective c);

// The JSON text of `profile` (NOTE [Machine profile]).
std::string profile_to_json(const MachineProfile& profile);
// Parses and checks a profile; `source` names it in errors (a path, or "the default profile").
// Throws Error naming the source, the key and what was expected.
MachineProfile profile_from_json(std::string_view text, const std::string& source);
// Reads `path`; throws Error when it cannot be read or is not a valid profile.
MachineProfile load_machine_profile(const std::string& path);
// Writes `profile` to `path` atomically; throws Error when it cannot.
void save_machine_profile(const MachineProfile& profile, const std::string& path);

// The profile shipped with cleave (measured on the machine named in it), compiled into the
// library from src/parallel/default_machine_profile.json.
const MachineProfile& default_machine_profile();

// Prints one warning to stderr, the first time in this process that a profile measured on another
// machine than this one is used (`source` names it): its costs may not fit, run cleave-calibrate.
// Returns whether this call printed it.
bool warn_if_other_machine(const MachineProfile& profile, const std::string& source);
// Tests: forget that the warning was printed.
void reset_machine_warning_for_testing();

}  // namespace cleave::parallel

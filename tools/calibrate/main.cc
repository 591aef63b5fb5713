// cleave-calibrate: measures this machine and writes its machine profile (NOTE [Machine profile]
// in cleave/parallel/machine_profile.h), the input of the calibrated cost model.
//
//   cleave-calibrate -o FILE [--quick] [--max-ranks N]
//
// What it measures, in this order (docs/design/cost_model.md, "Calibration"):
//   mpi       under mpirun only (every process of the job runs cleave-calibrate): the collectives
//             over the world's first n ranks, n = 2 .. world size; ranks are the job's processes.
//             Then the processes other than rank 0 end, and rank 0 measures the rest and writes.
//   compute   through cleave's own ops (ops::matmul, ops::conv2d, ops::add, the kernels the
//             executor runs): GEMMs of several sizes, convolutions, an elementwise add (memory
//             bound), with 1 OpenMP thread and with the process's OpenMP threads (when more).
//   shm, gloo AllReduce, AllGather, ReduceScatter, AlltoAll and Broadcast over groups of 2 ..
//             --max-ranks ranks, ranks as threads of this process over an in-memory store: a
//             gloo group on one host takes the shared-memory path ("shm"), and with
//             CLEAVE_COMM_SHM=0 Gloo's TCP pairs on 127.0.0.1 ("gloo"). For shm also the
//             latency of a collective in jobs of more ranks than cores ("shared_cores",
//             measure_shared_cores).
//   nccl      not measured (recorded with the reason).
// A time is the best of five timed loops of about --quick ? 10 ms : 30 ms each (at least one
// call). --quick measures fewer sizes and only groups of 2 (a couple of seconds, for tests).
//
// Exit status 0 on success, 1 when a measurement or writing the file fails, 2 on bad usage.
#include <fmt/core.h>
#include <omp.h>
#include <pthread.h>
#include <sched.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "cleave/comm/process_group.h"
#include "cleave/comm/store.h"
#include "cleave/core/error.h"
#include "cleave/flags.h"
#include "cleave/kernels/device.h"
#include "cleave/ops/elementwise.h"
#include "cleave/ops/nn.h"
#include "cleave/parallel/machine_profile.h"
#include "cleave/runtime/op_timing.h"
#include "comm/backends.h"

namespace {

using namespace cleave;
using Clock = std::chrono::steady_clock;
using parallel::Collective;

constexpr Collective kCollectives[] = {Collective::kAllReduce, Collective::kAllGather,
                                       Collective::kReduceScatter, Collective::kAllToAll,
                                       Collective::kBroadcast};

struct Settings {
  bool quick = false;
  int max_ranks = 4;
  double loop_s() const { return quick ? 0.01 : 0.03; }
};

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

// Loops timed per measurement; the best is kept (the machine may be shared: the fastest loop is
// the one least disturbed).
constexpr int kLoops = 5;

double time_call(const std::function<void()>& fn, double loop_s) {
  return runtime::seconds_per_call(fn, loop_s, kLoops);
}

// ---- compute ----

parallel::ComputePoint gemm_point(int64_t n, const Settings& s) {
  const Tensor a = Tensor::uniform({n, n}, -1, 1);
  const Tensor b = Tensor::uniform({n, n}, -1, 1);
  const double t = time_call([&] { ops::matmul(a, b); }, s.loop_s());
  const double flops = 2.0 * static_cast<double>(n * n * n);
  return {n <= 64    ? "small"
          : n <= 256 ? "medium"
                     : "large",
          fmt::format("gemm {}x{}x{} float32", n, n, n), flops, flops / t};
}

struct ConvShape {
  const char* size_class;
  int64_t n, c, hw, o, k;
};

parallel::ComputePoint conv_point(const ConvShape& c, const Settings& s) {
  const Tensor x = Tensor::uniform({c.n, c.c, c.hw, c.hw}, -1, 1);
  const Tensor w = Tensor::uniform({c.o, c.c, c.k, c.k}, -1, 1);
  ops::Conv2DOptions options;
  options.pad_mode = "same";
  const double t = time_call([&] { ops::conv2d(x, w, options); }, s.loop_s());
  const double flops = 2.0 * static_cast<double>(c.n * c.o * c.hw * c.hw * c.c * c.k * c.k);
  return {c.size_class,
          fmt::format("conv2d x ({}, {}, {}, {}) w ({}, {}, {}, {}) same float32", c.n, c.c, c.hw,
                      c.hw, c.o, c.c, c.k, c.k),
          flops, flops / t};
}

parallel::ComputePoint add_point(int64_t n, const Settings& s) {
  const Tensor a = Tensor::uniform({n}, -1, 1);
  const Tensor b = Tensor::uniform({n}, -1, 1);
  const double t = time_call([&] { ops::add(a, b); }, s.loop_s());
  const double bytes = 12.0 * static_cast<double>(n);  // two read, one written
  return {n <= 4096        ? "small"
          : n <= (1 << 20) ? "medium"
                           : "large",
          fmt::format("add {} float32", n), bytes, bytes / t};
}

parallel::ComputeTable measure_compute(int threads, const Settings& s) {
  omp_set_num_threads(threads);
  parallel::ComputeTable t;
  t.threads = threads;
  const std::vector<int64_t> gemms = s.quick
                                         ? std::vector<int64_t>{16, 64, 256}
                                         : std::vector<int64_t>{16, 32, 64, 128, 256, 512, 1024};
  for (int64_t n : gemms) t.matmul.push_back(gemm_point(n, s));
  std::vector<ConvShape> convs = {{"small", 1, 8, 16, 8, 3}, {"medium", 4, 32, 32, 32, 3}};
  if (!s.quick) convs.push_back({"large", 16, 64, 32, 64, 3});
  for (const ConvShape& c : convs) t.convolution.push_back(conv_point(c, s));
  const std::vector<int64_t> adds = s.quick
                                        ? std::vector<int64_t>{256, 65536, 1 << 20}
                                        : std::vector<int64_t>{256, 4096, 65536, 1 << 20, 1 << 23};
  for (int64_t n : adds) t.memory.push_back(add_point(n, s));
  return t;
}

// ---- collectives ----

// Bytes each rank sends in a ring algorithm when its input buffer holds `m` bytes, as the
// redistribution planner counts them (src/parallel/redistribution.cc); Broadcast: the buffer,
// which every rank of a pipelined chain forwards once.
double bytes_sent(Collective c, double m, double n) {
  switch (c) {
    case Collective::kAllReduce:
      return 2 * m * (n - 1) / n;
    case Collective::kAllGather:
      return m * (n - 1);
    case Collective::kReduceScatter:
    case Collective::kAllToAll:
      return m * (n - 1) / n;
    case Collective::kBroadcast:
      break;
  }
  return m;
}

// Runs collective `c` with an input of `elements` Float32 per rank (a multiple of the group size).
std::function<void()> collective_call(comm::ProcessGroup& g, Collective c, int64_t elements) {
  const int64_t n = g.size();
  const Tensor in = Tensor::ones({elements});
  switch (c) {
    case Collective::kAllReduce:
      return [&g, in] { g.all_reduce(in); };
    case Collective::kAllGather: {
      const Tensor out = Tensor::empty({elements * n});
      return [&g, in, out] { g.all_gather(out, in); };
    }
    case Collective::kReduceScatter: {
      const Tensor out = Tensor::empty({elements / n});
      return [&g, in, out] { g.reduce_scatter(out, in); };
    }
    case Collective::kAllToAll: {
      const Tensor out = Tensor::empty({elements});
      return [&g, in, out] { g.all_to_all(out, in); };
    }
    case Collective::kBroadcast:
      break;
  }
  return [&g, in] { g.broadcast(in, 0); };
}

// Seconds of one collective on rank 0 of `g` (every rank calls it; the others get rank 0's
// figure too). The loop sizes are rank 0's, broadcast so that every rank runs as many calls.
double time_collective(comm::ProcessGroup& g, const std::function<void()>& op, double loop_s) {
  op();
  g.barrier();
  auto t0 = Clock::now();
  op();
  g.barrier();
  const Tensor plan = Tensor::from_vector(std::vector<double>{
      std::clamp(loop_s / std::max(seconds_since(t0), 1e-9), 1.0, 10000.0), 0.0});
  g.broadcast(plan, 0);
  const int iters = static_cast<int>(plan.to_vector<double>()[0]);
  double best = 1e300;
  for (int loop = 0; loop < kLoops; ++loop) {
    g.barrier();
    t0 = Clock::now();
    for (int i = 0; i < iters; ++i) op();
    g.barrier();
    best = std::min(best, seconds_since(t0) / iters);
  }
  const Tensor result = Tensor::from_vector(std::vector<double>{best});
  g.broadcast(result, 0);
  return result.to_vector<double>()[0];
}

// time = latency + bytes * per_byte, least squares weighted by 1 / time^2 (each point's relative
// error counts alike, from 1 KB to megabytes); a negative latency is fitted again through 0, a
// slope that is not positive (noise on a flat curve) becomes the largest point's average rate.
void fit(parallel::CollectiveFit& f) {
  double sw = 0, sx = 0, sy = 0, sxx = 0, sxy = 0;
  for (const auto& p : f.points) {
    const double w = 1 / (p.seconds * p.seconds);
    sw += w, sx += w * p.bytes_sent, sy += w * p.seconds;
    sxx += w * p.bytes_sent * p.bytes_sent, sxy += w * p.bytes_sent * p.seconds;
  }
  const double det = sw * sxx - sx * sx;
  double per_byte = det > 0 ? (sw * sxy - sx * sy) / det : 0;
  double latency = det > 0 ? (sy - per_byte * sx) / sw : f.points.front().seconds;
  if (latency < 0) {
    latency = 0;
    per_byte = sxx > 0 ? sxy / sxx : 0;
  }
  if (!(per_byte > 0)) {
    const auto& last = f.points.back();
    per_byte = last.seconds / std::max(last.bytes_sent, 1.0);
  }
  f.latency_s = latency;
  f.bandwidth_bytes_per_s = 1 / per_byte;
}

// Measures every collective on group `g` (called by every rank); returns rank 0's fits.
std::vector<std::pair<Collective, parallel::CollectiveFit>> measure_group(comm::ProcessGroup& g,
                                                                          const Settings& s) {
  const std::vector<int64_t> sizes =
      s.quick ? std::vector<int64_t>{4 << 10, 256 << 10}
              : std::vector<int64_t>{1 << 10, 64 << 10, 1 << 20, 8 << 20};
  std::vector<std::pair<Collective, parallel::CollectiveFit>> out;
  for (Collective c : kCollectives) {
    parallel::CollectiveFit f;
    f.group_size = g.size();
    for (int64_t bytes : sizes) {
      const int64_t elements = std::max<int64_t>(bytes / 4 / g.size(), 1) * g.size();
      const double seconds = time_collective(g, collective_call(g, c, elements), s.loop_s());
      f.points.push_back({bytes_sent(c, 4.0 * static_cast<double>(elements), g.size()), seconds});
    }
    fit(f);
    out.emplace_back(c, std::move(f));
  }
  return out;
}

void add_fits(parallel::BackendProfile& b,
              const std::vector<std::pair<Collective, parallel::CollectiveFit>>& fits) {
  for (const auto& [c, f] : fits) b.collectives[c].push_back(f);
}

// `backend` ("shm" or "gloo") over groups of 2 .. max_ranks thread ranks.
parallel::BackendProfile measure_threads(const std::string& backend, const Settings& s) {
  parallel::BackendProfile b;
  b.measured = true;
  b.ranks = "threads";
  const std::string expected = backend == "shm" ? "shm" : "tcp";
  for (int n = 2; n <= (s.quick ? 2 : s.max_ranks); ++n) {
    // Read by every group made while it is set (comm/shm/shm_collectives.cc).
    ::setenv("CLEAVE_COMM_SHM", backend == "shm" ? "1" : "0", 1);
    auto store = comm::make_memory_store();
    std::vector<std::shared_ptr<comm::ProcessGroup>> groups(static_cast<size_t>(n));
    std::vector<std::exception_ptr> errors(static_cast<size_t>(n));
    std::vector<std::pair<Collective, parallel::CollectiveFit>> fits;
    std::vector<std::thread> threads;
    for (int r = 0; r < n; ++r) {
      threads.emplace_back([&, r] {
        try {
          comm::ProcessGroupOptions o;
          o.backend = "gloo";
          o.store = store;
          o.rank = r;
          o.size = n;
          o.name = fmt::format("calibrate_{}_{}", backend, n);
          o.timeout = std::chrono::seconds(120);
          groups[static_cast<size_t>(r)] = comm::create_process_group(o);
          comm::ProcessGroup& g = *groups[static_cast<size_t>(r)];
          const std::string transport = comm::collective_transport(g);
          CLEAVE_CHECK_ARG(transport == expected,
                           "cleave-calibrate: a gloo group of {} ranks on this host runs its "
                           "collectives over \"{}\", not \"{}\" as the {} row needs",
                           n, transport, expected, backend);
          auto mine = measure_group(g, s);
          if (r == 0) fits = std::move(mine);
        } catch (...) {
          errors[static_cast<size_t>(r)] = std::current_exception();
        }
      });
    }
    for (auto& t : threads) t.join();
    ::unsetenv("CLEAVE_COMM_SHM");
    for (auto& e : errors) {
      if (e) std::rethrow_exception(e);
    }
    add_fits(b, fits);
    std::fprintf(stderr, "cleave-calibrate: %s, %d ranks: measured\n", backend.c_str(), n);
  }
  return b;
}

// NOTE [Collectives of ranks sharing cores] in cleave/parallel/calibrated_cost_model.h: for
// each job of R ranks, more than this process's C cores (up to --max-ranks; --quick: 2C only),
// and each group size n dividing R, R thread ranks bound to the cores in turn (as the workers of
// such a job bind themselves, NOTE [SPMD workers on few cores]), every one computing a few
// microseconds (an add of 64 KB) between small AllReduces (16 floats) over its group of n. The
// latency is what the AllReduces add to the loop's time per call: the best of kLoops loops with
// them, less the best without, alternated.
std::vector<parallel::SharedCoresLatency> measure_shared_cores(const Settings& s) {
  std::vector<int> cpus;
  cpu_set_t allowed;
  CPU_ZERO(&allowed);
  if (sched_getaffinity(0, sizeof(allowed), &allowed) == 0) {
    for (int c = 0; c < CPU_SETSIZE; ++c) {
      if (CPU_ISSET(c, &allowed)) cpus.push_back(c);
    }
  }
  const int cores = static_cast<int>(cpus.size());
  std::vector<parallel::SharedCoresLatency> out;
  if (cores < 1) return out;
  ::setenv("CLEAVE_COMM_SHM", "1", 1);
  for (int ranks = cores + 1; ranks <= (s.quick ? 2 * cores : s.max_ranks); ++ranks) {
    for (int n = 2; n <= ranks; ++n) {
      if (ranks % n != 0 || (s.quick && n != 2)) continue;
      auto store = comm::make_memory_store();
      std::vector<std::exception_ptr> errors(static_cast<size_t>(ranks));
      double latency = 0;
      std::vector<std::thread> threads;
      for (int r = 0; r < ranks; ++r) {
        threads.emplace_back([&, r] {
          try {
            cpu_set_t one;
            CPU_ZERO(&one);
            CPU_SET(cpus[static_cast<size_t>(r % cores)], &one);
            pthread_setaffinity_np(pthread_self(), sizeof(one), &one);
            omp_set_num_threads(1);
            comm::ProcessGroupOptions o;
            o.backend = "gloo";
            o.store = store;
            o.timeout = std::chrono::seconds(120);
            o.rank = r;
            o.size = ranks;
            o.name = fmt::format("calibrate_shared_{}_{}", ranks, n);
            const auto world = comm::create_process_group(o);
            o.rank = r % n;
            o.size = n;
            o.name = fmt::format("calibrate_shared_{}_{}_group{}", ranks, n, r / n);
            const auto group = n == ranks ? world : comm::create_process_group(o);
            const Tensor a = Tensor::ones({16384}), b = Tensor::ones({16384});
            const Tensor small = Tensor::ones({16});
            const int iters = s.quick ? 100 : 500;
            const auto loop = [&](bool with) {
              world->barrier();
              const auto t0 = Clock::now();
              for (int i = 0; i < iters; ++i) {
                (void)ops::add(a, b);
                if (with) group->all_reduce(small);
              }
              world->barrier();
              return seconds_since(t0) / iters;
            };
            loop(true);  // warm-up: the groups' first calls, the pages of the buffers
            double best_with = 1e300, best_without = 1e300;
            for (int l = 0; l < kLoops; ++l) {
              best_without = std::min(best_without, loop(false));
              best_with = std::min(best_with, loop(true));
            }
            if (r == 0) latency = best_with - best_without;
          } catch (...) {
            errors[static_cast<size_t>(r)] = std::current_exception();
          }
        });
      }
      for (auto& t : threads) t.join();
      for (auto& e : errors) {
        if (e) {
          ::unsetenv("CLEAVE_COMM_SHM");
          std::rethrow_exception(e);
        }
      }
      // Noise can make the difference of two bests zero or less; a collective costs something.
      out.push_back({ranks, n, std::max(latency, 1e-7)});
    }
    std::fprintf(stderr, "cleave-calibrate: shm, %d ranks sharing %d cores: measured\n", ranks,
                 cores);
  }
  ::unsetenv("CLEAVE_COMM_SHM");
  return out;
}

bool under_mpirun() { return std::getenv("OMPI_COMM_WORLD_SIZE") != nullptr; }

// Under mpirun: the collectives over the world's first n ranks (every process calls it). Returns
// the profile on rank 0.
parallel::BackendProfile measure_mpi(const Settings& s, int* world_rank) {
  parallel::BackendProfile b;
  comm::ProcessGroupOptions o;
  o.backend = "mpi";
  o.rank = std::atoi(std::getenv("OMPI_COMM_WORLD_RANK"));
  o.size = std::atoi(std::getenv("OMPI_COMM_WORLD_SIZE"));
  o.timeout = std::chrono::seconds(120);
  *world_rank = o.rank;
  if (o.size < 2) {
    b.reason = "launched by mpirun with 1 process; run mpirun -n 2 or more";
    return b;
  }
  const auto world = comm::create_process_group(o);
  b.measured = true;
  b.ranks = "processes";
  for (int n = 2; n <= o.size; ++n) {
    if (o.rank >= n) continue;
    std::vector<int> members(static_cast<size_t>(n));
    for (int r = 0; r < n; ++r) members[static_cast<size_t>(r)] = r;
    const auto g =
        n == o.size ? world : comm::create_subgroup(*world, members, fmt::format("n{}", n));
    add_fits(b, measure_group(*g, s));
  }
  return b;
}

std::string utc_now() {
  const std::time_t now = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&now, &tm);
  char text[32];
  std::strftime(text, sizeof(text), "%Y-%m-%dT%H:%M:%SZ", &tm);
  return text;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{
      "Measures this machine's compute and collectives and writes its machine profile "
      "(JSON), the input of cleave's cost model."};
  cleave::flags::setup(app, {{"OMP_NUM_THREADS", "the threads of the multi-threaded compute rows"},
                             {"OMPI_COMM_WORLD_SIZE", "set by mpirun: the mpi rows are measured"}});
  Settings s;
  std::string output;
  app.add_option("-o,--output", output, "the profile to write (JSON)")->required();
  app.add_flag("--quick", s.quick, "fewer sizes, groups of 2 only: a couple of seconds (tests)");
  app.add_option("--max-ranks", s.max_ranks, "the largest group measured (groups of 2 .. N)")
      ->check(cleave::flags::integer_in(2, 16))
      ->capture_default_str();
  if (auto status = cleave::flags::parse(app, argc, argv)) return *status;
  // The output is checked before measuring, so that a typo costs no measurement.
  namespace fs = std::filesystem;
  std::error_code ec;
  std::string problem;
  if (output.empty()) {
    problem = "it is empty";
  } else if (fs::is_directory(output, ec)) {
    problem = "it is a folder";
  } else {
    const fs::path parent = fs::absolute(fs::path(output), ec).parent_path();
    if (!fs::is_directory(parent, ec)) {
      problem = fmt::format("its folder '{}' does not exist", parent.string());
    } else if (::access(parent.c_str(), W_OK) != 0) {
      problem = fmt::format("its folder '{}' is not writable", parent.string());
    }
  }
  if (!problem.empty()) {
    std::fprintf(stderr,
                 "cleave-calibrate: -o '%s' cannot be written: %s; expected a file in an existing, "
                 "writable folder\n",
                 output.c_str(), problem.c_str());
    return 2;
  }
  try {
    const auto start = Clock::now();
    parallel::MachineProfile p;
    p.machine = parallel::this_machine();
    p.machine.measured_at = utc_now();
    if (under_mpirun() && comm::backend_available("mpi")) {
      int rank = 0;
      p.backends["mpi"] = measure_mpi(s, &rank);
      if (rank != 0) return 0;  // rank 0 measures the rest and writes
    } else {
      p.backends["mpi"].reason = comm::backend_available("mpi")
                                     ? "not launched by mpirun"
                                     : "this build has no MPI (libopenmpi-dev not found)";
    }
    const int omp_threads = omp_get_max_threads();
    p.compute.push_back(measure_compute(1, s));
    if (omp_threads > 1) p.compute.push_back(measure_compute(omp_threads, s));
    omp_set_num_threads(omp_threads);
    std::fprintf(stderr, "cleave-calibrate: compute measured (1 and %d threads)\n", omp_threads);
    p.backends["shm"] = measure_threads("shm", s);
    p.backends["shm"].shared_cores = measure_shared_cores(s);
    p.backends["gloo"] = measure_threads("gloo", s);
    p.backends["nccl"].reason = !comm::backend_available("nccl")
                                    ? "this build has no NCCL (CUDA off)"
                                : !cuda_available() ? "no GPU"
                                                    : "cleave-calibrate does not measure NCCL yet";
    for (const char* name : parallel::kProfileBackends) {
      if (p.backends[name].measured) p.machine.backends.emplace_back(name);
    }
    parallel::save_machine_profile(p, output);
    std::printf("cleave-calibrate: wrote %s (%s, %lld cores, %.1f s)\n", output.c_str(),
                p.machine.cpu_model.c_str(), static_cast<long long>(p.machine.cores),
                seconds_since(start));
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "cleave-calibrate: %s\n", e.what());
    return 1;
  }
}

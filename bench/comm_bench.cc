// Collective bandwidth of cleave's comm layer against the raw library, in one run.
//
//   comm_bench gloo [SECONDS]  (SECONDS per row, default 0.5)   ranks as THREADS of this process (N
//   = 2, 4, 8), each with a raw
//                               Gloo context and a cleave gloo group over TCP on 127.0.0.1;
//                               prints BENCH <op>_<size>_np<N> cleave=<GB/s> gloo=<GB/s> ratio=..
//   comm_bench mpi [SECONDS]    under mpirun (ranks are PROCESSES): raw MPI_* calls against the
//                               cleave mpi group; prints ... cleave=<GB/s> mpi=<GB/s> ratio=..
//   comm_bench shm [SECONDS]    ranks as PROCESSES forked by this one (N = 2, 4, 8), each with a
//                               cleave gloo group on one host, so its collectives go through
//                               shared memory (NOTE [Shared-memory collectives] in
//                               src/comm/shm/shm_collectives.h); a store of files in a temporary
//                               folder stands in for the scheduler's. Prints
//                               BENCH <op>_<size>_np<N> shm=<GB/s> shm_us=<us per operation>
//                               (compare with the mpi rows of the same run); then point-to-point
//                               on 2 ranks, through shared memory (NOTE [Shared-memory
//                               point-to-point] in src/comm/shm/shm_p2p.h) against a second group
//                               made with CLEAVE_COMM_SHM=0 (Gloo's TCP pairs):
//                               BENCH PingPong_<size>_np2 shm=<GB/s> tcp=<GB/s> ratio=<shm/tcp>
//                               shm_us=.. tcp_us=..  (the mpi mode prints the same rows, cleave's
//                               mpi backend against raw MPI_Send / MPI_Recv).
//
// NOTE [Bandwidth in comm_bench]
// <size> is the buffer of one rank: the reduced tensor for AllReduce, the broadcast tensor for
// Broadcast, and the gathered output for AllGather (each rank contributes size / N), as in
// nccl-tests. Bandwidth is size / (time of one operation), the "algorithm bandwidth"; the time
// is rank 0's wall time over a timed loop closed by a barrier, best of three loops, measured
// alternately for cleave and the raw library. Each row also prints both per-operation times in
// microseconds (cleave_us, <lib>_us) for the small-message latency comparison. PingPong rows: rank
// 0 sends <size> to rank 1, which sends it back; the time is half a round trip (one message), the
// bandwidth size / that time.
#include <gloo/allgather.h>
#include <gloo/allreduce.h>
#include <gloo/barrier.h>
#include <gloo/broadcast.h>
#include <gloo/math.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/hash_store.h>
#include <gloo/rendezvous/prefix_store.h>
#include <gloo/transport/tcp/device.h>

#ifdef CLEAVE_BENCH_MPI
#include <mpi.h>
#endif

#include <fcntl.h>
#include <sys/file.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "cleave/comm/process_group.h"
#include "comm/backends.h"
#include "comm/file_store.h"

namespace {

using Clock = std::chrono::steady_clock;
using cleave::Shape;
using cleave::Tensor;
using cleave::comm::ProcessGroup;

const std::vector<std::pair<const char*, int64_t>> kSizes = {
    {"4KB", 4 << 10}, {"256KB", 256 << 10}, {"4MB", 4 << 20}, {"64MB", 64 << 20}};
const std::vector<const char*> kOps = {"AllReduce", "AllGather", "Broadcast"};
const std::vector<std::pair<const char*, int64_t>> kPingPongSizes = {{"4KB", 4 << 10},
                                                                     {"4MB", 4 << 20}};

// Iterations for a loop of about `seconds`, from the time of one operation, within [3, 1000];
// `agree` makes every rank use rank 0's count.
int iterations(const std::function<void()>& op, double seconds,
               const std::function<int(int)>& agree) {
  const auto t0 = Clock::now();
  op();
  const double one = std::chrono::duration<double>(Clock::now() - t0).count();
  return agree(static_cast<int>(std::clamp(seconds / std::max(one, 1e-7), 3.0, 1000.0)));
}

// The buffers of one row on one rank (float32), for both implementations.
struct Buffers {
  Tensor whole, part;  // AllReduce/Broadcast use `whole`; AllGather gathers `part` into `whole`
};
Buffers make_buffers(int64_t bytes, int size) {
  const int64_t n = bytes / 4;
  return {Tensor::full(Shape({n}), 1.0), Tensor::full(Shape({n / size}), 1.0)};
}

// Times `op` (called `iters` times) on every rank; `barrier` closes the loop. Returns seconds
// per operation on this rank.
double time_loop(int iters, const std::function<void()>& op, const std::function<void()>& barrier) {
  barrier();
  const auto t0 = Clock::now();
  for (int i = 0; i < iters; ++i) op();
  barrier();
  return std::chrono::duration<double>(Clock::now() - t0).count() / iters;
}

void print_row(const char* op, const char* size_name, int np, double bytes, double t_cleave,
               double t_peer, const char* peer) {
  const double bw_c = bytes / t_cleave / 1e9, bw_p = bytes / t_peer / 1e9;
  std::printf("BENCH %s_%s_np%d cleave=%.3f %s=%.3f ratio=%.2f cleave_us=%.1f %s_us=%.1f\n", op,
              size_name, np, bw_c, peer, bw_p, bw_c / bw_p, t_cleave * 1e6, peer, t_peer * 1e6);
  std::fflush(stdout);
}

// One round trip of `bytes` between ranks 0 and 1 through `send` / `recv` (tag 0).
std::function<void()> ping_pong(int rank, const Tensor& t,
                                const std::function<void(const Tensor&, int)>& send,
                                const std::function<void(const Tensor&, int)>& recv) {
  return [rank, t, send, recv] {
    if (rank == 0) {
      send(t, 1);
      recv(t, 1);
    } else {
      recv(t, 0);
      send(t, 0);
    }
  };
}

// Times the ping-pongs `a` and `b` alternately (best of three loops each) and prints the row on
// rank 0, as half round trips.
void ping_pong_row(int rank, const char* size_name, int64_t bytes, const std::function<void()>& a,
                   const char* a_name, const std::function<void()>& b, const char* b_name,
                   double seconds, const std::function<int(int)>& agree,
                   const std::function<void()>& barrier) {
  a();
  b();
  const int iters = iterations(b, seconds / 6, agree);
  double best_a = 1e30, best_b = 1e30;
  for (int rep = 0; rep < 3; ++rep) {
    best_b = std::min(best_b, time_loop(iters, b, barrier) / 2);
    best_a = std::min(best_a, time_loop(iters, a, barrier) / 2);
  }
  if (rank != 0) return;
  const double bw_a = static_cast<double>(bytes) / best_a / 1e9;
  const double bw_b = static_cast<double>(bytes) / best_b / 1e9;
  std::printf("BENCH PingPong_%s_np2 %s=%.3f %s=%.3f ratio=%.2f %s_us=%.1f %s_us=%.1f\n", size_name,
              a_name, bw_a, b_name, bw_b, bw_a / bw_b, a_name, best_a * 1e6, b_name, best_b * 1e6);
  std::fflush(stdout);
}

// ---- gloo: ranks as threads ----

void gloo_rank(int rank, int size, double seconds, gloo::rendezvous::HashStore& raw_store,
               const std::shared_ptr<cleave::comm::Store>& store) {
  gloo::transport::tcp::attr attr;
  attr.hostname = "127.0.0.1";
  auto device = gloo::transport::tcp::CreateDevice(attr);
  auto raw = std::make_shared<gloo::rendezvous::Context>(rank, size);
  gloo::rendezvous::PrefixStore prefix("raw", raw_store);
  raw->connectFullMesh(prefix, device);

  cleave::comm::ProcessGroupOptions o;
  o.store = store;
  o.rank = rank;
  o.size = size;
  auto group = cleave::comm::create_process_group(o);

  uint32_t tag = 0;
  auto raw_barrier = [&] {
    gloo::BarrierOptions b(raw);
    b.setTag(tag++);
    gloo::barrier(b);
  };
  auto agree = [&](int v) {
    int value = v;
    gloo::BroadcastOptions opts(raw);
    opts.setOutput(&value, 1);
    opts.setRoot(0);
    opts.setTag(tag++);
    gloo::broadcast(opts);
    return value;
  };
  for (const char* op : kOps) {
    for (const auto& [size_name, bytes] : kSizes) {
      Buffers c = make_buffers(bytes, size), g = make_buffers(bytes, size);
      const int64_t n = c.whole.numel();
      std::function<void()> cleave_op, raw_op;
      if (std::string(op) == "AllReduce") {
        cleave_op = [&] { group->all_reduce(c.whole); };
        raw_op = [&] {
          gloo::AllreduceOptions opts(raw);
          opts.setOutput(g.whole.data<float>(), static_cast<size_t>(n));
          opts.setReduceFunction(
              static_cast<void (*)(void*, const void*, const void*, size_t)>(&gloo::sum<float>));
          opts.setTag(tag++);
          gloo::allreduce(opts);
        };
      } else if (std::string(op) == "AllGather") {
        cleave_op = [&] { group->all_gather(c.whole, c.part); };
        raw_op = [&] {
          gloo::AllgatherOptions opts(raw);
          opts.setInput(g.part.data<float>(), static_cast<size_t>(g.part.numel()));
          opts.setOutput(g.whole.data<float>(), static_cast<size_t>(g.part.numel() * size));
          opts.setTag(tag++);
          gloo::allgather(opts);
        };
      } else {
        cleave_op = [&] { group->broadcast(c.whole, 0); };
        raw_op = [&] {
          gloo::BroadcastOptions opts(raw);
          opts.setOutput(g.whole.data<float>(), static_cast<size_t>(n));
          opts.setRoot(0);
          opts.setTag(tag++);
          gloo::broadcast(opts);
        };
      }
      raw_op();  // warm-up (connections, allocations)
      cleave_op();
      const int iters = iterations(raw_op, seconds / 6, agree);
      double best_c = 1e30, best_g = 1e30;
      for (int rep = 0; rep < 3; ++rep) {
        best_g = std::min(best_g, time_loop(iters, raw_op, raw_barrier));
        best_c = std::min(best_c, time_loop(iters, cleave_op, raw_barrier));
      }
      if (rank == 0)
        print_row(op, size_name, size, static_cast<double>(bytes), best_c, best_g, "gloo");
    }
  }
}

int run_gloo(double seconds) {
  for (int size : {2, 4, 8}) {
    gloo::rendezvous::HashStore raw_store;
    auto store = cleave::comm::make_memory_store();
    std::vector<std::thread> threads;
    for (int r = 0; r < size; ++r) {
      threads.emplace_back([&, r] { gloo_rank(r, size, seconds, raw_store, store); });
    }
    for (auto& t : threads) t.join();
  }
  return 0;
}

// ---- mpi: ranks as processes under mpirun ----

int run_mpi(double seconds) {
#ifdef CLEAVE_BENCH_MPI
  cleave::comm::ProcessGroupOptions o;
  o.backend = "mpi";
  o.rank = std::atoi(std::getenv("OMPI_COMM_WORLD_RANK"));
  o.size = std::atoi(std::getenv("OMPI_COMM_WORLD_SIZE"));
  auto group = cleave::comm::create_process_group(o);  // initialises MPI
  const int size = o.size, rank = o.rank;
  auto barrier = [] { MPI_Barrier(MPI_COMM_WORLD); };
  auto agree = [](int v) {
    MPI_Bcast(&v, 1, MPI_INT, 0, MPI_COMM_WORLD);
    return v;
  };
  for (const char* op : kOps) {
    for (const auto& [size_name, bytes] : kSizes) {
      Buffers c = make_buffers(bytes, size), m = make_buffers(bytes, size);
      const int n = static_cast<int>(c.whole.numel());
      const int part = static_cast<int>(c.part.numel());
      std::function<void()> cleave_op, raw_op;
      if (std::string(op) == "AllReduce") {
        cleave_op = [&] { group->all_reduce(c.whole); };
        raw_op = [&] {
          MPI_Allreduce(MPI_IN_PLACE, m.whole.data<float>(), n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
        };
      } else if (std::string(op) == "AllGather") {
        cleave_op = [&] { group->all_gather(c.whole, c.part); };
        raw_op = [&] {
          MPI_Allgather(m.part.data<float>(), part, MPI_FLOAT, m.whole.data<float>(), part,
                        MPI_FLOAT, MPI_COMM_WORLD);
        };
      } else {
        cleave_op = [&] { group->broadcast(c.whole, 0); };
        raw_op = [&] { MPI_Bcast(m.whole.data<float>(), n, MPI_FLOAT, 0, MPI_COMM_WORLD); };
      }
      raw_op();
      cleave_op();
      const int iters = iterations(raw_op, seconds / 6, agree);
      double best_c = 1e30, best_m = 1e30;
      for (int rep = 0; rep < 3; ++rep) {
        best_m = std::min(best_m, time_loop(iters, raw_op, barrier));
        best_c = std::min(best_c, time_loop(iters, cleave_op, barrier));
      }
      if (rank == 0)
        print_row(op, size_name, size, static_cast<double>(bytes), best_c, best_m, "mpi");
    }
  }
  if (size == 2) {
    for (const auto& [size_name, bytes] : kPingPongSizes) {
      const Tensor c = Tensor::full(Shape({bytes / 4}), 1.0),
                   m = Tensor::full(Shape({bytes / 4}), 1.0);
      const auto cleave_op = ping_pong(
          rank, c, [&](const Tensor& t, int peer) { group->send(t, peer); },
          [&](const Tensor& t, int peer) { group->recv(t, peer); });
      const auto raw_op = ping_pong(
          rank, m,
          [](const Tensor& t, int peer) {
            MPI_Send(t.raw_data(), static_cast<int>(t.numel()), MPI_FLOAT, peer, 0, MPI_COMM_WORLD);
          },
          [](const Tensor& t, int peer) {
            MPI_Recv(t.raw_data(), static_cast<int>(t.numel()), MPI_FLOAT, peer, 0, MPI_COMM_WORLD,
                     MPI_STATUS_IGNORE);
          });
      ping_pong_row(rank, size_name, bytes, cleave_op, "cleave", raw_op, "mpi", seconds, agree,
                    barrier);
    }
  }
  group.reset();
  return 0;
#else
  (void)seconds;
  std::fprintf(stderr, "comm_bench: built without MPI\n");
  return 2;
#endif
}

// ---- shm: ranks as processes of this host ----

void shm_rank(int rank, int size, double seconds, const std::string& dir) {
  cleave::comm::ProcessGroupOptions o;
  o.store = std::make_shared<cleave::comm::FileStore>(dir);
  o.rank = rank;
  o.size = size;
  auto group = cleave::comm::create_process_group(o);
  if (cleave::comm::collective_transport(*group) != "shm") {
    std::fprintf(stderr, "comm_bench shm: the group's transport is %s, not shm\n",
                 cleave::comm::collective_transport(*group).c_str());
    std::exit(1);
  }
  auto barrier = [&] { group->barrier(); };
  auto agree = [&](int v) {
    Tensor t = Tensor::full(Shape({1}), v, cleave::DType::kInt32);
    group->broadcast(t, 0);
    return t.data<int32_t>()[0];
  };
  for (const char* op : kOps) {
    for (const auto& [size_name, bytes] : kSizes) {
      Buffers c = make_buffers(bytes, size);
      std::function<void()> shm_op;
      if (std::string(op) == "AllReduce") {
        shm_op = [&] { group->all_reduce(c.whole); };
      } else if (std::string(op) == "AllGather") {
        shm_op = [&] { group->all_gather(c.whole, c.part); };
      } else {
        shm_op = [&] { group->broadcast(c.whole, 0); };
      }
      shm_op();
      const int iters = iterations(shm_op, seconds / 3, agree);
      double best = 1e30;
      for (int rep = 0; rep < 3; ++rep) best = std::min(best, time_loop(iters, shm_op, barrier));
      if (rank == 0) {
        std::printf("BENCH %s_%s_np%d shm=%.3f shm_us=%.1f\n", op, size_name, size,
                    static_cast<double>(bytes) / best / 1e9, best * 1e6);
        std::fflush(stdout);
      }
    }
  }
  if (size != 2) return;
  // The same ranks over Gloo's TCP pairs: a group made while CLEAVE_COMM_SHM=0.
  o.name = "tcp";
  setenv("CLEAVE_COMM_SHM", "0", 1);
  auto tcp = cleave::comm::create_process_group(o);
  unsetenv("CLEAVE_COMM_SHM");
  if (cleave::comm::p2p_transport(*group) != "shm" || cleave::comm::p2p_transport(*tcp) != "tcp") {
    std::fprintf(stderr, "comm_bench shm: point-to-point transports %s / %s, not shm / tcp\n",
                 cleave::comm::p2p_transport(*group).c_str(),
                 cleave::comm::p2p_transport(*tcp).c_str());
    std::exit(1);
  }
  for (const auto& [size_name, bytes] : kPingPongSizes) {
    const Tensor s = Tensor::full(Shape({bytes / 4}), 1.0),
                 t = Tensor::full(Shape({bytes / 4}), 1.0);
    auto over = [&](ProcessGroup& g, const Tensor& buf) {
      return ping_pong(
          rank, buf, [&g](const Tensor& x, int peer) { g.send(x, peer); },
          [&g](const Tensor& x, int peer) { g.recv(x, peer); });
    };
    ping_pong_row(rank, size_name, bytes, over(*group, s), "shm", over(*tcp, t), "tcp", seconds,
                  agree, barrier);
  }
}

int run_shm(double seconds) {
  for (int size : {2, 4, 8}) {
    char dir[] = "/tmp/comm_bench_store_XXXXXX";
    if (mkdtemp(dir) == nullptr) return 1;
    std::vector<pid_t> children;
    for (int r = 0; r < size; ++r) {
      const pid_t pid = fork();
      if (pid == 0) {
        int status = 0;
        try {
          shm_rank(r, size, seconds, dir);
        } catch (const std::exception& e) {
          std::fprintf(stderr, "comm_bench shm: rank %d: %s\n", r, e.what());
          status = 1;
        }
        std::fflush(stdout);
        _exit(status);
      }
      children.push_back(pid);
    }
    int failed = 0;
    for (pid_t pid : children) {
      int status = 0;
      waitpid(pid, &status, 0);
      if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) failed = 1;
    }
    std::filesystem::remove_all(dir);
    if (failed) return 1;
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "gloo";
  const double seconds = argc > 2 ? std::atof(argv[2]) : 0.5;  // per row
  if (mode == "gloo") return run_gloo(seconds);
  if (mode == "mpi") return run_mpi(seconds);
  if (mode == "shm") return run_shm(seconds);
  std::fprintf(stderr, "comm_bench: unknown mode '%s'; expected gloo, mpi or shm\n", mode.c_str());
  return 2;
}

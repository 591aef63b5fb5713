// The program the cluster tests start as scheduler and as workers (with MS_ROLE), directly or
// through cleave-run. Modes (argv[1]):
//   roundtrip [sleep_ms]  every rank sets a store key, reads every other rank's, adds to a shared
//                         counter, passes a barrier and checks the counter, all-reduces over
//                         the world and over group 'evens' (ranks 0, 2, ...); prints
//                         "rank R of N ok"; sleeps sleep_ms, then releases and exits 0.
//   hang                  joins, passes barrier 'start', prints "ready rank R", then waits for
//                         store key 'never_set', which no rank sets.
//   mpi                   under mpirun: checks the join mode and the backend, all-reduces.
//   fail R                joins, passes barrier 'start'; rank R exits with status 3, the others
//                         wait at barrier 'end'.
//   stuck R               joins, passes barrier 'start', prints "ready rank R"; rank R then sleeps
//                         (alive, heartbeating) instead of calling AllReduce, which the others
//                         call through the primitive (ops::all_reduce) and wait in.
//   ranktable             joins through RANK_TABLE_FILE + RANK_ID; all-reduces over the world
//                         (the primitive) and over group 'evens', passes a barrier; prints
//                         "rank R of N ok (rank table)", releases, exits 0. Any error: status 1.
//   stuck_barrier R       like stuck, but the others wait at barrier 'after_compute' instead.
//   slow R MS             like stuck, but rank R computes (busy CPU) for MS ms and then joins
//                         the AllReduce; every rank checks the sum, releases and exits 0.
//   error R               joins, passes barrier 'start', prints "ready rank R"; rank R then throws
//                         a cleave::Error (as a data reader would), the others wait for store key
//                         'never_set'.
//   mismatch              joins, passes barrier 'start', prints "ready rank R"; rank 0 then calls
//                         AllReduce and Broadcast on the world group, the others Broadcast and
//                         then AllReduce (a mismatched collective order).
//   recv_cycle            joins, passes barrier 'start', prints "ready rank R"; every rank then
//                         receives (tag 7) from the next rank, which never sends.
//   throw R               like error, but rank R's exception escapes from a thread
//                         (std::terminate).
//   kill R                joins, passes barrier 'start', prints "ready rank R" and the world
//                         group's transport ("transport shm"); every rank all-reduces 16 MB over
//                         the world; rank R starts it asynchronously and kills itself (SIGKILL)
//                         while it runs, so its peers wait inside the AllReduce for a dead rank.
//   kill_recv R           like kill, but prints the point-to-point transport ("p2p shm") and
//                         every other rank receives 16 MB (tag 9) from rank R, which posts the
//                         sends (isend) and kills itself while they run, so its peers wait inside
//                         a shared-memory receive from a dead rank.
//   kinds                 reads store key 'never_set' for 300 ms and adds to a key holding text
//                         through the scheduler; prints the kind of each error ("store get:
//                         unavailable", "store add: invalid argument"), releases, exits 0.
//   threads               prints its rank, local rank and the OpenMP threads of its kernels and
//                         of a thread it starts after init() (NOTE [Threads per worker]).
//   bind                  binds as a DATA_PARALLEL worker's first step does (NOTE [SPMD workers on
//                         few cores]); prints "bind rank R local L: cpu C, allowed A main, B
//                         other: SUMMARY": C the core it chose (-1: none), A and B how many cores
//                         its main thread and a thread started before the binding may run on;
//                         then "bind rank R: shared-cores slowdown X before, Y after" (X = Y:
//                         NOTE [Ranks sharing cores] counts the cores shared, not its own one).
//   checksum              all-reduces (sum, then max) float tensors of 1, 3, 1000, 65537 and
//                         1048581 elements whose values depend on the rank and the position (so
//                         that the sum order shows in the last bits), broadcasts one from the last
//                         rank, and prints "checksum rank R transport T hash H sum S": H is an
//                         FNV-1a hash of every result's bytes, S the sum of the first result.
//                         Every rank prints the same H; the same job on one host simulating the
//                         same hosts prints the same H too (scripts/netns_test.sh).
//   loop SECONDS MB       all-reduces MB megabytes of floats over the world for SECONDS (rank 0's
//                         clock decides the end through a broadcast), checking every sum, and
//                         prints "loop rank R: running (transport T)" after the first and
//                         "loop rank R: K all-reduces of MB MB ok (T s)" at the end.
// An error that ends the program is printed and reported to the job (cleave::report_failure).
#include <pthread.h>
#include <sched.h>

#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "cleave/cluster/activity.h"
#include "cleave/cluster/cluster.h"
#include "cleave/comm/group_registry.h"
#include "cleave/core/error.h"
#include "cleave/core/tensor.h"
#include "cleave/core/threads.h"
#include "cleave/runtime/collectives.h"
#include "cleave/runtime/core_binding.h"
#include "cleave/runtime/pipeline.h"
#include "comm/backends.h"

namespace {

std::vector<uint8_t> bytes(const std::string& text) { return {text.begin(), text.end()}; }

int fail(const std::string& what) {
  std::fprintf(stderr, "cluster_test_program: check failed: %s\n", what.c_str());
  return 2;
}

// All-reduces rank+1 over `group` (when a backend group exists for it) and checks the sum of the
// members' world ranks + 1.
int check_all_reduce(const std::string& group, const std::vector<int>& world_ranks) {
  std::shared_ptr<cleave::comm::ProcessGroup> process_group = cleave::comm::find_group(group);
  if (!process_group) return 0;
  int64_t expected = 0;
  for (int rank : world_ranks) expected += rank + 1;
  auto tensor = cleave::Tensor::from_vector(std::vector<int64_t>(5, cleave::get_rank() + 1));
  process_group->all_reduce(tensor);
  for (int64_t value : tensor.to_vector<int64_t>()) {
    if (value != expected) return fail("all_reduce over group '" + group + "'");
  }
  std::printf("all_reduce over '%s' ok\n", group.c_str());
  return 0;
}

int roundtrip(int sleep_ms) {
  cleave::init();
  int rank = cleave::get_rank();
  int size = cleave::get_group_size();
  auto store = cleave::cluster::job_store();
  store->set("key/" + std::to_string(rank), bytes("value-" + std::to_string(rank)));
  for (int other = 0; other < size; ++other) {
    auto value = store->get("key/" + std::to_string(other), std::chrono::seconds(10));
    if (value != bytes("value-" + std::to_string(other))) return fail("store value of a rank");
  }
  store->add("counter", 1);
  cleave::cluster::barrier("after_add");
  if (store->add("counter", 0) != size) return fail("counter after the barrier");
  if (!store->check({"key/0", "counter"})) return fail("check of set keys");
  if (store->check({"never_set"})) return fail("check of an unset key");
  std::vector<int> all(size);
  for (int r = 0; r < size; ++r) all[r] = r;
  if (int status = check_all_reduce(cleave::kWorldGroup, all)) return status;
  std::vector<int> evens;
  for (int r = 0; r < size; r += 2) evens.push_back(r);
  cleave::create_group("evens", evens);
  if (cleave::get_group_size("evens") != static_cast<int>(evens.size())) return fail("group size");
  if (cleave::get_world_rank_from_group_rank("evens", 0) != 0) return fail("group rank mapping");
  if (rank % 2 == 0) {
    if (int status = check_all_reduce("evens", evens)) return status;
  }
  std::printf("rank %d of %d ok (local rank %d)\n", rank, size, cleave::get_local_rank());
  std::fflush(stdout);
  std::this_thread::sleep_for(std::chrono::milliseconds(sleep_ms));
  cleave::release();
  return 0;
}

// Under mpirun: ranks from OpenMPI's variables, the "mpi" backend by default.
int mpi() {
  cleave::init();
  if (cleave::join_mode() != cleave::JoinMode::kMpi) return fail("join mode under mpirun");
  if (cleave::get_backend() != "mpi") return fail("default backend under mpirun");
  int size = cleave::get_group_size();
  std::vector<int> all(size);
  for (int r = 0; r < size; ++r) all[r] = r;
  if (int status = check_all_reduce(cleave::kWorldGroup, all)) return status;
  std::printf("rank %d of %d ok under mpirun (local rank %d)\n", cleave::get_rank(), size,
              cleave::get_local_rank());
  cleave::release();
  return 0;
}

int hang() {
  cleave::init();
  cleave::cluster::barrier("start");
  std::printf("ready rank %d\n", cleave::get_rank());
  std::fflush(stdout);
  cleave::cluster::job_store()->get("never_set", std::chrono::seconds(60));
  return fail("read store key 'never_set'");
}

int error_rank(int failing) {
  cleave::init();
  cleave::cluster::barrier("start");
  std::printf("ready rank %d\n", cleave::get_rank());
  std::fflush(stdout);
  if (cleave::get_rank() == failing) {
    CLEAVE_FAIL("cannot read '/no/such/MNIST_Data/train/train-images-idx3-ubyte': No such file");
  }
  cleave::cluster::job_store()->get("never_set", std::chrono::seconds(60));
  return fail("read store key 'never_set'");
}

int throw_rank(int failing) {
  cleave::init();
  cleave::cluster::barrier("start");
  std::printf("ready rank %d\n", cleave::get_rank());
  std::fflush(stdout);
  if (cleave::get_rank() == failing) {
    std::thread([] {
      throw std::runtime_error("boom in a thread of rank " + std::to_string(cleave::get_rank()));
    }).join();
  }
  cleave::cluster::job_store()->get("never_set", std::chrono::seconds(60));
  return fail("read store key 'never_set'");
}

int mismatch() {
  cleave::init();
  cleave::cluster::barrier("start");
  std::printf("ready rank %d\n", cleave::get_rank());
  std::fflush(stdout);
  auto world = cleave::comm::find_group(cleave::kWorldGroup);
  auto x = cleave::Tensor::from_vector(std::vector<float>(1000, 1.0f));
  if (cleave::get_rank() == 0) {
    world->all_reduce(x);
    world->broadcast(x, 0);
  } else {
    world->broadcast(x, 0);
    world->all_reduce(x);
  }
  return fail("a mismatched collective order returned");
}

int recv_cycle() {
  cleave::init();
  cleave::cluster::barrier("start");
  std::printf("ready rank %d\n", cleave::get_rank());
  std::fflush(stdout);
  auto world = cleave::comm::find_group(cleave::kWorldGroup);
  auto x = cleave::Tensor::from_vector(std::vector<float>(16, 0.0f));
  world->irecv(x, (cleave::get_rank() + 1) % cleave::get_group_size(), 7)->wait();
  return fail("a receive without a send returned");
}

int fail_rank(int failing) {
  cleave::init();
  cleave::cluster::barrier("start");
  std::printf("ready rank %d\n", cleave::get_rank());
  std::fflush(stdout);
  if (cleave::get_rank() == failing) {
    std::fprintf(stderr, "rank %d fails on purpose\n", failing);
    return 3;
  }
  cleave::cluster::barrier("end");
  return 0;
}

// The AllReduce primitive over the world of rank + 1, checked.
int primitive_all_reduce() {
  int size = cleave::get_group_size();
  auto x = cleave::Tensor::from_vector(std::vector<int64_t>(7, cleave::get_rank() + 1));
  cleave::Tensor y = cleave::ops::all_reduce(x);
  for (int64_t value : y.to_vector<int64_t>()) {
    if (value != size * (size + 1) / 2) return fail("primitive all_reduce sum");
  }
  return 0;
}

int rank_table() {
  cleave::init();
  if (cleave::join_mode() != cleave::JoinMode::kRankTable) return fail("join mode rank table");
  int rank = cleave::get_rank();
  int size = cleave::get_group_size();
  if (int status = primitive_all_reduce()) return status;
  cleave::cluster::barrier("rank_table");
  std::vector<int> evens;
  for (int r = 0; r < size; r += 2) evens.push_back(r);
  cleave::create_group("evens", evens);
  if (rank % 2 == 0) {
    if (int status = check_all_reduce("evens", evens)) return status;
  }
  std::printf("rank %d of %d ok (rank table, local rank %d)\n", rank, size,
              cleave::get_local_rank());
  std::fflush(stdout);
  cleave::release();
  return 0;
}

int stuck(int culprit, int compute_ms, bool barrier) {
  cleave::init();
  cleave::cluster::barrier("start");
  std::printf("ready rank %d\n", cleave::get_rank());
  std::fflush(stdout);
  if (cleave::get_rank() == culprit) {
    if (compute_ms < 0) {
      cleave::cluster::ActivityScope activity("sleeping on purpose (cluster_test_program stuck)");
      std::this_thread::sleep_for(std::chrono::seconds(60));
      return fail("slept 60 s without being stopped");
    }
    cleave::cluster::ActivityScope activity("computing on purpose (cluster_test_program slow)");
    auto end = std::chrono::steady_clock::now() + std::chrono::milliseconds(compute_ms);
    volatile double sink = 0;
    while (std::chrono::steady_clock::now() < end) {
      for (int i = 0; i < 100000; ++i) sink = sink + 1e-9 * i;
    }
  }
  if (barrier) {
    cleave::cluster::barrier("after_compute");
    if (compute_ms < 0)
      return fail("passed barrier 'after_compute' without rank " + std::to_string(culprit));
    std::printf("rank %d barrier ok\n", cleave::get_rank());
    cleave::release();
    return 0;
  }
  if (int status = primitive_all_reduce()) return status;
  if (compute_ms < 0)
    return fail("AllReduce returned although rank " + std::to_string(culprit) + " never called it");
  std::printf("rank %d all_reduce ok\n", cleave::get_rank());
  cleave::release();
  return 0;
}

// Joins, passes barrier 'start' and prints "ready rank R" and "<label> <how>", how the world
// group's traffic travels (`how`); null (after printing why) when there is no world group.
std::shared_ptr<cleave::comm::ProcessGroup> ready_world(
    const char* label, std::string (*how)(const cleave::comm::ProcessGroup&)) {
  cleave::init();
  cleave::cluster::barrier("start");
  std::shared_ptr<cleave::comm::ProcessGroup> world = cleave::comm::find_group("world");
  if (!world) {
    fail("no world group");
    return nullptr;
  }
  std::printf("ready rank %d\n%s %s\n", cleave::get_rank(), label, how(*world).c_str());
  std::fflush(stdout);
  return world;
}

int kill_in_all_reduce(int victim) {
  auto world = ready_world("transport", cleave::comm::collective_transport);
  if (!world) return 2;  // fail() printed why
  auto tensor = cleave::Tensor::full(cleave::Shape({int64_t{4} << 20}), 1.0);
  if (cleave::get_rank() == victim) {
    auto work = world->all_reduce_async(tensor);
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
    raise(SIGKILL);
  }
  world->all_reduce(tensor);
  return fail("AllReduce returned although rank " + std::to_string(victim) + " was killed in it");
}

int kill_in_recv(int victim) {
  auto world = ready_world("p2p", cleave::comm::p2p_transport);
  if (!world) return 2;  // fail() printed why
  auto tensor = cleave::Tensor::full(cleave::Shape({int64_t{4} << 20}), 1.0);
  if (cleave::get_rank() == victim) {
    std::vector<std::shared_ptr<cleave::comm::Work>> sends;
    for (int r = 0; r < world->size(); ++r) {
      if (r != victim) sends.push_back(world->isend(tensor, r, 9));
    }
    raise(SIGKILL);  // the first megabyte of each is out, the rest never comes
  }
  world->recv(tensor, victim, 9);
  return fail("a receive returned although rank " + std::to_string(victim) + " was killed in it");
}

// The kind of the cleave::Error `fn` throws, or "no error".
std::string error_kind_of(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const cleave::Error& error) {
    return cleave::error_kind_name(error.kind());
  }
  return "no error";
}

int error_kinds() {
  cleave::init();
  auto store = cleave::cluster::job_store();
  const std::string get =
      error_kind_of([&] { store->get("never_set", std::chrono::milliseconds(300)); });
  store->set("text", bytes("abc"));
  const std::string add = error_kind_of([&] { store->add("text", 1); });
  std::printf("store get: %s\nstore add: %s\n", get.c_str(), add.c_str());
  std::fflush(stdout);
  cleave::release();
  return 0;
}

// Prints the OpenMP threads this worker's kernels and a thread cleave starts would use, after
// init() (NOTE [Threads per worker] in cleave/core/threads.h).
int threads_mode() {
  cleave::init();
  int adopted = 0;
  std::thread([&] {
    cleave::threads::adopt_intra_op_threads();
    adopted = cleave::threads::intra_op_threads();
  }).join();
  std::printf("rank %d of %d: local %d of %d, %d OpenMP threads, %d in a started thread\n",
              cleave::get_rank(), cleave::get_group_size(), cleave::get_local_rank(),
              cleave::get_local_size(), cleave::threads::intra_op_threads(), adopted);
  std::fflush(stdout);
  cleave::release();
  return 0;
}

int allowed_cores(pthread_t thread) {
  cpu_set_t set;
  CPU_ZERO(&set);
  return pthread_getaffinity_np(thread, sizeof(set), &set) == 0 ? CPU_COUNT(&set) : -1;
}

int bind_mode() {
  cleave::init();
  std::atomic<bool> bound{false};
  std::atomic<int> other{-1};
  std::thread helper([&] {  // started before the binding, checked after it
    while (!bound) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    other = allowed_cores(pthread_self());
  });
  const double slowdown = cleave::runtime::shared_cores_slowdown();
  const cleave::runtime::SpmdBinding& b = cleave::runtime::bind_spmd_worker();
  bound = true;
  helper.join();
  std::printf("bind rank %d local %d: cpu %d, allowed %d main, %d other: %s\n", cleave::get_rank(),
              cleave::get_local_rank(), b.cpu, allowed_cores(pthread_self()), other.load(),
              b.summary.c_str());
  std::printf("bind rank %d: shared-cores slowdown %.3f before, %.3f after\n", cleave::get_rank(),
              slowdown, cleave::runtime::shared_cores_slowdown());
  std::fflush(stdout);
  cleave::release();
  return 0;
}

// FNV-1a over `tensor`'s bytes, continuing from `hash`.
uint64_t fnv1a(uint64_t hash, const cleave::Tensor& tensor) {
  const std::vector<float> values = tensor.to_vector<float>();
  const auto* bytes = reinterpret_cast<const unsigned char*>(values.data());
  for (size_t i = 0; i < values.size() * sizeof(float); ++i) {
    hash = (hash ^ bytes[i]) * 1099511628211ULL;
  }
  return hash;
}

// Values of rank `rank` at each position, spread over several magnitudes so that floating sums in
// another order differ in the last bits.
cleave::Tensor rank_values(int rank, int64_t count) {
  std::vector<float> values(static_cast<size_t>(count));
  uint64_t state = 0x9e3779b97f4a7c15ULL * static_cast<uint64_t>(rank + 1);
  for (float& value : values) {
    state = state * 6364136223846793005ULL + 1442695040888963407ULL;
    const double unit = static_cast<double>(state >> 11) / 9007199254740992.0;  // [0, 1)
    const double scale = (state >> 8) % 3 == 0 ? 1e3 : (state >> 8) % 3 == 1 ? 1.0 : 1e-3;
    value = static_cast<float>((unit - 0.5) * scale);
  }
  return cleave::Tensor::from_vector(values);
}

int checksum() {
  cleave::init();
  std::shared_ptr<cleave::comm::ProcessGroup> world = cleave::comm::find_group("world");
  if (!world) return fail("no world group");
  const int rank = cleave::get_rank();
  uint64_t hash = 1469598103934665603ULL;
  double first_sum = 0;
  for (int64_t count : {int64_t{1}, int64_t{3}, int64_t{1000}, int64_t{65537}, int64_t{1048581}}) {
    cleave::Tensor sum = rank_values(rank, count);
    world->all_reduce(sum);
    hash = fnv1a(hash, sum);
    if (count == 1) first_sum = sum.to_vector<float>()[0];
    cleave::Tensor max = rank_values(rank, count);
    world->all_reduce(max, cleave::comm::ReduceOp::kMax);
    hash = fnv1a(hash, max);
  }
  cleave::Tensor broadcast = rank_values(rank, 4099);
  world->broadcast(broadcast, world->size() - 1);
  hash = fnv1a(hash, broadcast);
  world->barrier();
  std::printf("checksum rank %d transport %s hash %016llx sum %.9g\n", rank,
              cleave::comm::collective_transport(*world).c_str(),
              static_cast<unsigned long long>(hash), first_sum);
  std::fflush(stdout);
  cleave::release();
  return 0;
}

int loop(double seconds, double megabytes) {
  cleave::init();
  std::shared_ptr<cleave::comm::ProcessGroup> world = cleave::comm::find_group("world");
  if (!world) return fail("no world group");
  const int rank = cleave::get_rank();
  const auto count = static_cast<int64_t>(megabytes * (1 << 20) / sizeof(float));
  const float expected = static_cast<float>(world->size() * (world->size() + 1) / 2);
  const auto start = std::chrono::steady_clock::now();
  int64_t done = 0;
  for (;;) {
    auto go_on = cleave::Tensor::from_vector(std::vector<int64_t>{
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() < seconds});
    world->broadcast(go_on, 0);
    if (go_on.to_vector<int64_t>()[0] == 0) break;
    auto tensor = cleave::Tensor::full(cleave::Shape({count}), static_cast<double>(rank + 1));
    world->all_reduce(tensor);
    const std::vector<float> sum = tensor.to_vector<float>();
    if (sum.front() != expected || sum.back() != expected) return fail("loop: a wrong sum");
    if (++done == 1) {
      std::printf("loop rank %d: running (transport %s)\n", rank,
                  cleave::comm::collective_transport(*world).c_str());
      std::fflush(stdout);
    }
  }
  std::printf("loop rank %d: %lld all-reduces of %g MB ok (%.2f s)\n", rank,
              static_cast<long long>(done), megabytes,
              std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  std::fflush(stdout);
  cleave::release();
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  std::string mode = argc > 1 ? argv[1] : "roundtrip";
  try {
    if (mode == "roundtrip") return roundtrip(argc > 2 ? std::stoi(argv[2]) : 0);
    if (mode == "threads") return threads_mode();
    if (mode == "bind") return bind_mode();
    if (mode == "hang") return hang();
    if (mode == "mpi") return mpi();
    if (mode == "fail") return fail_rank(argc > 2 ? std::stoi(argv[2]) : 0);
    if (mode == "error") return error_rank(argc > 2 ? std::stoi(argv[2]) : 0);
    if (mode == "mismatch") return mismatch();
    if (mode == "throw") return throw_rank(argc > 2 ? std::stoi(argv[2]) : 0);
    if (mode == "recv_cycle") return recv_cycle();
    if (mode == "ranktable") return rank_table();
    if (mode == "stuck") return stuck(argc > 2 ? std::stoi(argv[2]) : 0, -1, false);
    if (mode == "stuck_barrier") return stuck(argc > 2 ? std::stoi(argv[2]) : 0, -1, true);
    if (mode == "kinds") return error_kinds();
    if (mode == "checksum") return checksum();
    if (mode == "loop") {
      return loop(argc > 2 ? std::stod(argv[2]) : 10, argc > 3 ? std::stod(argv[3]) : 1);
    }
    if (mode == "kill") return kill_in_all_reduce(argc > 2 ? std::stoi(argv[2]) : 0);
    if (mode == "kill_recv") return kill_in_recv(argc > 2 ? std::stoi(argv[2]) : 0);
    if (mode == "slow") {
      return stuck(argc > 2 ? std::stoi(argv[2]) : 0, argc > 3 ? std::stoi(argv[3]) : 1000, false);
    }
  } catch (const std::exception& error) {
    std::fprintf(stderr, "%s\n", error.what());
    std::fflush(stderr);
    cleave::report_failure(error.what());
    return 1;
  }
  std::fprintf(stderr, "cluster_test_program: unknown mode '%s'\n", mode.c_str());
  return 2;
}

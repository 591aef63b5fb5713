// The OpenMPI backend: one communicator per group; blocking MPI collectives under a watchdog, and
// nonblocking point-to-point calls polled against the group's timeout (MPI itself has none).
//
// NOTE [MPI timeouts]
// OpenMPI runs its nonblocking collectives (MPI_Iallreduce, ...) through libnbc, whose algorithms
// are far slower than the tuned ones behind the blocking calls (bench/README.md, 'comm', the MPI
// rows). So collectives call the blocking functions, and a watchdog thread enforces the group's
// timeout: a blocking collective cannot be cancelled, so when one has run longer than
// options().timeout the watchdog prints one line naming the operation, the group and this rank,
// and ends the whole MPI job with MPI_Abort (every rank exits non-zero). Point-to-point operations
// stay nonblocking and polled: a receive can be withdrawn, so their timeout throws cleave::Error
// (the group is then broken) and the process goes on.
//
// NOTE [MPI initialisation]
// MPI is initialised once per process, on the first MPI group, with MPI_THREAD_MULTIPLE (the
// asynchronous point-to-point threads call MPI beside the collectives), and finalised at exit
// when cleave initialised it. A group's ranks are world ranks of MPI_COMM_WORLD: the group's
// communicator is made with MPI_Comm_create_group over options.world_ranks, so only members call.
#ifdef CLEAVE_HAVE_MPI

#include <mpi.h>
#include <unistd.h>

#include <algorithm>
#include <climits>
#include <cstdlib>
#include <mutex>
#include <thread>

#include "cleave/comm/process_group.h"
#include "cleave/core/error.h"
#include "comm/backends.h"

namespace cleave::comm {
namespace {

using Clock = std::chrono::steady_clock;

void ensure_mpi() {
  static std::once_flag once;
  std::call_once(once, [] {
    int initialized = 0;
    MPI_Initialized(&initialized);
    if (initialized) return;
    int provided = 0;
    const int rc = MPI_Init_thread(nullptr, nullptr, MPI_THREAD_MULTIPLE, &provided);
    if (rc != MPI_SUCCESS) CLEAVE_UNAVAILABLE("MPI backend: MPI_Init_thread failed (code {})", rc);
    std::atexit([] {
      int finalized = 0;
      MPI_Finalized(&finalized);
      if (!finalized) MPI_Finalize();
    });
  });
}

std::string mpi_error(int code) {
  char text[MPI_MAX_ERROR_STRING];
  int len = 0;
  MPI_Error_string(code, text, &len);
  return std::string(text, static_cast<size_t>(len));
}

void check_mpi(int code, const char* call, int peer = -1) {
  if (code != MPI_SUCCESS) throw BackendFailure(fmt::format("{}: {}", call, mpi_error(code)), peer);
}

// MPI's names are not constants (Open MPI's are addresses of globals): made on first use.
const LibraryNames<MPI_Datatype, MPI_Op>& mpi_names() {
  static const LibraryNames<MPI_Datatype, MPI_Op> names{
      .float32 = MPI_FLOAT,
      .float64 = MPI_DOUBLE,
      .int32 = MPI_INT32_T,
      .int64 = MPI_INT64_T,
      .boolean = MPI_UINT8_T,
      .sum = MPI_SUM,
      .prod = MPI_PROD,
      .max = MPI_MAX,
      .min = MPI_MIN,
  };
  return names;
}
MPI_Datatype mpi_type(DType dtype) { return mpi_names().type(dtype); }
MPI_Op mpi_op(ReduceOp op) { return mpi_names().op(op); }

// NOTE [MPI timeouts]: the operations running in blocking MPI calls and the thread that aborts
// the job when one passes its deadline. Registering costs one uncontended lock on entry and exit.
class Watchdog {
 public:
  struct Entry {
    const ProcessGroup* group;  // alive while its entry is registered
    const char* op;
    std::chrono::milliseconds timeout;
    Clock::time_point deadline;
  };

  static Watchdog& get() {
    static Watchdog* w = new Watchdog;  // never destroyed: its thread runs until the process ends
    return *w;
  }

  void add(const Entry* e) {
    std::lock_guard lock(mu_);
    entries_.push_back(e);
  }
  void remove(const Entry* e) {
    std::lock_guard lock(mu_);
    entries_.erase(std::find(entries_.begin(), entries_.end(), e));
  }

 private:
  Watchdog() {
    std::thread([this] { loop(); }).detach();
  }

  [[noreturn]] void loop() {
    for (;;) {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
      std::lock_guard lock(mu_);
      const Clock::time_point now = Clock::now();
      for (const Entry* e : entries_) {
        if (now > e->deadline) abort_job(*e);
      }
    }
  }

  [[noreturn]] static void abort_job(const Entry& e) {
    const std::string line = fmt::format(
        "cleave: {} timed out after {} ms (the group's timeout, CLEAVE_COMM_TIMEOUT_MS under "
        "cleave::init); a blocking MPI collective cannot be cancelled, so this process ends the "
        "MPI job (MPI_Abort)\n",
        fmt::format("{} on group '{}' (mpi, rank {} of {})", e.op, e.group->name(), e.group->rank(),
                    e.group->size()),
        e.timeout.count());
    std::fflush(stdout);
    std::fflush(stderr);
    [[maybe_unused]] ssize_t written = ::write(STDERR_FILENO, line.data(), line.size());
    MPI_Abort(MPI_COMM_WORLD, 1);
    std::_Exit(1);  // MPI_Abort does not return; in case it does
  }

  std::mutex mu_;
  std::vector<const Entry*> entries_;
};

int count_of(int64_t n, const char* op) {
  CLEAVE_CHECK_ARG(n <= INT_MAX, "{} (mpi): {} elements exceed MPI's count limit of {}", op, n,
                   INT_MAX);
  return static_cast<int>(n);
}

class MpiProcessGroup final : public ProcessGroup {
 public:
  explicit MpiProcessGroup(const ProcessGroupOptions& options) : ProcessGroup(options) {
    ensure_mpi();
    int world_rank = 0, world_size = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &world_rank);
    MPI_Comm_size(MPI_COMM_WORLD, &world_size);
    const int expected = this->world_rank(options.rank);
    CLEAVE_CHECK_ARG(expected == world_rank,
                     "create_process_group('{}', mpi): group rank {} is world rank {}, but this "
                     "process is MPI rank {} of {}; with the mpi backend, ranks come from mpirun",
                     options.name, options.rank, expected, world_rank, world_size);
    for (int r = 0; r < options.size; ++r) {
      CLEAVE_CHECK_ARG(this->world_rank(r) < world_size,
                       "create_process_group('{}', mpi): world rank {} does not exist; mpirun "
                       "started {} processes",
                       options.name, this->world_rank(r), world_size);
    }
    MPI_Group world_group, group;
    MPI_Comm_group(MPI_COMM_WORLD, &world_group);
    MPI_Group_incl(world_group, options.size, options_world_ranks().data(), &group);
    const int rc = MPI_Comm_create_group(MPI_COMM_WORLD, group, 0, &comm_);
    MPI_Group_free(&group);
    MPI_Group_free(&world_group);
    if (rc != MPI_SUCCESS) {
      CLEAVE_UNAVAILABLE("create_process_group('{}', mpi): {}", options.name, mpi_error(rc));
    }
    MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN);
  }

  ~MpiProcessGroup() override {
    shutdown();
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (!finalized && comm_ != MPI_COMM_NULL) MPI_Comm_free(&comm_);
  }

 protected:
  const std::vector<int>& options_world_ranks() const { return options().world_ranks; }

  // Runs the blocking MPI call `call` (named `op` in the watchdog's line) under the watchdog.
  template <typename Call>
  void blocking(const char* op, int peer, const char* mpi_name, Call&& call) {
    Watchdog::Entry entry{this, op, options().timeout, Clock::now() + options().timeout};
    Watchdog& watchdog = Watchdog::get();
    watchdog.add(&entry);
    const int code = call();
    watchdog.remove(&entry);
    check_mpi(code, mpi_name, peer);
  }

  // Polls `requests` until all complete or the group's timeout passes.
  void wait_all(std::vector<MPI_Request>& requests, const std::vector<int>& peers) {
    const auto start = Clock::now();
    const auto deadline = start + options().timeout;
    // Polls tightly for the first millisecond (small messages: MPI's own blocking calls spin
    // too), then yields the core between polls.
    const auto spin_until = start + std::chrono::milliseconds(1);
    for (size_t i = 0; i < requests.size(); ++i) {
      int done = 0;
      while (true) {
        check_mpi(MPI_Test(&requests[i], &done, MPI_STATUS_IGNORE), "MPI_Test",
                  peers.empty() ? -1 : peers[i]);
        if (done) break;
        if (Clock::now() > deadline) {
          // Point-to-point requests can be withdrawn; collectives cannot (the group is broken).
          for (size_t j = i; j < requests.size() && !peers.empty(); ++j) {
            MPI_Cancel(&requests[j]);
            MPI_Request_free(&requests[j]);
          }
          throw BackendFailure(fmt::format("timed out after {} ms", options().timeout.count()),
                               peers.empty() ? -1 : peers[i]);
        }
        if (Clock::now() > spin_until) std::this_thread::yield();
      }
    }
  }

  void do_all_reduce(const Tensor& t, ReduceOp op) override {
    const int n = count_of(t.numel(), "AllReduce");
    blocking("AllReduce", -1, "MPI_Allreduce", [&] {
      return MPI_Allreduce(MPI_IN_PLACE, t.raw_data(), n, mpi_type(t.dtype()), mpi_op(op), comm_);
    });
  }

  void do_all_gather(const Tensor& out, const Tensor& in) override {
    const int n = count_of(in.numel(), "AllGather");
    count_of(out.numel(), "AllGather");
    blocking("AllGather", -1, "MPI_Allgather", [&] {
      return MPI_Allgather(in.raw_data(), n, mpi_type(in.dtype()), out.raw_data(), n,
                           mpi_type(in.dtype()), comm_);
    });
  }

  void do_reduce_scatter(const Tensor& out, const Tensor& in, ReduceOp op) override {
    count_of(in.numel(), "ReduceScatter");
    const int n = count_of(out.numel(), "ReduceScatter");
    blocking("ReduceScatter", -1, "MPI_Reduce_scatter_block", [&] {
      return MPI_Reduce_scatter_block(in.raw_data(), out.raw_data(), n, mpi_type(in.dtype()),
                                      mpi_op(op), comm_);
    });
  }

  void do_broadcast(const Tensor& t, int root) override {
    const int n = count_of(t.numel(), "Broadcast");
    blocking("Broadcast", root, "MPI_Bcast",
             [&] { return MPI_Bcast(t.raw_data(), n, mpi_type(t.dtype()), root, comm_); });
  }

  void do_all_to_all(const Tensor& out, const Tensor& in) override {
    const int chunk = count_of(in.numel() / size(), "AlltoAll");
    blocking("AlltoAll", -1, "MPI_Alltoall", [&] {
      return MPI_Alltoall(in.raw_data(), chunk, mpi_type(in.dtype()), out.raw_data(), chunk,
                          mpi_type(in.dtype()), comm_);
    });
  }

  void do_barrier() override {
    blocking("Barrier", -1, "MPI_Barrier", [&] { return MPI_Barrier(comm_); });
  }

  void do_exchange(const std::vector<PeerBuffer>& sends,
                   const std::vector<PeerBuffer>& recvs) override {
    std::vector<MPI_Request> requests;
    std::vector<int> peers;
    for (const PeerBuffer& r : recvs) {
      if (r.tensor.nbytes() == 0) continue;
      MPI_Request req;
      check_mpi(MPI_Irecv(r.tensor.raw_data(), count_of(r.tensor.nbytes(), "Recv"), MPI_BYTE,
                          r.peer, r.tag, comm_, &req),
                "MPI_Irecv", r.peer);
      requests.push_back(req);
      peers.push_back(r.peer);
    }
    for (const PeerBuffer& s : sends) {
      if (s.tensor.nbytes() == 0) continue;
      MPI_Request req;
      check_mpi(MPI_Isend(s.tensor.raw_data(), count_of(s.tensor.nbytes(), "Send"), MPI_BYTE,
                          s.peer, s.tag, comm_, &req),
                "MPI_Isend", s.peer);
      requests.push_back(req);
      peers.push_back(s.peer);
    }
    wait_all(requests, peers);
  }

 private:
  MPI_Comm comm_ = MPI_COMM_NULL;
};

}  // namespace

std::shared_ptr<ProcessGroup> make_mpi_group(const ProcessGroupOptions& options) {
  return std::make_shared<MpiProcessGroup>(options);
}

}  // namespace cleave::comm

// NOTE [Open MPI under LeakSanitizer]
// Open MPI keeps allocations of its own to the end of the process (operator tables, PMIx and hwloc
// state), and LeakSanitizer reports them at exit, so every rank of an ASan build under mpirun
// exited 1. Suppressions (scripts/sanitizers/lsan.supp) name those libraries, but two things kept
// the reports out of their reach: at MPI_Finalize Open MPI dlclose()s its components, so a frame
// inside one is printed as "<unknown module>"; and ASan's fast unwinder stops at the first frame
// built without frame pointers, as Open MPI's are, so a stack could end before any named library.
// In a build with AddressSanitizer (and only there) this file, which every program that starts MPI
// links, therefore makes dlclose keep every library loaded (the process is about to end anyway),
// and asks for the full unwinder on malloc in a process that mpirun started (OMPI_COMM_WORLD_SIZE
// set; ASAN_OPTIONS can still override it). Every stack then names Open MPI's libraries, which the
// suppressions match, while leaks with cleave's frames alone are still reported.
#if defined(__has_feature)
#if __has_feature(address_sanitizer)
#define CLEAVE_ASAN_BUILD 1
#endif
#endif
#if defined(__SANITIZE_ADDRESS__) || defined(CLEAVE_ASAN_BUILD)
#include <fcntl.h>
#include <sys/syscall.h>

namespace {
// Whether this process started with NAME=... in its environment. ASan asks for its options before
// the C library has set up getenv's environment and before its own interceptors (read, memcmp,
// ...) work, so /proc/self/environ is read with raw system calls and compared byte by byte, in a
// function without ASan's instrumentation (its stack redzones need the shadow memory ASan has not
// mapped yet).
__attribute__((no_sanitize("address", "undefined"))) bool started_with_variable(const char* name) {
  const long fd = ::syscall(SYS_openat, AT_FDCWD, "/proc/self/environ", O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  // Entries are NUL-terminated: match NAME= right after a NUL (or at the start), one byte at a
  // time, across reads.
  size_t matched = 0;
  bool at_entry_start = true;
  bool found = false;
  char buf[4096];
  for (long got; !found && (got = ::syscall(SYS_read, fd, buf, sizeof buf)) > 0;) {
    for (long i = 0; i < got && !found; ++i) {
      const char c = buf[i];
      if (at_entry_start || matched > 0) {
        if (name[matched] == '\0') {
          found = c == '=';
          matched = 0;
        } else if (c == name[matched]) {
          ++matched;
        } else {
          matched = 0;
        }
      }
      at_entry_start = c == '\0';
    }
  }
  ::syscall(SYS_close, fd);
  return found;
}
}  // namespace

extern "C" {
__attribute__((visibility("default"))) int dlclose(void*) { return 0; }
__attribute__((visibility("default"), no_sanitize("address", "undefined"))) const char*
__asan_default_options() {
  return started_with_variable("OMPI_COMM_WORLD_SIZE") ? "fast_unwind_on_malloc=0" : "";
}
}
#endif

#endif  // CLEAVE_HAVE_MPI

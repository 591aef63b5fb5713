// Collectives through one shared-memory segment per group, for the ranks of a group that share a
// host. Internal to comm: the gloo backend uses it for its collectives when every rank of the
// group is on this host (NOTE [Shared-memory collectives]).
//
// NOTE [Shared-memory collectives]
// Gloo's TCP transport costs a socket round trip per message even on one host (a 4 KB AllReduce
// of 2 ranks took ~500 us, 4 MB ~3.4 ms). When every rank of a gloo group is on this host, its
// collectives instead go through one POSIX shared-memory segment of the group:
//
//   header   the barrier words (below), the pid of each rank, and the failure word;
//   slots    two buffers of kSlotBytes per rank ("slot r, buffer b"), written only by rank r.
//
// Vocabulary. A collective runs in *rounds*; each round moves at most one buffer's worth of data
// per rank and uses buffer b = (round number of the group) mod 2. A round is: every rank writes
// its slot's buffer b, a *barrier*, every rank reads the other ranks' slots. AllReduce has one
// more barrier per round (below). Double buffering makes one barrier per round enough: a rank
// writes buffer b again two rounds later, after the barrier of the round between, which no rank
// passes before it has finished reading buffer b.
//
//   AllReduce       the round's elements are split into `size` chunks (chunk c: elements
//                   [c * len / size, (c + 1) * len / size)); every rank copies the chunks of the
//                   others into its slot; barrier; rank c reduces chunk c over ranks 0, 1, 2, ...
//                   in that order (its own operand read in place) and writes the result into its
//                   slot's chunk c and its tensor; barrier; every rank copies the other chunks'
//                   results into its tensor. This is a reduce-scatter then an all-gather.
//   ReduceScatter   every rank copies, for each other rank j, its part of chunk j into region j
//                   of its slot; barrier; each rank reduces its own chunk in rank order.
//   AllGather, Broadcast, AlltoAll: the owner copies in, barrier, the readers copy out.
//   Barrier         one barrier.
//
// NOTE [Sum order of shared-memory collectives]
// Every element is reduced in rank order, ((x0 op x1) op x2) op ..., whatever its position, the
// element count, the round size and the world size (NOTE [Rank-order reduction] in
// comm/rank_order_reduce.h): deterministic, the same on every rank. Gloo's ring AllReduce instead
// starts each segment at a rank that depends on the segment, so for floating point with 3 or more
// ranks the two differ in the last bits (by design); with 2 ranks they are equal bit for bit, and
// for integers and max/min always. The tests check the rank order and the 2-rank equality. A
// group over several hosts (NOTE [Hierarchical collectives] in comm/gloo/gloo_process_group.cc)
// reduces each host's ranks in rank order, then the hosts' partial results in Gloo's ring order.
//
// NOTE [Rounds of shared-memory collectives]
// A round moves at most round_bytes per rank: 512 KB when the host has a core per rank, 1 MB (the
// whole buffer, kSlotBytes) when it has fewer. Smaller rounds keep the data of a round in the
// caches but cost more barriers; a barrier is ~1 us when every rank runs, but a scheduling
// round-trip when ranks share cores, so oversubscribed groups take the largest rounds. Measured on
// 2 cores shared with compilers (comm_bench shm, AllReduce 4 MB on 2 ranks, with the earlier wait
// that spun before yielding): rounds of 64 KB 10.8 ms, 128 KB 4.3 ms, 256 KB 1.9 ms, 1 MB 1.2 ms
// — under that load, the fewer barriers the better; 512 KB is a guess between cache and barrier
// count for a quiet machine, not measured there. CLEAVE_COMM_SHM_ROUND_KB (read by rank 0 when
// the group is created) overrides the size for measurements; rank 0 stores it in the segment so
// that every rank uses the same.
//
// NOTE [Waiting in shared-memory collectives]
// A barrier is a counter of arrivals and a generation word: the last rank to arrive advances the
// generation and, when some rank sleeps on it, wakes it with a futex. A rank that waits polls the
// generation, calling sched_yield() between polls, for up to kYield (1 ms), and then sleeps on the
// futex in slices of kSlice (10 ms); in an operation of several rounds on a group's communication
// thread, beside its process's computation, it sleeps at once (NOTE [Waiting beside computation]
// in comm/wait.h). It never spins without yielding: even with no more ranks than cores, the kernel
// may run two ranks on one core (other processes load the others), and a spinning rank then keeps
// its peer from arriving. Measured on 2 cores shared with compilers, AllReduce on 2 ranks
// (comm_bench shm): with a 50 us spin first, runs were bimodal — 0.5 us / 560 us at 4 KB / 4 MB
// when the ranks had a core each, 106 us / 1137 us when they shared one (a 500 us spin: ~1000 us at
// 4 KB); yielding from the first poll gave 0.9-7.3 us and 337-448 us in three runs out of three
// (Open MPI, which yields when oversubscribed, 1.1 us / 1080 us then). With more ranks than cores
// yielding matters more (the prototype lost ~8 ms per operation with 4 spinning ranks on 2 cores),
// and sleeping at once is slower still (8 ranks, AllReduce 4 MB: ~6.4 ms sleeping at once, 3.3-4.9
// ms yielding for 50 us to 2 ms first). Between slices a sleeping rank checks that the ranks it
// waits for are alive (their pids, this host's pid namespace being one condition for using the
// segment) and that no rank has declared the group failed; the group's timeout bounds the whole
// operation. A rank that fails (timeout, a dead peer) records the rank it blames in the header and
// wakes everybody, so the other ranks fail at once with the same culprit instead of waiting for
// their own timeouts.
//
// NOTE [Calls checked in shared-memory collectives]
// Each rank writes the CallRecord of the collective it calls (NOTE [Calls checked across ranks] in
// comm/call_check.h) into its word of the header before the operation's first barrier, and
// compares all ranks' records after it: "rank 1 called AllReduce(sum) of 1000 elements of Float32
// while this rank called AllReduce(sum) of 10 elements of Float32". The error is
// ErrorKind::kInvalidArgument, the program's mistake rather than a lost peer, so no process waits
// for the scheduler's verdict on a lost rank (NOTE [Failure hook] in cleave/comm/progress.h): a
// job under cleave-run ends about a second after the calls. (Over TCP, Gloo detects some of these
// cases by the size of the messages and hangs on others, which the scheduler's deadlock detection
// then names.)
//
// NOTE [No shared memory left behind]
// Rank 0 creates the segment, every rank maps it and says so through the store, and rank 0 unlinks
// it once all have answered (or on any failure of the set-up): from then on the segment lives only
// in the mappings, and the kernel frees it when the last process holding it exits, however it
// exits. The segment's memory is reserved up front (posix_fallocate), so a full /dev/shm makes
// the group fall back to TCP instead of a SIGBUS later.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "cleave/comm/process_group.h"
#include "cleave/comm/store.h"
#include "comm/call_check.h"
#include "comm/wait.h"

namespace cleave::comm {

// How the shared-memory collectives and point-to-point wait (NOTE [Waiting in shared-memory
// collectives]): poll for 1 ms, then sleep in slices of 10 ms.
constexpr WaitPolicy kShmWait{std::chrono::microseconds(1000), std::chrono::milliseconds(10)};

class ShmCollectives {
 public:
  // Bytes of one buffer of one rank's slot (NOTE [Shared-memory collectives]).
  static constexpr size_t kSlotBytes = size_t{1} << 20;
  // Larger groups stay on TCP: the segment holds 2 * kSlotBytes per rank.
  static constexpr int kMaxRanks = 64;

  // Every rank's host key (host name, boot id, IPC and pid namespaces), exchanged through `store`
  // (the group's namespace); all ranks call it and get the same vector. Empty when shared memory
  // is off (CLEAVE_COMM_SHM=0) or the group has one rank. Throws cleave::Error when a rank does
  // not answer within options.timeout.
  static std::vector<std::string> host_keys(const ProcessGroupOptions& options, Store& store);
  // Collective over `members` (ascending group ranks that share this host, this rank among them;
  // every member calls it with the same list, after host_keys). Returns null on every member when
  // there are fewer than 2 or more than kMaxRanks, or when the segment cannot be created or
  // mapped. Throws cleave::Error when a member does not answer within options.timeout.
  // `extra_bytes` (the same on every member) reserves a zeroed region after the collectives' own,
  // for point-to-point channels (comm/shm/shm_p2p.h); extra() points at it.
  static std::unique_ptr<ShmCollectives> create(const ProcessGroupOptions& options, Store& store,
                                                const std::vector<int>& members,
                                                size_t extra_bytes = 0);
  // Tests: the host key of groups created later on this thread (ranks as threads pretending to
  // be on several hosts); empty restores the real one.
  static void set_host_key_for_testing(std::string key);
  ~ShmCollectives();
  ShmCollectives(const ShmCollectives&) = delete;
  ShmCollectives& operator=(const ShmCollectives&) = delete;

  // The operations of NOTE [Collective semantics], under the same preconditions as the backend
  // hooks of ProcessGroup (checked arguments, size > 1, op not kMean). Each throws BackendFailure
  // naming the rank it blames on a timeout (options.timeout per operation), a dead peer or a
  // failure reported by another rank; the group must then not be used again.
  void all_reduce(const Tensor& tensor, ReduceOp op);
  void all_gather(const Tensor& output, const Tensor& input);
  void reduce_scatter(const Tensor& output, const Tensor& input, ReduceOp op);
  void broadcast(const Tensor& tensor, int root);
  void all_to_all(const Tensor& output, const Tensor& input);
  void barrier();
  // Records that this member gave up on the operation, blaming group rank `culprit`, and wakes the
  // other members, which then fail at once naming it (for a failure outside these collectives:
  // the leaders' exchange of NOTE [Hierarchical collectives]).
  void abandon(int culprit);
  // Throws the BackendFailure of a member that abandoned the group (see abandon), if one did.
  void throw_if_abandoned() const;
  // The region reserved by create's extra_bytes (null when none), the members' group ranks, and
  // the pid of member `member` (an index into members()).
  std::byte* extra() const { return extra_; }
  const std::vector<int>& members() const { return members_; }
  int32_t member_pid(int member) const;

 private:
  struct Header;
  ShmCollectives() = default;
  // Starts an operation: its deadline, and the call the other ranks check at its first barrier.
  void begin(Collective call, const Tensor* tensor, int64_t count, int detail);
  // Throws BackendFailure naming the first rank whose call differs from this rank's.
  void check_calls();
  // Waits at the next barrier without checking the calls.
  void wait_at_barrier();
  std::byte* slot(int rank, int buffer) const;
  // Waits until every rank has arrived at the next barrier (the first of an operation also checks
  // the calls); throws BackendFailure (see above).
  void arrive_and_wait();
  [[noreturn]] void fail(int culprit, const std::string& why);
  // The first rank (other than this one) that has not reached barrier `k` and whose process is
  // gone; -1 when none is known to be gone.
  int dead_rank_behind(uint64_t k) const;

  std::string name_;
  std::vector<int> members_;  // group rank of each member; rank_ and size_ count members
  int rank_ = 0;
  int size_ = 1;
  std::chrono::milliseconds timeout_{0};
  size_t round_bytes_ = kSlotBytes;  // per rank and round, at most kSlotBytes
  // How long a wait at a barrier of the running operation polls before it sleeps.
  std::chrono::microseconds polling_{1000};
  void* mapping_ = nullptr;
  size_t mapping_bytes_ = 0;
  Header* header_ = nullptr;
  std::byte* slots_ = nullptr;
  std::byte* extra_ = nullptr;
  bool check_call_ = false;                         // the next barrier is the operation's first
  uint64_t calls_ = 0;                              // operations begun
  uint64_t barriers_ = 0;                           // barriers this rank has passed
  uint64_t rounds_ = 0;                             // rounds run (buffer = rounds_ % 2)
  std::chrono::steady_clock::time_point deadline_;  // of the operation running
};

}  // namespace cleave::comm

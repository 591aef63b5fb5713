// Collectives through one shared-memory segment per group, for the ranks of a group that share a
// host. Internal to comm: the gloo backend uses it for its collectives when every rank of the
// group is on this host (NOTE [Shared-memory collectives]).
//
// NOTE [Shared-memory collectives]
// Gloo's TCP transport costs a socket round trip per message even on one host. When every rank of
// a gloo group is on this host, its collectives instead go through the group's shared-memory
// segment (comm/shm/shm_segment.h), whose *slots* hold two buffers of kSlotBytes per rank ("slot
// r, buffer b"), written only by rank r. A collective runs in *rounds*; each round moves at most
// one buffer's worth of data per rank and uses buffer b = (round number of the group) mod 2. A
// round is: every rank writes its slot's buffer b, a *barrier* (comm/shm/shm_barrier.h), every
// rank reads the other ranks' slots; AllReduce has one more barrier per round. Double buffering
// makes one barrier per round enough: a rank writes buffer b again two rounds later, after the
// barrier of the round between, which no rank passes before it has finished reading buffer b.
// Each collective's rounds are described where it is defined. Measurements: bench/README.md,
// 'shm'.
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
// caches but cost more barriers, and a barrier costs a scheduling round-trip when ranks share
// cores, so oversubscribed groups take the largest rounds; 512 KB is a guess between cache and
// barrier count for a quiet machine. CLEAVE_COMM_SHM_ROUND_KB (read by rank 0 when the group is
// created) overrides the size for measurements; rank 0 stores it in the segment so that every
// rank uses the same. Measurements: bench/README.md, 'shm'.
//
// NOTE [Calls checked in shared-memory collectives]
// Each rank writes the CallRecord of the collective it calls (NOTE [Calls checked across ranks] in
// comm/call_check.h) into its word of the segment before the operation's first barrier, and
// compares all ranks' records after it: "rank 1 called AllReduce(sum) of 1000 elements of Float32
// while this rank called AllReduce(sum) of 10 elements of Float32". The error is
// ErrorKind::kInvalidArgument, the program's mistake rather than a lost peer, so no process waits
// for the scheduler's verdict on a lost rank (NOTE [Failure hook] in cleave/comm/progress.h): a
// job under cleave-run ends about a second after the calls. (Over TCP, Gloo detects some of these
// cases by the size of the messages and hangs on others, which the scheduler's deadlock detection
// then names.)
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
#include "comm/shm/shm_barrier.h"
#include "comm/shm/shm_segment.h"

namespace cleave::comm {

class ShmCollectives {
 public:
  // Every rank's host key (comm/shm/shm_host.h), exchanged through `store` (the group's
  // namespace); all ranks call it and get the same vector. Empty when shared memory is off
  // (CLEAVE_COMM_SHM=0) or the group has one rank. Throws cleave::Error when a rank does not
  // answer within options.timeout.
  static std::vector<std::string> host_keys(const ProcessGroupOptions& options, Store& store);
  // Collective over `members` (ascending group ranks that share this host, after host_keys):
  // the collectives in the segment ShmSegment::create makes of these arguments; null on every
  // member when there is none.
  static std::unique_ptr<ShmCollectives> create(const ProcessGroupOptions& options, Store& store,
                                                const std::vector<int>& members,
                                                size_t extra_bytes = 0);
  // Tests: the host key of groups created later on this thread (ranks as threads pretending to
  // be on several hosts); empty restores the real one.
  static void set_host_key_for_testing(std::string key);
  ShmCollectives(const ShmCollectives&) = delete;
  ShmCollectives& operator=(const ShmCollectives&) = delete;

  // The operations of NOTE [Collective semantics], under the same preconditions as the backend
  // hooks of ProcessGroup (checked arguments, size > 1; kMean only in all_reduce, NOTE
  // [AllReduce into other buffers]). Each throws BackendFailure
  // naming the rank it blames on a timeout (options.timeout per operation), a dead peer or a
  // failure reported by another rank, and cleave::Error (kInvalidArgument) when the ranks call
  // different collectives; the group must then not be used again.
  void all_reduce(const Tensor& tensor, ReduceOp op) {
    all_reduce(std::vector<Tensor>{tensor}, std::vector<Tensor>{tensor}, op);
  }
  // The AllReduce of the concatenation of `inputs` into that of `outputs` (NOTE [AllReduce into
  // other buffers] in cleave/comm/process_group.h): buffer k of each has the same count.
  void all_reduce(const std::vector<Tensor>& outputs, const std::vector<Tensor>& inputs,
                  ReduceOp op);
  void all_gather(const Tensor& output, const Tensor& input);
  void reduce_scatter(const Tensor& output, const Tensor& input, ReduceOp op);
  void broadcast(const Tensor& tensor, int root);
  void all_to_all(const Tensor& output, const Tensor& input);
  void barrier();
  // The segment: its members, its extra region, its failure word (abandon() for a failure outside
  // these collectives: the leaders' exchange of NOTE [Hierarchical collectives]).
  ShmSegment& segment() const { return *segment_; }

 private:
  explicit ShmCollectives(std::unique_ptr<ShmSegment> segment);
  // Starts an operation: its deadline, its polling phase, and the call the other ranks check at
  // its first barrier.
  void begin(Collective call, const Tensor* tensor, int64_t count, int detail);
  // Waits until every rank has arrived at the next barrier; the first of an operation also checks
  // the calls (NOTE [Calls checked in shared-memory collectives]).
  void arrive_and_wait();
  void check_calls();
  std::byte* slot(int member, int buffer) const { return segment_->slot(member, buffer); }

  std::unique_ptr<ShmSegment> segment_;
  ShmBarrier barrier_;
  int rank_ = 0;  // this rank's member index: collectives count members, not group ranks
  int size_ = 1;
  size_t round_bytes_ = ShmSegment::kSlotBytes;  // per member and round
  // How long a wait at a barrier of the running operation polls before it sleeps.
  std::chrono::microseconds polling_{0};
  bool check_call_ = false;         // the next barrier is the operation's first
  uint64_t calls_ = 0;              // operations begun
  uint64_t rounds_ = 0;             // rounds run (buffer = rounds_ % 2)
  WaitClock::time_point deadline_;  // of the operation running
};

}  // namespace cleave::comm

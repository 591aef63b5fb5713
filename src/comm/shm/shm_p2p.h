// Point-to-point messages through shared memory, for the ranks of a group that share a host.
// Internal to comm: the gloo backend sends and receives through it to the peers on this host
// (NOTE [Shared-memory point-to-point]).
//
// NOTE [Shared-memory point-to-point]
// The members of a gloo group on this host (all ranks, or this host's members of a group over
// several hosts) share the collectives' segment (comm/shm/shm_segment.h); its extra region holds
//   bells     one wait word per member ("its doorbell"), bumped by whoever changes a channel the
//             member reads or writes;
//   channels  one per ordered pair (src, dst) of members: a byte ring of `capacity` bytes (a power
//             of two: 16 MB over the n(n-1) channels, 16 KB to 1 MB each) with two monotonic
//             counters, head (bytes written, only by src) and tail (bytes read, only by dst).
// A message is a 16-byte frame {tag, byte count} and its payload, streamed through the ring in
// pieces as space frees, so a message of any size fits any ring. A sender writes its messages to
// one peer in posting order; the receiver matches each frame to the first posted receive from that
// peer with that tag, or streams it into a heap buffer ("unexpected") that the next such receive
// takes. So equal tags match in posting order, other tags in any order (as MPI and Gloo allow),
// and a reader never stalls a ring. Why these are not the placed graphs' mailboxes: NOTE
// [Mailboxes and point-to-point rings] in cleave/comm/shm_mailbox.h. Measurements:
// bench/README.md, 'shm'.
//
// NOTE [Progress of shared-memory point-to-point]
// Every posted send and receive of the group in this process is registered with the group's
// ShmPeers. A thread waiting for one of them drives progress for all of them (under one mutex): it
// writes what fits into the outgoing rings and reads what has arrived from every peer, so two
// ranks that each send the other 64 MB at once never deadlock on full rings. Posting writes what
// fits at once. isend / irecv, whose Work may be awaited much later (a pipeline stage posts its
// send, then all-reduces, then waits), would then stall a peer while the sender is in a collective
// that needs that peer: so while such an operation is pending and no thread of the group waits, a
// progress thread of the group drives it (asleep on the doorbell, without polling). Blocking and
// exchange traffic never wakes that thread.
//
// NOTE [Failures of shared-memory point-to-point]
// A wait follows kShmWait (NOTE [Waiting in shared-memory collectives]), its polling phase
// starting again after every progress. Between slices the waiter checks the segment's failure
// word, whether the peer of its transfer has exited (its pid) and the group's timeout (from the
// start of the wait, or of the exchange); on any of them it records the failure in the segment and
// wakes every member, so the others fail at once naming the same rank. A receive whose buffer size
// differs from the matched message's fails as the program's mistake (kInvalidArgument) naming the
// tag, both sizes and the peer; the message is never truncated or padded.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "cleave/core/tensor.h"
#include "comm/shm/shm_segment.h"

namespace cleave::comm {

class ShmPeers {
 public:
  // Bytes of the region for `members` members (ShmSegment::create's extra_bytes).
  static size_t region_bytes(int members);
  // Over the region of `segment` (created with region_bytes(segment.members().size()) extra
  // bytes); `group_rank` is this rank. `segment` must outlive this.
  ShmPeers(ShmSegment& segment, int group_rank, std::chrono::milliseconds timeout);
  ~ShmPeers();
  ShmPeers(const ShmPeers&) = delete;
  ShmPeers& operator=(const ShmPeers&) = delete;

  // Whether group rank `peer` is reachable here (a member other than this rank).
  bool reaches(int peer) const;

  struct Op;
  // Registers a send to (or receive from) group rank `peer`, moves what it can at once, and
  // returns the handle to wait for. `tensor` must stay alive and untouched until then.
  // `deferred`: the caller may not wait for it soon (isend / irecv), so the group's progress
  // thread moves it while no thread waits.
  std::shared_ptr<Op> post(const Tensor& tensor, int peer, int tag, bool is_send,
                           bool deferred = false);
  // Drives progress until `op` is done; throws BackendFailure naming the peer on a dead peer, a
  // failure of another member or the timeout, and cleave::Error (kInvalidArgument) on a size
  // mismatch. After a failure every wait throws.
  void wait(const std::shared_ptr<Op>& op);
  // The same with the timeout's deadline given (the one deadline of an exchange).
  void wait(const std::shared_ptr<Op>& op, std::chrono::steady_clock::time_point deadline);
  // Messages sent through shared memory so far (for tests and benchmarks).
  uint64_t messages_sent() const;

 private:
  struct Channel;
  struct Unexpected;
  struct Peer;
  // Moves data on every channel of this member; returns whether anything moved. Under mutex_.
  bool progress();
  bool progress_send(int j);
  bool progress_recv(int j);
  void complete(Op& op);
  // Matches a receive with the message (tag, bytes) from member j; fails on a size mismatch.
  void check_size(const Op& op, uint64_t bytes) const;
  void ring_bell(int member);
  // Records the failure (first one wins), tells the other members, wakes everybody, throws.
  [[noreturn]] void fail(int culprit, const std::string& why, bool invalid_argument);
  void throw_if_failed() const;  // under mutex_
  Channel& channel(int src, int dst) const;
  // The progress thread (NOTE [Progress of shared-memory point-to-point]).
  void background();
  std::byte* ring(int src, int dst) const;

  ShmSegment& segment_;
  std::vector<int> members_;  // group rank of each member
  int me_ = 0;                // this rank's member index
  int n_ = 0;
  size_t capacity_ = 0;
  std::chrono::milliseconds timeout_;
  std::byte* region_ = nullptr;

  mutable std::mutex mutex_;
  std::vector<Peer> peers_;  // per member
  std::string failure_;      // the first failure (empty while none)
  int failure_culprit_ = -1;
  bool failure_invalid_ = false;
  uint64_t sent_ = 0;
  int waiters_ = 0;           // threads in wait()
  int deferred_pending_ = 0;  // deferred operations not done
  bool stopping_ = false;
  std::condition_variable wake_background_;
  std::thread background_;  // started by the first deferred operation that does not complete
};

}  // namespace cleave::comm

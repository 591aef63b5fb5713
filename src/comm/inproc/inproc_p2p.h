// Point-to-point messages between the ranks of an inproc group: MPI-style matching of posted
// sends and receives by source, destination and tag, and one copy from buffer to buffer.
// Internal to comm.
//
// NOTE [Inproc point-to-point]
// A posted send or receive is an *entry* (source, destination, tag, buffer, state word). Posting
// looks for the first waiting entry of the other kind with the same source, destination and tag,
// under the point-to-point mutex: if there is one, it is taken out of its queue and the poster
// copies the bytes from the send's buffer into the receive's and completes both; else the new
// entry waits in its queue for the peer's post. So messages with equal tags match in posting
// order, and a send completes once its receive is posted (as with gloo). A waiting entry gives up
// at the deadline or when its peer has departed, taking itself out of its queue; an entry already
// taken out by a peer is being copied and completes at once. Entries hold their tensors, so a
// Work dropped without wait() never leaves a dangling buffer in a queue. Point-to-point state is
// apart from the rounds', so asynchronous sends and receives run beside collectives.
#pragma once

#include <chrono>
#include <cstddef>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "cleave/core/tensor.h"
#include "comm/inproc/inproc_rendezvous.h"
#include "comm/wait.h"

namespace cleave::comm {

class InprocPointToPoint {
 public:
  struct Entry;

  // Among the ranks of `ranks`, which says who has departed; it must outlive this.
  explicit InprocPointToPoint(const InprocRendezvous& ranks);
  InprocPointToPoint(const InprocPointToPoint&) = delete;
  InprocPointToPoint& operator=(const InprocPointToPoint&) = delete;

  // Posts a send of `tensor` from rank `self` to `peer` (or a receive into it from `peer`): matches
  // it with the peer's waiting entry and copies, or queues it. The entry holds the tensor.
  std::shared_ptr<Entry> post(const Tensor& tensor, int self, int peer, int tag, bool is_send);
  // Returns once `entry` is done; throws BackendFailure naming the peer when the sizes differ, the
  // peer departed or `deadline` passed (`timeout` is the time it was given, for the message).
  void await(Entry& entry, WaitClock::time_point deadline, std::chrono::milliseconds timeout);
  // Takes a failed exchange's entry out of its queue, or waits for its copy to finish when a peer
  // took it already.
  void retract(Entry& entry);
  // Wakes the entries waiting for `rank`, which has departed, so that they fail at once.
  void wake_waiters_for(int rank);

 private:
  // Takes `entry` out of its queue; false when a peer took it out already.
  bool withdraw(const Entry& entry);

  const InprocRendezvous& ranks_;
  std::mutex mutex_;
  // Waiting entries, by destination rank, in posting order.
  std::vector<std::vector<std::shared_ptr<Entry>>> sends_to_, recvs_at_;
};

struct InprocPointToPoint::Entry {
  static constexpr uint32_t kPending = 0, kDone = 1, kFailed = 2;
  Tensor tensor;  // keeps the buffer alive while the entry is posted
  std::byte* data = nullptr;
  size_t bytes = 0;
  int src = 0, dst = 0, tag = 0;
  bool is_send = false;
  WaitWord state;     // kPending, kDone or kFailed
  std::string error;  // set before the state becomes kFailed
  int peer() const { return is_send ? dst : src; }
  const char* what() const { return is_send ? "send" : "receive"; }
};

}  // namespace cleave::comm

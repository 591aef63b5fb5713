// Point-to-point of the inproc backend (NOTE [Inproc point-to-point] in comm/inproc/inproc_p2p.h).
#include "comm/inproc/inproc_p2p.h"

#include <fmt/format.h>
#include <sched.h>

#include <algorithm>
#include <cstring>

namespace cleave::comm {
namespace {

using Entry = InprocPointToPoint::Entry;

void complete(Entry& entry, uint32_t state) {
  entry.state.value.store(state, std::memory_order_release);
  entry.state.wake();
}

void transfer(Entry& send, Entry& recv) {
  if (send.bytes != recv.bytes) {
    send.error = fmt::format(
        "this send (tag {}) has {} bytes but the matching receive on rank {} expects {} bytes; a "
        "send and its receive must have the same size",
        send.tag, send.bytes, recv.dst, recv.bytes);
    recv.error = fmt::format(
        "the matching send from rank {} (tag {}) has {} bytes but this receive expects {} bytes; "
        "a send and its receive must have the same size",
        send.src, recv.tag, send.bytes, recv.bytes);
    complete(send, Entry::kFailed);
    complete(recv, Entry::kFailed);
    return;
  }
  if (send.bytes > 0) std::memcpy(recv.data, send.data, send.bytes);
  complete(send, Entry::kDone);
  complete(recv, Entry::kDone);
}

}  // namespace

InprocPointToPoint::InprocPointToPoint(const InprocRendezvous& ranks)
    : ranks_(ranks),
      sends_to_(static_cast<size_t>(ranks.size())),
      recvs_at_(static_cast<size_t>(ranks.size())) {}

std::shared_ptr<Entry> InprocPointToPoint::post(const Tensor& tensor, int self, int peer, int tag,
                                                bool is_send) {
  auto entry = std::make_shared<Entry>();
  entry->tensor = tensor;
  entry->data = static_cast<std::byte*>(tensor.raw_data());
  entry->bytes = tensor.nbytes();
  entry->src = is_send ? self : peer;
  entry->dst = is_send ? peer : self;
  entry->tag = tag;
  entry->is_send = is_send;
  std::shared_ptr<Entry> match;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    auto& others = (is_send ? recvs_at_ : sends_to_)[static_cast<size_t>(entry->dst)];
    const auto it = std::find_if(others.begin(), others.end(), [&](const auto& e) {
      return e->src == entry->src && e->tag == tag;
    });
    if (it == others.end()) {
      (is_send ? sends_to_ : recvs_at_)[static_cast<size_t>(entry->dst)].push_back(entry);
      return entry;
    }
    match = *it;
    others.erase(it);
  }
  if (is_send) {
    transfer(*entry, *match);
  } else {
    transfer(*match, *entry);
  }
  return entry;
}

bool InprocPointToPoint::withdraw(const Entry& entry) {
  std::lock_guard<std::mutex> lock(mutex_);
  auto& queue = (entry.is_send ? sends_to_ : recvs_at_)[static_cast<size_t>(entry.dst)];
  const auto it =
      std::find_if(queue.begin(), queue.end(), [&](const auto& e) { return e.get() == &entry; });
  if (it == queue.end()) return false;
  queue.erase(it);
  return true;
}

void InprocPointToPoint::wake_waiters_for(int rank) {
  std::lock_guard<std::mutex> lock(mutex_);
  for (auto* queues : {&sends_to_, &recvs_at_}) {
    for (const auto& queue : *queues) {
      for (const auto& e : queue) {
        if (e->peer() == rank) e->state.wake();
      }
    }
  }
}

void InprocPointToPoint::await(Entry& entry, WaitClock::time_point deadline,
                               std::chrono::milliseconds timeout) {
  const int peer = entry.peer();
  // Gives up on the entry, unless a peer took it out of its queue: its copy ends at once.
  const auto give_up = [&](bool peer_departed) {
    if (!withdraw(entry)) return;
    const char* other = entry.is_send ? "receive" : "send";
    if (peer_departed) {
      entry.error = fmt::format(
          "rank {} left the group (its ProcessGroup was destroyed) without posting the {} that "
          "matches this {} (tag {}, {} bytes)",
          peer, other, entry.what(), entry.tag, entry.bytes);
    } else {
      entry.error = fmt::format(
          "the {} {} rank {} with tag {} ({} bytes) found no matching {} within the timeout of {} "
          "ms",
          entry.what(), entry.is_send ? "to" : "from", peer, entry.tag, entry.bytes, other,
          timeout.count());
    }
    // Failed, not pending: retract() then knows it is out of its queue.
    entry.state.value.store(Entry::kFailed, std::memory_order_release);
    throw BackendFailure(entry.error, peer);
  };
  const auto done = [&] {
    return entry.state.value.load(std::memory_order_acquire) != Entry::kPending;
  };
  const auto check = [&] {
    if (ranks_.departed(peer)) give_up(true);
  };
  if (!wait_until(entry.state, deadline, kInprocWait, done, check)) {
    give_up(ranks_.departed(peer));
    while (!done()) sched_yield();
  }
  if (entry.state.value.load(std::memory_order_acquire) == Entry::kFailed) {
    throw BackendFailure(entry.error, peer);
  }
}

void InprocPointToPoint::retract(Entry& entry) {
  if (withdraw(entry)) return;
  while (entry.state.value.load(std::memory_order_acquire) == Entry::kPending) sched_yield();
}

}  // namespace cleave::comm

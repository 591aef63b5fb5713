// Shared-memory mailboxes (NOTE [Shared-memory mailboxes] in cleave/comm/shm_mailbox.h).
#include "cleave/comm/shm_mailbox.h"

#include <fmt/format.h>
#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <functional>
#include <random>

#include "cleave/comm/progress.h"
#include "cleave/core/error.h"
#include "comm/shm/shm_host.h"
#include "comm/shm/shm_mapping.h"
#include "comm/wait.h"

namespace cleave::comm {
namespace {

using Clock = WaitClock;
constexpr size_t kAlign = 64;
// A slot's state: kEmpty or kFull. Only one side ever waits on it: the sender for kEmpty, the
// receiver for kFull.
constexpr uint32_t kEmpty = 0, kFull = 1;
// NOTE [Waiting for a message]: the polling phase is the mailboxes' spin.
constexpr std::chrono::milliseconds kSlice{50};

size_t align_up(size_t n) { return (n + kAlign - 1) / kAlign * kAlign; }

WaitWord& state_of(std::byte* slot) { return *reinterpret_cast<WaitWord*>(slot); }

// Sets the state to `value` and wakes the other side if it sleeps on the word.
void flip(WaitWord& word, uint32_t value) {
  word.value.store(value, std::memory_order_release);
  word.wake();
}

// Waits until `word` holds `wanted`: first a poll of up to `spin` that yields the core on every
// round (NOTE [Waiting for a message]) — skipped when this edge's waits have lately been much
// longer than that (`typical_us`, a running average it updates) — then sleeps until `deadline`.
// Returns false on timeout.
bool wait_for(WaitWord& word, uint32_t wanted, std::chrono::microseconds spin, float& typical_us,
              Clock::time_point deadline) {
  const Clock::time_point start = Clock::now();
  struct Learn {  // on every way out: the average of this edge's waits
    float& typical;
    Clock::time_point start;
    ~Learn() {
      const float us = std::chrono::duration<float, std::micro>(Clock::now() - start).count();
      typical += 0.25f * (std::min(us, 1e5f) - typical);
    }
  } learn{typical_us, start};
  const bool poll = typical_us < 2.0f * static_cast<float>(spin.count());
  const WaitPolicy policy{poll ? spin : std::chrono::microseconds(0), kSlice};
  return wait_until(
      word, deadline, policy, [&] { return word.value.load(std::memory_order_acquire) == wanted; },
      [] {});
}

// Every rank's answer to a yes/no question, as the minimum over the group (all ranks must call).
bool all_agree(ProcessGroup& group, bool yes) {
  Tensor flag = Tensor::full({1}, yes ? 1.0 : 0.0, DType::kInt64);
  group.all_reduce(flag, ReduceOp::kMin);
  return flag.data<int64_t>()[0] == 1;
}

std::string segment_name(uint64_t job, int rank) {
  return fmt::format("/cleave-{:016x}-{}", job, rank);
}

}  // namespace

std::unique_ptr<ShmMailboxes> ShmMailboxes::create(ProcessGroup& group,
                                                   const std::vector<MailboxEdge>& edges,
                                                   std::chrono::milliseconds timeout,
                                                   std::chrono::microseconds spin) {
  CLEAVE_CHECK_ARG(spin.count() >= 0, "ShmMailboxes: spin is {} us; expected >= 0", spin.count());
  const int rank = group.rank();
  // Same host: every rank's host key (comm/shm/shm_host.h) hashes alike.
  Tensor mine = Tensor::full({1}, 0.0, DType::kInt64);
  mine.data<int64_t>()[0] = static_cast<int64_t>(std::hash<std::string>{}(shm::host_key()) >> 1);
  Tensor lo = mine.clone(), hi = mine.clone();
  group.all_reduce(lo, ReduceOp::kMin);
  group.all_reduce(hi, ReduceOp::kMax);
  if (lo.data<int64_t>()[0] != hi.data<int64_t>()[0]) return nullptr;

  // One name per job and call: rank 0 draws it.
  Tensor job = Tensor::full({1}, 0.0, DType::kInt64);
  if (rank == 0)
    job.data<int64_t>()[0] = static_cast<int64_t>(std::random_device{}() >> 1) << 31 ^ getpid();
  group.broadcast(job, 0);
  const uint64_t job_id = static_cast<uint64_t>(job.data<int64_t>()[0]);

  // Each rank's inbox: the slots of the edges into it, in edge order.
  std::vector<size_t> inbox_size(static_cast<size_t>(group.size()), 0);
  std::vector<size_t> offset(edges.size());
  int max_tag = -1;
  for (size_t e = 0; e < edges.size(); ++e) {
    const MailboxEdge& edge = edges[e];
    CLEAVE_CHECK_ARG(edge.src >= 0 && edge.src < group.size() && edge.dst >= 0 &&
                         edge.dst < group.size() && edge.src != edge.dst && edge.tag >= 0,
                     "ShmMailboxes: edge {} ({} -> {}, tag {}) is not between two ranks of group "
                     "'{}'",
                     e, edge.src, edge.dst, edge.tag, group.name());
    offset[e] = inbox_size[edge.dst];
    inbox_size[edge.dst] += kAlign + align_up(edge.bytes);
    max_tag = std::max(max_tag, edge.tag);
  }

  auto boxes = std::unique_ptr<ShmMailboxes>(new ShmMailboxes());
  boxes->group_ = &group;
  boxes->group_name_ = group.name();
  boxes->rank_ = rank;
  boxes->timeout_ = timeout;
  boxes->spin_ = spin;
  boxes->slot_index_.assign(static_cast<size_t>(max_tag + 1), -1);

  auto map_segment = [&](int owner, bool create) -> std::byte* {
    const size_t size = std::max<size_t>(inbox_size[owner], kAlign);
    const std::string name = segment_name(job_id, owner);
    std::unique_ptr<shm::Mapping> mapping =
        create ? shm::Mapping::create(name, size) : shm::Mapping::open(name, size);
    if (mapping == nullptr) return nullptr;
    boxes->mappings_.push_back(std::move(mapping));
    return boxes->mappings_.back()->data();
  };

  std::byte* inbox = map_segment(rank, true);  // zero-filled: every slot starts empty
  const bool created = all_agree(group, inbox != nullptr);
  bool mapped = created;
  std::vector<std::byte*> peers(static_cast<size_t>(group.size()), nullptr);
  if (created) {
    for (const MailboxEdge& edge : edges) {
      if (edge.src != rank || peers[edge.dst] != nullptr) continue;
      peers[edge.dst] = map_segment(edge.dst, false);
      mapped = mapped && peers[edge.dst] != nullptr;
    }
    mapped = all_agree(group, mapped);  // also: every peer has mapped what it needs
  }
  if (inbox != nullptr) shm_unlink(segment_name(job_id, rank).c_str());
  if (!mapped) return nullptr;  // the destructor unmaps

  for (size_t e = 0; e < edges.size(); ++e) {
    const MailboxEdge& edge = edges[e];
    if (edge.src != rank && edge.dst != rank) continue;
    Slot s;
    s.outgoing = edge.src == rank;
    s.peer = s.outgoing ? edge.dst : edge.src;
    s.bytes = edge.bytes;
    s.tag = edge.tag;
    s.base = (s.outgoing ? peers[edge.dst] : inbox) + offset[e];
    CLEAVE_CHECK_ARG(boxes->slot_index_[edge.tag] < 0, "ShmMailboxes: tag {} is used twice",
                     edge.tag);
    boxes->slot_index_[edge.tag] = static_cast<int>(boxes->slots_.size());
    boxes->slots_.push_back(s);
  }
  return boxes;
}

ShmMailboxes::~ShmMailboxes() = default;

bool ShmMailboxes::has(int tag) const {
  return tag >= 0 && tag < static_cast<int>(slot_index_.size()) && slot_index_[tag] >= 0;
}

const ShmMailboxes::Slot& ShmMailboxes::slot(int tag, bool outgoing) const {
  CLEAVE_CHECK_ARG(has(tag), "shared-memory mailbox of group '{}' (rank {}): no edge with tag {}",
                   group_name_, rank_, tag);
  const Slot& s = slots_[slot_index_[tag]];
  CLEAVE_CHECK_ARG(s.outgoing == outgoing,
                   "shared-memory mailbox of group '{}' (rank {}): tag {} is a {} of {} bytes; "
                   "got a {}",
                   group_name_, rank_, tag, s.outgoing ? "send" : "receive", s.bytes,
                   outgoing ? "send" : "receive");
  return s;
}

const ShmMailboxes::Slot& ShmMailboxes::slot(int tag, bool outgoing, size_t bytes) const {
  const Slot& s = slot(tag, outgoing);
  CLEAVE_CHECK_ARG(s.bytes == bytes,
                   "shared-memory mailbox of group '{}' (rank {}): tag {} is a {} of {} bytes; "
                   "got a {} of {} bytes",
                   group_name_, rank_, tag, s.outgoing ? "send" : "receive", s.bytes,
                   outgoing ? "send" : "receive", bytes);
  return s;
}

void* ShmMailboxes::message(int tag) const {
  CLEAVE_CHECK_ARG(has(tag), "shared-memory mailbox of group '{}' (rank {}): no edge with tag {}",
                   group_name_, rank_, tag);
  return slots_[slot_index_[tag]].base + kAlign;
}

bool ShmMailboxes::await(const Slot& s, bool sending) const {
  WaitWord& state = state_of(s.base);
  const uint32_t wanted = sending ? kEmpty : kFull;
  if (state.value.load(std::memory_order_acquire) == wanted) {
    s.typical_wait_us *= 0.75f;  // a wait of 0
    return true;
  }
  const std::vector<int> peers = {s.peer};
  // For the stuck-rank detection.
  InFlight in_flight(*group_, sending ? "Send (shared memory)" : "Recv (shared memory)", peers,
                     s.tag);
  return wait_for(state, wanted, spin_, s.typical_wait_us, Clock::now() + timeout_);
}

void ShmMailboxes::claim(int tag) {
  const Slot& s = slot(tag, true);
  if (!await(s, true)) {
    CLEAVE_UNAVAILABLE(
        "Send on group '{}' (shared memory, rank {}, peer rank {}) failed: rank {} has not "
        "read the previous message with tag {} within {} ms",
        group_name_, rank_, s.peer, s.peer, tag, timeout_.count());
  }
}

void ShmMailboxes::send(int tag, const void* data, size_t bytes) {
  const Slot& s = slot(tag, true, bytes);
  claim(tag);
  void* area = s.base + kAlign;
  if (bytes > 0 && data != area) std::memcpy(area, data, bytes);
  flip(state_of(s.base), kFull);
}

void ShmMailboxes::recv(int tag, void* data, size_t bytes) {
  const Slot& s = slot(tag, false, bytes);
  if (!await(s, false)) {
    CLEAVE_UNAVAILABLE(
        "Recv on group '{}' (shared memory, rank {}, peer rank {}) failed: no message "
        "with tag {} within {} ms",
        group_name_, rank_, s.peer, tag, timeout_.count());
  }
  void* area = s.base + kAlign;
  if (data == area) return;  // read in place; the caller releases the slot
  if (bytes > 0) std::memcpy(data, area, bytes);
  flip(state_of(s.base), kEmpty);
}

bool ShmMailboxes::arrived(int tag) const {
  const Slot& s = slot(tag, false);
  return state_of(s.base).value.load(std::memory_order_acquire) == kFull;
}

void ShmMailboxes::release(int tag) {
  const Slot& s = slot(tag, false);
  flip(state_of(s.base), kEmpty);
}

}  // namespace cleave::comm

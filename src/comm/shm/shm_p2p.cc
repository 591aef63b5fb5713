// Shared-memory point-to-point (NOTE [Shared-memory point-to-point] in comm/shm/shm_p2p.h).
#include "comm/shm/shm_p2p.h"

#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <bit>
#include <cstring>

#include "cleave/core/error.h"
#include "comm/shm/shm_barrier.h"
#include "comm/shm/shm_host.h"
#include "comm/wait.h"

namespace cleave::comm {

using Clock = std::chrono::steady_clock;

namespace {

constexpr size_t kLine = 64;
constexpr size_t kPage = 4096;
constexpr size_t kFrameBytes = 16;
constexpr size_t kAllChannelsBytes = size_t{16} << 20;
constexpr size_t kMinCapacity = size_t{16} << 10;
constexpr size_t kMaxCapacity = size_t{1} << 20;

struct alignas(kLine) Bell {
  WaitWord word;  // bumped on every change for this member
};
static_assert(sizeof(Bell) == kLine);

struct Frame {
  int32_t tag;
  uint32_t unused;
  uint64_t bytes;
};
static_assert(sizeof(Frame) == kFrameBytes);

size_t capacity_for(int n) {
  if (n < 2) return 0;
  const size_t share = kAllChannelsBytes / (static_cast<size_t>(n) * static_cast<size_t>(n - 1));
  return std::clamp(std::bit_floor(share), kMinCapacity, kMaxCapacity);
}

// Ordered pairs of distinct members: the channels.
size_t pairs(int n) { return static_cast<size_t>(n) * static_cast<size_t>(n - 1); }

// The index of channel src -> dst (src != dst) among the pairs.
size_t pair_index(int src, int dst, int n) {
  return static_cast<size_t>(src) * static_cast<size_t>(n - 1) +
         static_cast<size_t>(dst < src ? dst : dst - 1);
}

size_t channels_offset(int n) {
  return (sizeof(Bell) * static_cast<size_t>(n) + kPage - 1) / kPage * kPage;
}

size_t rings_offset(int n) {
  return channels_offset(n) + (2 * kLine * pairs(n) + kPage - 1) / kPage * kPage;
}

}  // namespace

struct ShmPeers::Channel {
  alignas(kLine) std::atomic<uint64_t> head;  // bytes written (by the sender)
  alignas(kLine) std::atomic<uint64_t> tail;  // bytes read (by the receiver)
};

struct ShmPeers::Op {
  Tensor keep;  // holds the buffer
  std::byte* data = nullptr;
  uint64_t bytes = 0;
  int member = 0;  // the peer's member index
  int peer = 0;    // its group rank
  int tag = 0;
  bool is_send = false;
  bool deferred = false;
  bool framed = false;  // a send's frame is written
  uint64_t moved = 0;   // payload bytes written or read
  std::atomic<bool> done{false};
};

// A message that arrived before its receive was posted.
struct ShmPeers::Unexpected {
  int tag = 0;
  std::vector<std::byte> data;
  uint64_t got = 0;
};

struct ShmPeers::Peer {
  std::deque<std::shared_ptr<Op>> sends;               // to this member, in posting order
  std::deque<std::shared_ptr<Op>> recvs;               // posted, not yet matched, in posting order
  std::deque<std::shared_ptr<Unexpected>> unexpected;  // arrived, not yet matched, in order
  // The message being read from this member: into `op`, or into `heap` while unmatched.
  bool reading = false;
  int tag = 0;
  uint64_t bytes = 0;
  uint64_t got = 0;
  std::shared_ptr<Op> op;
  std::shared_ptr<Unexpected> heap;
};

size_t ShmPeers::region_bytes(int members) {
  if (members < 2) return 0;
  return rings_offset(members) + pairs(members) * capacity_for(members);
}

ShmPeers::ShmPeers(ShmSegment& segment, int group_rank, std::chrono::milliseconds timeout)
    : segment_(segment), members_(segment.members()), timeout_(timeout) {
  n_ = static_cast<int>(members_.size());
  me_ =
      static_cast<int>(std::find(members_.begin(), members_.end(), group_rank) - members_.begin());
  CLEAVE_ASSERT(me_ < n_ && segment.extra() != nullptr, "ShmPeers: no region or not a member");
  capacity_ = capacity_for(n_);
  region_ = segment.extra();
  peers_.resize(static_cast<size_t>(n_));
}

ShmPeers::~ShmPeers() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  wake_background_.notify_all();
  if (background_.joinable()) background_.join();
}

void ShmPeers::background() {
  Bell& bell = reinterpret_cast<Bell*>(region_)[me_];
  std::unique_lock<std::mutex> lock(mutex_);
  while (true) {
    wake_background_.wait(lock, [&] {
      return stopping_ || (deferred_pending_ > 0 && waiters_ == 0 && failure_.empty());
    });
    if (stopping_) return;
    const uint32_t seen = bell.word.value.load(std::memory_order_seq_cst);
    bool moved = false;
    try {
      moved = progress();
    } catch (const std::exception&) {
      // Recorded in failure_: the waiters throw it.
    }
    if (moved) continue;
    lock.unlock();
    bell.word.sleep(seen, kShmWait.slice);
    lock.lock();
  }
}

bool ShmPeers::reaches(int peer) const {
  return peer != members_[me_] &&
         std::find(members_.begin(), members_.end(), peer) != members_.end();
}

uint64_t ShmPeers::messages_sent() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return sent_;
}

ShmPeers::Channel& ShmPeers::channel(int src, int dst) const {
  return reinterpret_cast<Channel*>(region_ + channels_offset(n_))[pair_index(src, dst, n_)];
}

std::byte* ShmPeers::ring(int src, int dst) const {
  return region_ + rings_offset(n_) + pair_index(src, dst, n_) * capacity_;
}

void ShmPeers::ring_bell(int member) {
  Bell& bell = reinterpret_cast<Bell*>(region_)[member];
  bell.word.value.fetch_add(1, std::memory_order_release);
  bell.word.wake();
}

namespace {
// Copies between a ring of `capacity` bytes (a power of two) at stream position `pos` and `buf`.
void ring_write(std::byte* ring, size_t capacity, uint64_t pos, const void* buf, size_t n) {
  const size_t at = pos & (capacity - 1);
  const size_t first = std::min(n, capacity - at);
  std::memcpy(ring + at, buf, first);
  if (n > first) std::memcpy(ring, static_cast<const std::byte*>(buf) + first, n - first);
}
void ring_read(const std::byte* ring, size_t capacity, uint64_t pos, void* buf, size_t n) {
  const size_t at = pos & (capacity - 1);
  const size_t first = std::min(n, capacity - at);
  std::memcpy(buf, ring + at, first);
  if (n > first) std::memcpy(static_cast<std::byte*>(buf) + first, ring, n - first);
}
}  // namespace

void ShmPeers::check_size(const Op& op, uint64_t bytes) const {
  if (op.bytes == bytes) return;
  const std::string why = fmt::format(
      "shared memory: the message from rank {} with tag {} has {} bytes but the receive posted "
      "for it expects {} bytes; a send and its receive must have the same size",
      op.peer, op.tag, bytes, op.bytes);
  const_cast<ShmPeers*>(this)->fail(op.peer, why, true);
}

void ShmPeers::complete(Op& op) { op.done.store(true, std::memory_order_release); }

bool ShmPeers::progress_send(int j) {
  Peer& p = peers_[j];
  if (p.sends.empty()) return false;
  Channel& ch = channel(me_, j);
  std::byte* r = ring(me_, j);
  uint64_t head = ch.head.load(std::memory_order_relaxed);
  const uint64_t tail = ch.tail.load(std::memory_order_acquire);
  const uint64_t start = head;
  while (!p.sends.empty()) {
    Op& op = *p.sends.front();
    uint64_t free = capacity_ - (head - tail);
    if (!op.framed) {
      if (free < kFrameBytes) break;
      const Frame frame{op.tag, 0, op.bytes};
      ring_write(r, capacity_, head, &frame, kFrameBytes);
      head += kFrameBytes;
      free -= kFrameBytes;
      op.framed = true;
    }
    const uint64_t n = std::min(free, op.bytes - op.moved);
    if (n > 0) {
      ring_write(r, capacity_, head, op.data + op.moved, n);
      head += n;
      op.moved += n;
    }
    if (op.moved < op.bytes) break;
    ++sent_;
    complete(op);
    p.sends.pop_front();
  }
  if (head == start) return false;
  ch.head.store(head, std::memory_order_release);
  ring_bell(j);
  return true;
}

bool ShmPeers::progress_recv(int j) {
  Peer& p = peers_[j];
  Channel& ch = channel(j, me_);
  const std::byte* r = ring(j, me_);
  uint64_t tail = ch.tail.load(std::memory_order_relaxed);
  const uint64_t head = ch.head.load(std::memory_order_acquire);
  const uint64_t start = tail;
  bool completed = false;
  while (true) {
    if (!p.reading) {
      if (head - tail < kFrameBytes) break;
      Frame frame{};
      ring_read(r, capacity_, tail, &frame, kFrameBytes);
      tail += kFrameBytes;
      p.reading = true;
      p.tag = frame.tag;
      p.bytes = frame.bytes;
      p.got = 0;
      auto it = std::find_if(p.recvs.begin(), p.recvs.end(),
                             [&](const std::shared_ptr<Op>& op) { return op->tag == frame.tag; });
      if (it != p.recvs.end()) {
        p.op = *it;
        p.recvs.erase(it);
        ch.tail.store(tail, std::memory_order_release);  // the frame is consumed either way
        check_size(*p.op, frame.bytes);
      } else {
        p.heap = std::make_shared<Unexpected>();
        p.heap->tag = frame.tag;
        p.heap->data.resize(frame.bytes);
        p.unexpected.push_back(p.heap);
      }
    }
    const uint64_t n = std::min(head - tail, p.bytes - p.got);
    if (n > 0) {
      std::byte* dst = p.op ? p.op->data : p.heap->data.data();
      ring_read(r, capacity_, tail, dst + p.got, n);
      tail += n;
      p.got += n;
      if (p.heap) p.heap->got = p.got;
    }
    if (p.got < p.bytes) break;
    if (p.op) {
      p.op->moved = p.got;
      complete(*p.op);
      completed = true;
    }
    p.reading = false;
    p.op.reset();
    p.heap.reset();
  }
  if (tail == start) return completed;
  ch.tail.store(tail, std::memory_order_release);
  ring_bell(j);  // space for its sender
  return true;
}

bool ShmPeers::progress() {
  bool moved = false;
  for (int j = 0; j < n_; ++j) {
    if (j == me_) continue;
    moved = progress_send(j) | moved;
    moved = progress_recv(j) | moved;
  }
  // Other threads of this process may wait for what completed: wake them.
  if (moved) ring_bell(me_);
  return moved;
}

std::shared_ptr<ShmPeers::Op> ShmPeers::post(const Tensor& tensor, int peer, int tag, bool is_send,
                                             bool deferred) {
  auto op = std::make_shared<Op>();
  op->keep = tensor;
  op->data = static_cast<std::byte*>(tensor.raw_data());
  op->bytes = tensor.nbytes();
  op->member =
      static_cast<int>(std::find(members_.begin(), members_.end(), peer) - members_.begin());
  op->peer = peer;
  op->tag = tag;
  op->is_send = is_send;
  op->deferred = deferred;
  std::lock_guard<std::mutex> lock(mutex_);
  throw_if_failed();
  if (deferred) ++deferred_pending_;
  Peer& p = peers_[op->member];
  if (is_send) {
    p.sends.push_back(op);
  } else {
    // An earlier message with this tag that arrived unmatched is this receive's.
    auto it = std::find_if(p.unexpected.begin(), p.unexpected.end(),
                           [&](const std::shared_ptr<Unexpected>& u) { return u->tag == tag; });
    if (it == p.unexpected.end()) {
      p.recvs.push_back(op);
    } else {
      const std::shared_ptr<Unexpected> u = *it;
      p.unexpected.erase(it);
      check_size(*op, u->data.size());
      if (u->data.size() > 0) std::memcpy(op->data, u->data.data(), u->got);
      if (p.heap == u) {  // still arriving: the rest goes straight to the receive's buffer
        p.op = op;
        p.heap.reset();
      } else {
        op->moved = op->bytes;
        complete(*op);
      }
    }
  }
  progress();
  if (deferred && !op->done.load(std::memory_order_relaxed) && waiters_ == 0) {
    if (!background_.joinable()) background_ = std::thread([this] { background(); });
    wake_background_.notify_all();
  }
  return op;
}

void ShmPeers::throw_if_failed() const {
  if (failure_.empty()) return;
  if (failure_invalid_) throw Error(ErrorKind::kInvalidArgument, failure_);
  throw BackendFailure(failure_, failure_culprit_);
}

void ShmPeers::fail(int culprit, const std::string& why, bool invalid_argument) {
  if (failure_.empty()) {
    failure_ = why;
    failure_culprit_ = culprit;
    failure_invalid_ = invalid_argument;
  }
  segment_.abandon(culprit);
  for (int m = 0; m < n_; ++m) ring_bell(m);
  throw_if_failed();
  std::abort();  // unreachable: throw_if_failed throws
}

void ShmPeers::wait(const std::shared_ptr<Op>& op) { wait(op, Clock::now() + timeout_); }

void ShmPeers::wait(const std::shared_ptr<Op>& op, std::chrono::steady_clock::time_point deadline) {
  struct Waiting {
    ShmPeers& self;
    explicit Waiting(ShmPeers& s) : self(s) {
      std::lock_guard<std::mutex> lock(self.mutex_);
      ++self.waiters_;
    }
    ~Waiting() {
      std::lock_guard<std::mutex> lock(self.mutex_);
      if (--self.waiters_ == 0 && self.deferred_pending_ > 0) self.wake_background_.notify_all();
    }
  } waiting(*this);
  const auto done = [&] { return op->done.load(std::memory_order_acquire); };
  // Moves what it can; progress on any channel rings this member's bell, which restarts the
  // polling phase (NOTE [Waiting]).
  const auto moved_enough = [&] {
    std::lock_guard<std::mutex> lock(mutex_);
    if (done()) return true;
    throw_if_failed();
    progress();
    if (done()) return true;
    throw_if_failed();
    return false;
  };
  const char* what = op->is_send ? "to send" : "to receive";
  const auto check = [&] {
    std::lock_guard<std::mutex> lock(mutex_);
    try {
      segment_.throw_if_abandoned();
    } catch (const BackendFailure& e) {
      fail(e.peer, e.what(), false);
    }
    if (!shm::process_gone(segment_.member_pid(op->member))) return;
    // It may have written the rest just before it exited.
    progress();
    if (done()) return;
    fail(
        op->peer,
        fmt::format("shared memory: rank {} (pid {}) has exited while this rank waits {} the "
                    "message with tag {} ({} bytes, {} moved)",
                    op->peer, segment_.member_pid(op->member), what, op->tag, op->bytes, op->moved),
        false);
  };
  Bell& bell = reinterpret_cast<Bell*>(region_)[me_];
  const WaitPolicy policy{poll_phase(kShmWait.poll), kShmWait.slice};
  if (wait_until(bell.word, deadline, policy, moved_enough, check)) return;
  std::lock_guard<std::mutex> lock(mutex_);
  fail(op->peer,
       fmt::format("shared memory: the message with tag {} ({} bytes) that this rank waits {} {} "
                   "rank {} did not complete within the timeout of {} ms ({} bytes moved); the "
                   "peer is alive, so it did not post the matching {} or stopped",
                   op->tag, op->bytes, what, op->is_send ? "to" : "from", op->peer,
                   timeout_.count(), op->moved, op->is_send ? "receive" : "send"),
       false);
}

}  // namespace cleave::comm

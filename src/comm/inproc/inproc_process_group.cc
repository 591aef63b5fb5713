// The inproc backend: the ranks of a group are threads of this process, and a collective is
// memory copies and reductions through one object the ranks share, the group's hub. For tests
// that run ranks as threads and for simulating many ranks in one process; not for processes.
//
// NOTE [Inproc hub]
// Rank 0 makes the group's hub, enters it in a process-wide table under a fresh id and publishes
// "<pid> <id>" in the group's store namespace under "inproc/hub/<generation>"; the other ranks
// read it (bounded by the timeout) and look the hub up in the table. <generation> numbers the
// creations of a group of this name over this store (the counter "inproc/joined" over the size),
// so a group made again over the same store never finds an earlier one's hub. Every rank then
// passes the hub's first rendezvous: create_process_group returns once all ranks have joined.
// A sub-group rendezvouses the same way in its prefix view of the parent's store, and worlds over
// different stores never meet.
//
// NOTE [Inproc rounds]
// A *rendezvous* is a barrier of all ranks at the hub (NOTE [Inproc waiting]); a *round* is one
// collective. For each round a rank has a *slot* (the call it made: kind, dtype, element count,
// op, root; and its buffers' addresses) and a *staging* buffer, both double-buffered by the
// round's parity. Every round opens with a rendezvous, after which each rank checks that all
// slots describe the same call (NOTE [Calls checked across ranks] in comm/call_check.h).
//   Staged rounds (small inputs, up to kStagedBytes): each rank copies its input into its staging
//   buffer, rendezvous, then reads the others' staging buffers into its own output: one
//   rendezvous per round. This is safe because a rank writes parity p's buffers again only in
//   round k+2, after passing round k+1's rendezvous, which every rank reached only after its
//   reads of round k.
//   Direct rounds (larger inputs): ranks publish their buffers' addresses, rendezvous, read each
//   other's buffers in place, and rendezvous again before returning (the buffers belong to their
//   callers again): two rendezvous, no extra copy. A direct AllReduce splits the n elements into
//   one *chunk* per rank (chunk q = elements [n q / size, n (q + 1) / size)); rank q reduces
//   chunk q of every rank's tensor into its own tensor, rendezvous, each rank copies the other
//   chunks from their owners, rendezvous: three rendezvous and n elements of work per rank.
//
// NOTE [Inproc reduction order]
// Every element is reduced in group-rank order, rank 0's value first (NOTE [Rank-order
// reduction] in comm/rank_order_reduce.h). Staged rounds compute it on every rank, direct ones on
// the chunk's owner, with the same function, so every rank gets bit-identical results, and equal
// inputs give equal results from run to run. (For floating sums this is not the order of gloo's
// ring algorithm: the two backends may differ in the last bits.) Mean is the sum scaled by
// 1 / size, by the ProcessGroup base class.
//
// NOTE [Inproc waiting]
// Ranks are often more threads than cores (8 ranks on 2 cores), so a waiting rank polls for at
// most 50 us, giving up its core at every poll (often to the rank it waits for), then sleeps in
// slices of at most 50 ms until its operation's deadline (start + options.timeout): NOTE
// [Waiting]. A rendezvous is a counter of arrivals and a *gate* wait word (generation | aborted):
// the last rank to arrive opens the gate (the next generation) and wakes the sleepers. Each rank
// also records how many rendezvous it has reached. A rank waiting at the gate gives up when
//   - the deadline passes: it names the ranks that have not arrived, or
//   - a rank that has not arrived has *departed* (its ProcessGroup was destroyed, e.g. because its
//     thread ended with an exception): it names that rank at once, without waiting out the
//     timeout (the departed rank can never arrive).
// Giving up *aborts* the gate with a compare-and-swap that fails if the gate opened meanwhile (then
// the round goes on). The other waiters wake and fail with the same message, and a rank that
// arrives later fails at once, so no rank ever reads the buffers of a rank that has left.
//
// NOTE [Inproc point-to-point]
// A posted send or receive is an *entry* (source, destination, tag, buffer, state word). Posting
// looks for the first waiting entry of the other kind with the same source, destination and tag,
// under the hub's point-to-point mutex: if there is one, it is taken out of its queue and the
// poster copies the bytes from the send's buffer into the receive's and completes both; else the
// new entry waits in its queue for the peer's post. So messages with equal tags match in posting
// order, and a send completes once its receive is posted (as with gloo). A waiting entry gives up
// at the deadline or when its peer has departed, taking itself out of its queue; an entry already
// taken out by a peer is being copied and completes at once. Entries hold their tensors, so a
// Work dropped without wait() never leaves a dangling buffer in a queue. Point-to-point state is
// apart from the rounds', so asynchronous sends and receives run beside collectives.
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <climits>
#include <cstddef>
#include <cstring>
#include <ctime>
#include <mutex>
#include <sstream>
#include <type_traits>
#include <unordered_map>

#include "cleave/comm/process_group.h"
#include "cleave/core/dtype.h"
#include "cleave/core/error.h"
#include "comm/backends.h"
#include "comm/call_check.h"
#include "comm/rank_order_reduce.h"
#include "comm/wait.h"

namespace cleave::comm {
namespace {

using Clock = WaitClock;
using std::chrono::milliseconds;

// Inputs up to this size go through the staging buffers: one rendezvous per round instead of two
// (an AllReduce counts size x its tensor, since every rank reduces all of it).
constexpr size_t kStagedBytes = 64 << 10;
// NOTE [Inproc waiting]
constexpr WaitPolicy kWait{std::chrono::microseconds(50), std::chrono::milliseconds(50)};

std::chrono::milliseconds time_left(Clock::time_point deadline) {
  return std::max(milliseconds(1),
                  std::chrono::duration_cast<milliseconds>(deadline - Clock::now()));
}

// Elements [first, second) of n: chunk q of `size` (NOTE [Inproc rounds]).
std::pair<int64_t, int64_t> chunk(int64_t n, int q, int size) {
  return {n * q / size, n * (q + 1) / size};
}

std::string rank_list(const std::vector<int>& ranks) {
  return fmt::format("{}", fmt::join(ranks, ", "));
}

// ---- the hub ----

// What one rank publishes for a round.
struct Slot {
  CallRecord call;
  const std::byte* in = nullptr;
  std::byte* out = nullptr;
};

struct alignas(64) RankState {
  std::atomic<uint64_t> reached{0};  // rendezvous this rank has arrived at
  std::atomic<bool> departed{false};
  Slot slot[2];                       // by round parity
  std::vector<std::byte> staging[2];  // by round parity; only grows
};

// A posted send or receive (NOTE [Inproc point-to-point]).
constexpr uint32_t kPending = 0, kDone = 1, kFailed = 2;
struct Entry {
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

class Hub {
 public:
  Hub(int size, std::string group)
      : size_(size),
        group_(std::move(group)),
        ranks_(std::make_unique<RankState[]>(static_cast<size_t>(size))),
        sends_to_(static_cast<size_t>(size)),
        recvs_at_(static_cast<size_t>(size)) {}
  ~Hub();
  Hub(const Hub&) = delete;
  Hub& operator=(const Hub&) = delete;

  int size() const { return size_; }
  uint64_t id() const { return id_; }
  void set_id(uint64_t id) { id_ = id; }
  RankState& rank_state(int rank) { return ranks_[static_cast<size_t>(rank)]; }

  // Rendezvous number `number` (1, 2, ... on every rank) of `rank`: returns once every rank has
  // arrived; throws BackendFailure naming the missing ranks when one has departed or `deadline`
  // passes, or when another rank gave up on the hub earlier. `verb` says what the missing ranks
  // did not do ("join", "arrive").
  void arrive(int rank, uint64_t number, Clock::time_point deadline, milliseconds timeout,
              const char* verb);

  // `rank`'s ProcessGroup is gone: it arrives nowhere any more and posts nothing.
  void depart(int rank);

  // Point-to-point (NOTE [Inproc point-to-point]). post() matches `entry` or queues it; await()
  // returns once it is done, throwing BackendFailure (naming the peer) when it failed, its peer
  // departed or `deadline` passed. retract() takes a failed exchange's entry out of its queue, or
  // waits for its transfer to finish when a peer took it already.
  void post(const std::shared_ptr<Entry>& entry);
  void await(Entry& entry, Clock::time_point deadline, milliseconds timeout);
  void retract(Entry& entry);

 private:
  // Gate bits (NOTE [Inproc waiting]): generation in the low bits, aborted.
  static constexpr uint32_t kAborted = 1u << 30;
  static constexpr uint32_t kGenerationMask = kAborted - 1;

  // Aborts the gate while it still shows generation `before` and throws; returns when the gate
  // opened meanwhile.
  void give_up(int rank, uint32_t before, std::vector<int> missing, std::string what);
  BackendFailure aborted_failure(int rank);
  // Takes `entry` out of its queue; false when a peer took it out already.
  bool withdraw(const Entry& entry);
  static void complete(Entry& entry, uint32_t state);
  static void transfer(Entry& send, Entry& recv);

  const int size_;
  const std::string group_;
  uint64_t id_ = 0;
  std::unique_ptr<RankState[]> ranks_;

  alignas(64) std::atomic<uint64_t> arrivals_{0};
  alignas(64) WaitWord gate_;

  std::mutex abort_mutex_;
  std::string abort_reason_;
  std::vector<int> abort_missing_;
  int aborted_by_ = -1;

  std::mutex p2p_mutex_;
  // Waiting entries, by destination rank, in posting order.
  std::vector<std::vector<std::shared_ptr<Entry>>> sends_to_, recvs_at_;
};

// The process-wide table of hubs (NOTE [Inproc hub]); never destroyed, so that a hub may go
// during static destruction.
struct HubTable {
  std::mutex mutex;
  std::unordered_map<uint64_t, std::weak_ptr<Hub>> hubs;
  uint64_t next_id = 1;
};
HubTable& hub_table() {
  static auto* table = new HubTable;
  return *table;
}

Hub::~Hub() {
  HubTable& table = hub_table();
  std::lock_guard<std::mutex> lock(table.mutex);
  table.hubs.erase(id_);
}

void Hub::arrive(int rank, uint64_t number, Clock::time_point deadline, milliseconds timeout,
                 const char* verb) {
  const auto before = static_cast<uint32_t>(number - 1) & kGenerationMask;
  const auto after = static_cast<uint32_t>(number) & kGenerationMask;
  std::atomic<uint32_t>& gate = gate_.value;
  if ((gate.load(std::memory_order_acquire) & kAborted) != 0) throw aborted_failure(rank);
  rank_state(rank).reached.store(number, std::memory_order_release);
  if (arrivals_.fetch_add(1, std::memory_order_acq_rel) + 1 == number * size_) {
    // The last to arrive opens the gate.
    uint32_t seen = gate.load(std::memory_order_relaxed);
    do {
      if ((seen & kAborted) != 0) throw aborted_failure(rank);
    } while (!gate.compare_exchange_weak(seen, after, std::memory_order_acq_rel,
                                         std::memory_order_relaxed));
    gate_.wake();
    return;
  }
  // The ranks that have not reached rendezvous `number`.
  const auto missing = [&] {
    std::vector<int> ranks;
    for (int q = 0; q < size_; ++q) {
      if (rank_state(q).reached.load(std::memory_order_acquire) < number) ranks.push_back(q);
    }
    return ranks;
  };
  const auto opened = [&] { return gate.load(std::memory_order_acquire) != before; };
  const auto check = [&] {
    std::vector<int> departed = missing();
    std::erase_if(departed,
                  [&](int q) { return !rank_state(q).departed.load(std::memory_order_acquire); });
    if (departed.empty()) return;
    give_up(rank, before, std::move(departed),
            fmt::format("left the group (its ProcessGroup was destroyed, e.g. its thread ended) "
                        "without calling this operation, so it can never {}",
                        verb));
  };
  while (!wait_until(gate_, deadline, kWait, opened, check)) {
    give_up(rank, before, missing(),
            fmt::format("did not {} within the timeout of {} ms", verb, timeout.count()));
  }
  if ((gate.load(std::memory_order_acquire) & kAborted) != 0) throw aborted_failure(rank);
}

void Hub::give_up(int rank, uint32_t before, std::vector<int> missing, std::string what) {
  {
    std::lock_guard<std::mutex> lock(abort_mutex_);
    uint32_t seen = gate_.value.load(std::memory_order_acquire);
    do {
      if ((seen & kAborted) != 0) break;               // somebody else gave up first
      if ((seen & kGenerationMask) != before) return;  // the gate opened: go on
    } while (!gate_.value.compare_exchange_weak(seen, seen | kAborted, std::memory_order_acq_rel));
    if (abort_reason_.empty()) {
      abort_reason_ = fmt::format("rank(s) {} {}", rank_list(missing), what);
      abort_missing_ = std::move(missing);
      aborted_by_ = rank;
    }
  }
  gate_.wake();
  throw aborted_failure(rank);
}

BackendFailure Hub::aborted_failure(int rank) {
  std::lock_guard<std::mutex> lock(abort_mutex_);
  const bool late =
      std::find(abort_missing_.begin(), abort_missing_.end(), rank) != abort_missing_.end();
  if (late) {
    return BackendFailure(fmt::format("this rank came too late: rank {} gave up waiting for it "
                                      "earlier ({})",
                                      aborted_by_, abort_reason_),
                          aborted_by_);
  }
  return BackendFailure(abort_reason_, abort_missing_.size() == 1 ? abort_missing_[0] : -1);
}

void Hub::depart(int rank) {
  rank_state(rank).departed.store(true, std::memory_order_release);
  gate_.wake();
  // Wake the entries waiting for this rank, so that they notice.
  std::lock_guard<std::mutex> lock(p2p_mutex_);
  for (auto* queues : {&sends_to_, &recvs_at_}) {
    for (const auto& queue : *queues) {
      for (const auto& e : queue) {
        if (e->peer() == rank) e->state.wake();
      }
    }
  }
}

void Hub::complete(Entry& entry, uint32_t state) {
  entry.state.value.store(state, std::memory_order_release);
  entry.state.wake();
}

void Hub::transfer(Entry& send, Entry& recv) {
  if (send.bytes != recv.bytes) {
    send.error = fmt::format(
        "this send (tag {}) has {} bytes but the matching receive on rank {} expects {} bytes; a "
        "send and its receive must have the same size",
        send.tag, send.bytes, recv.dst, recv.bytes);
    recv.error = fmt::format(
        "the matching send from rank {} (tag {}) has {} bytes but this receive expects {} bytes; "
        "a send and its receive must have the same size",
        send.src, recv.tag, send.bytes, recv.bytes);
    complete(send, kFailed);
    complete(recv, kFailed);
    return;
  }
  if (send.bytes > 0) std::memcpy(recv.data, send.data, send.bytes);
  complete(send, kDone);
  complete(recv, kDone);
}

void Hub::post(const std::shared_ptr<Entry>& entry) {
  std::shared_ptr<Entry> match;
  {
    std::lock_guard<std::mutex> lock(p2p_mutex_);
    auto& others = (entry->is_send ? recvs_at_ : sends_to_)[static_cast<size_t>(entry->dst)];
    const auto it = std::find_if(others.begin(), others.end(), [&](const auto& e) {
      return e->src == entry->src && e->tag == entry->tag;
    });
    if (it == others.end()) {
      (entry->is_send ? sends_to_ : recvs_at_)[static_cast<size_t>(entry->dst)].push_back(entry);
      return;
    }
    match = *it;
    others.erase(it);
  }
  if (entry->is_send) {
    transfer(*entry, *match);
  } else {
    transfer(*match, *entry);
  }
}

bool Hub::withdraw(const Entry& entry) {
  std::lock_guard<std::mutex> lock(p2p_mutex_);
  auto& queue = (entry.is_send ? sends_to_ : recvs_at_)[static_cast<size_t>(entry.dst)];
  const auto it =
      std::find_if(queue.begin(), queue.end(), [&](const auto& e) { return e.get() == &entry; });
  if (it == queue.end()) return false;
  queue.erase(it);
  return true;
}

void Hub::await(Entry& entry, Clock::time_point deadline, milliseconds timeout) {
  const int peer = entry.peer();
  const auto departed = [&] { return rank_state(peer).departed.load(std::memory_order_acquire); };
  // Gives up on the entry, unless a peer took it out of its queue: its transfer ends at once.
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
    entry.state.value.store(kFailed, std::memory_order_release);
    throw BackendFailure(entry.error, peer);
  };
  const auto done = [&] { return entry.state.value.load(std::memory_order_acquire) != kPending; };
  const auto check = [&] {
    if (departed()) give_up(true);
  };
  if (!wait_until(entry.state, deadline, kWait, done, check)) {
    give_up(departed());
    while (!done()) sched_yield();  // a peer took the entry: its copy ends at once
  }
  if (entry.state.value.load(std::memory_order_acquire) == kFailed) {
    throw BackendFailure(entry.error, peer);
  }
}

void Hub::retract(Entry& entry) {
  if (withdraw(entry)) return;
  while (entry.state.value.load(std::memory_order_acquire) == kPending) sched_yield();
}

// Finds (rank 0: makes) the hub of the group `options` describes (NOTE [Inproc hub]).
std::shared_ptr<Hub> find_hub(const ProcessGroupOptions& options, Clock::time_point deadline) {
  const std::shared_ptr<Store> store = make_prefix_store(options.name, options.store);
  const int64_t generation = (store->add("inproc/joined", 1) - 1) / options.size;
  const std::string key = fmt::format("inproc/hub/{}", generation);
  HubTable& table = hub_table();
  if (options.rank == 0) {
    auto hub = std::make_shared<Hub>(options.size, options.name);
    {
      std::lock_guard<std::mutex> lock(table.mutex);
      hub->set_id(table.next_id++);
      table.hubs[hub->id()] = hub;
    }
    const std::string text = fmt::format("{} {}", getpid(), hub->id());
    store->set(key, std::vector<uint8_t>(text.begin(), text.end()));
    return hub;
  }
  std::vector<uint8_t> value;
  try {
    value = store->get(key, time_left(deadline));
  } catch (const std::exception&) {
    CLEAVE_UNAVAILABLE(
        "create_process_group('{}', inproc): rank {} of {}: rank(s) 0 did not join within the "
        "timeout of {} ms (rank 0 makes the group's hub and publishes it in the store under "
        "'{}/{}'); check that every rank of the group was started and creates the group",
        options.name, options.rank, options.size, options.timeout.count(), options.name, key);
  }
  std::istringstream text(std::string(value.begin(), value.end()));
  long pid = 0;
  uint64_t id = 0;
  text >> pid >> id;
  CLEAVE_CHECK_ARG(!text.fail() && pid == getpid(),
                   "create_process_group('{}', inproc): rank 0 published its hub as '{}' in the "
                   "store; expected '<pid> <id>' from this process ({}). The inproc backend "
                   "connects ranks that are threads of one process; for processes use gloo or mpi",
                   options.name, text.str(), getpid());
  std::shared_ptr<Hub> hub;
  {
    std::lock_guard<std::mutex> lock(table.mutex);
    const auto it = table.hubs.find(id);
    if (it != table.hubs.end()) hub = it->second.lock();
  }
  CLEAVE_CHECK_ARG(hub != nullptr,
                   "create_process_group('{}', inproc): rank {}: the hub rank 0 published (id {}) "
                   "is gone: rank 0 gave up or destroyed the group before this rank joined",
                   options.name, options.rank, id);
  CLEAVE_CHECK_ARG(hub->size() == options.size,
                   "create_process_group('{}', inproc): rank 0 made the group with {} ranks but "
                   "rank {} was given size {}; every rank must pass the same size",
                   options.name, hub->size(), options.rank, options.size);
  return hub;
}

// ---- the group ----

class InprocProcessGroup final : public ProcessGroup {
 public:
  explicit InprocProcessGroup(const ProcessGroupOptions& options) : ProcessGroup(options) {
    if (options.size == 1) return;
    CLEAVE_CHECK_ARG(options.store != nullptr,
                     "create_process_group('{}', inproc): a rendezvous store is required "
                     "(comm::make_memory_store() for ranks as threads)",
                     options.name);
    const Clock::time_point deadline = Clock::now() + options.timeout;
    hub_ = find_hub(options, deadline);
    ins_.resize(static_cast<size_t>(options.size));
    try {
      hub_->arrive(options.rank, ++rendezvous_, deadline, options.timeout, "join");
    } catch (const BackendFailure& e) {
      CLEAVE_UNAVAILABLE(
          "create_process_group('{}', inproc): rank {} of {}: {}; check that every rank of the "
          "group was started and creates the group",
          options.name, options.rank, options.size, e.what());
    }
  }

  ~InprocProcessGroup() override {
    shutdown();
    if (hub_) hub_->depart(rank());
  }

 protected:
  void do_all_reduce(const Tensor& t, ReduceOp op) override {
    const CallRecord call =
        call_record(Collective::kAllReduce, t.dtype(), t.numel(), static_cast<int>(op));
    auto* data = static_cast<std::byte*>(t.raw_data());
    const size_t bytes = t.nbytes(), element = dtype_size(t.dtype());
    if (bytes * static_cast<size_t>(size()) <= kStagedBytes) {
      open_round(call, data, data, data, bytes);
      for (int q = 0; q < size(); ++q) ins_[static_cast<size_t>(q)] = staged(q);
      reduce_in_rank_order(t.dtype(), op, ins_, t.numel(), data);
      return;
    }
    open_round(call, data, data);
    const auto [lo, hi] = chunk(t.numel(), rank(), size());
    for (int q = 0; q < size(); ++q) ins_[static_cast<size_t>(q)] = slot(q).out + lo * element;
    reduce_in_rank_order(t.dtype(), op, ins_, hi - lo, data + lo * element);
    rendezvous();
    for (int q = 0; q < size(); ++q) {
      if (q == rank()) continue;
      const auto [first, last] = chunk(t.numel(), q, size());
      std::memcpy(data + first * element, slot(q).out + first * element,
                  static_cast<size_t>(last - first) * element);
    }
    rendezvous();
  }

  void do_all_gather(const Tensor& output, const Tensor& input) override {
    const CallRecord call = call_record(Collective::kAllGather, input.dtype(), input.numel());
    const auto* in = static_cast<const std::byte*>(input.raw_data());
    auto* out = static_cast<std::byte*>(output.raw_data());
    const size_t bytes = input.nbytes();
    const bool staged_round = bytes <= kStagedBytes;
    staged_round ? open_round(call, in, out, in, bytes) : open_round(call, in, out);
    for (int q = 0; q < size(); ++q) {
      std::memcpy(out + q * bytes, staged_round ? staged(q) : slot(q).in, bytes);
    }
    if (!staged_round) rendezvous();
  }

  void do_reduce_scatter(const Tensor& output, const Tensor& input, ReduceOp op) override {
    const CallRecord call = call_record(Collective::kReduceScatter, input.dtype(), output.numel(),
                                        static_cast<int>(op));
    const auto* in = static_cast<const std::byte*>(input.raw_data());
    auto* out = static_cast<std::byte*>(output.raw_data());
    const size_t offset = output.nbytes() * static_cast<size_t>(rank());
    const bool staged_round = input.nbytes() <= kStagedBytes;
    staged_round ? open_round(call, in, out, in, input.nbytes()) : open_round(call, in, out);
    for (int q = 0; q < size(); ++q) {
      ins_[static_cast<size_t>(q)] = (staged_round ? staged(q) : slot(q).in) + offset;
    }
    reduce_in_rank_order(output.dtype(), op, ins_, output.numel(), out);
    if (!staged_round) rendezvous();
  }

  void do_broadcast(const Tensor& t, int root) override {
    const CallRecord call = call_record(Collective::kBroadcast, t.dtype(), t.numel(), root);
    auto* data = static_cast<std::byte*>(t.raw_data());
    const size_t bytes = t.nbytes();
    const bool staged_round = bytes <= kStagedBytes;
    if (staged_round) {
      open_round(call, data, data, rank() == root ? data : nullptr, bytes);
    } else {
      open_round(call, data, data);
    }
    if (rank() != root) std::memcpy(data, staged_round ? staged(root) : slot(root).in, bytes);
    if (!staged_round) rendezvous();
  }

  void do_all_to_all(const Tensor& output, const Tensor& input) override {
    const CallRecord call = call_record(Collective::kAllToAll, input.dtype(), input.numel());
    const auto* in = static_cast<const std::byte*>(input.raw_data());
    auto* out = static_cast<std::byte*>(output.raw_data());
    const size_t part = input.nbytes() / static_cast<size_t>(size());
    const size_t offset = part * static_cast<size_t>(rank());
    const bool staged_round = input.nbytes() <= kStagedBytes;
    staged_round ? open_round(call, in, out, in, input.nbytes()) : open_round(call, in, out);
    for (int q = 0; q < size(); ++q) {
      std::memcpy(out + q * part, (staged_round ? staged(q) : slot(q).in) + offset, part);
    }
    if (!staged_round) rendezvous();
  }

  void do_barrier() override { open_round(CallRecord{}, nullptr, nullptr); }

  void do_exchange(const std::vector<PeerBuffer>& sends,
                   const std::vector<PeerBuffer>& recvs) override {
    const Clock::time_point deadline = Clock::now() + options().timeout;
    std::vector<std::shared_ptr<Entry>> posted;
    posted.reserve(sends.size() + recvs.size());
    for (const PeerBuffer& s : sends) posted.push_back(post(s.tensor, s.peer, s.tag, true));
    for (const PeerBuffer& r : recvs) posted.push_back(post(r.tensor, r.peer, r.tag, false));
    try {
      for (const auto& entry : posted) hub_->await(*entry, deadline, options().timeout);
    } catch (...) {
      // No entry may outlive the call in a queue: the caller's buffers are its own again.
      for (const auto& entry : posted) hub_->retract(*entry);
      throw;
    }
  }

  std::function<void()> do_post(const Tensor& tensor, int peer, int tag, bool is_send) override {
    std::shared_ptr<Entry> entry = post(tensor, peer, tag, is_send);
    return [hub = hub_, entry, timeout = options().timeout] {
      hub->await(*entry, Clock::now() + timeout, timeout);
    };
  }

 private:
  // Opens a round (NOTE [Inproc rounds]): publishes this rank's call and buffers, copies
  // `staged_bytes` from `stage` (when not null) into its staging buffer, passes the round's first
  // rendezvous and checks that every rank made the same call.
  void open_round(const CallRecord& call, const std::byte* in, std::byte* out,
                  const std::byte* stage = nullptr, size_t staged_bytes = 0) {
    deadline_ = Clock::now() + options().timeout;
    parity_ = static_cast<int>(round_++ & 1);
    RankState& mine = hub_->rank_state(rank());
    mine.slot[parity_] = Slot{call, in, out};
    if (stage != nullptr) {
      std::vector<std::byte>& staging = mine.staging[parity_];
      if (staging.size() < staged_bytes) staging.resize(staged_bytes);
      if (staged_bytes > 0) std::memcpy(staging.data(), stage, staged_bytes);
    }
    rendezvous();
    // NOTE [Calls checked across ranks]
    const int q =
        first_mismatch(call, size(), [&](int r) -> const CallRecord& { return slot(r).call; });
    if (q >= 0) {
      throw BackendFailure(mismatch_message(q, slot(q).call, call, CallWording::kInproc), q);
    }
  }

  void rendezvous() { hub_->arrive(rank(), ++rendezvous_, deadline_, options().timeout, "arrive"); }

  const Slot& slot(int q) const { return hub_->rank_state(q).slot[parity_]; }
  const std::byte* staged(int q) const { return hub_->rank_state(q).staging[parity_].data(); }

  std::shared_ptr<Entry> post(const Tensor& tensor, int peer, int tag, bool is_send) {
    auto entry = std::make_shared<Entry>();
    entry->tensor = tensor;
    entry->data = static_cast<std::byte*>(tensor.raw_data());
    entry->bytes = tensor.nbytes();
    entry->src = is_send ? rank() : peer;
    entry->dst = is_send ? peer : rank();
    entry->tag = tag;
    entry->is_send = is_send;
    hub_->post(entry);
    return entry;
  }

  std::shared_ptr<Hub> hub_;
  // Round state: touched only by the operation running (ProcessGroup runs one at a time).
  uint64_t round_ = 0;       // rounds opened
  uint64_t rendezvous_ = 0;  // rendezvous passed, the join included
  int parity_ = 0;           // of the current round
  Clock::time_point deadline_;
  std::vector<const std::byte*> ins_;  // the inputs of a reduction, by rank
};

}  // namespace

std::shared_ptr<ProcessGroup> make_inproc_group(const ProcessGroupOptions& options) {
  return std::make_shared<InprocProcessGroup>(options);
}

}  // namespace cleave::comm

// The inproc backend: the ranks of a group are threads of this process, and a collective is
// memory copies and reductions through one object the ranks share, the group's hub
// (comm/inproc/inproc_hub.h). For tests that run ranks as threads and for simulating many ranks
// in one process; not for processes. This file holds the group and its collectives; the
// rendezvous (inproc_rendezvous.h) and point-to-point (inproc_p2p.h) are the hub's.
//
// NOTE [Inproc rounds]
// A *rendezvous* is a barrier of all ranks at the hub (NOTE [Inproc waiting]); a *round* is one
// collective. For each round a rank has a *slot* (the call it made: kind, dtype, element count,
// op, root; and its buffers' addresses) and a *staging* buffer, both double-buffered by the
// round's parity. Every round opens with a rendezvous, after which each rank checks that all
// slots describe the same call (NOTE [Calls checked across ranks] in comm/call_check.h).
//   Staged rounds (inputs up to kStagedBytes): each rank copies its input into its staging buffer,
//   rendezvous, then reads the others' staging buffers into its own output. Parity makes one
//   rendezvous enough: a rank writes parity p's buffers again only in round k+2, after round
//   k+1's rendezvous, which every rank reaches only after its reads of round k.
//   Direct rounds (larger inputs): ranks publish their buffers' addresses, rendezvous, read each
//   other's buffers in place, and rendezvous again before returning (the buffers are their
//   callers' again). A direct AllReduce reduces chunk q on rank q, then every rank copies the
//   others' chunks: three rendezvous (docs/design/comm.md, "The inproc backend").
//
// NOTE [Inproc reduction order]
// Every element is reduced in group-rank order, rank 0's value first (NOTE [Rank-order
// reduction] in comm/rank_order_reduce.h). Staged rounds compute it on every rank, direct ones on
// the chunk's owner, with the same function, so every rank gets bit-identical results, and equal
// inputs give equal results from run to run. (For floating sums this is not the order of gloo's
// ring algorithm: the two backends may differ in the last bits.) Mean is the sum scaled by
// 1 / size, by the ProcessGroup base class.
#include <cstring>

#include "cleave/comm/process_group.h"
#include "cleave/core/dtype.h"
#include "cleave/core/error.h"
#include "comm/backends.h"
#include "comm/call_check.h"
#include "comm/inproc/inproc_hub.h"
#include "comm/rank_order_reduce.h"

namespace cleave::comm {
namespace {

using Clock = WaitClock;
using Entry = InprocPointToPoint::Entry;

// Inputs up to this size go through the staging buffers: one rendezvous per round instead of two
// (an AllReduce counts size x its tensor, since every rank reduces all of it).
constexpr size_t kStagedBytes = 64 << 10;

// Elements [first, second) of n: chunk q of `size` (NOTE [Inproc rounds]).
std::pair<int64_t, int64_t> chunk(int64_t n, int q, int size) {
  return {n * q / size, n * (q + 1) / size};
}

class InprocProcessGroup final : public ProcessGroup {
 public:
  explicit InprocProcessGroup(const ProcessGroupOptions& options) : ProcessGroup(options) {
    if (options.size == 1) return;
    CLEAVE_CHECK_ARG(options.store != nullptr,
                     "create_process_group('{}', inproc): a rendezvous store is required "
                     "(comm::make_memory_store() for ranks as threads)",
                     options.name);
    const Clock::time_point deadline = Clock::now() + options.timeout;
    hub_ = find_inproc_hub(options, deadline);
    ins_.resize(static_cast<size_t>(options.size));
    try {
      hub_->rendezvous().arrive(options.rank, ++rendezvous_, deadline, options.timeout, "join");
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
      for (const auto& entry : posted) hub_->p2p().await(*entry, deadline, options().timeout);
    } catch (...) {
      // No entry may outlive the call in a queue: the caller's buffers are its own again.
      for (const auto& entry : posted) hub_->p2p().retract(*entry);
      throw;
    }
  }

  std::function<void()> do_post(const Tensor& tensor, int peer, int tag, bool is_send) override {
    std::shared_ptr<Entry> entry = post(tensor, peer, tag, is_send);
    return [hub = hub_, entry, timeout = options().timeout] {
      hub->p2p().await(*entry, Clock::now() + timeout, timeout);
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
    InprocRoundState& mine = hub_->round_state(rank());
    mine.slot[parity_] = InprocSlot{call, in, out};
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

  void rendezvous() {
    hub_->rendezvous().arrive(rank(), ++rendezvous_, deadline_, options().timeout, "arrive");
  }

  const InprocSlot& slot(int q) const { return hub_->round_state(q).slot[parity_]; }
  const std::byte* staged(int q) const { return hub_->round_state(q).staging[parity_].data(); }

  std::shared_ptr<Entry> post(const Tensor& tensor, int peer, int tag, bool is_send) {
    return hub_->p2p().post(tensor, rank(), peer, tag, is_send);
  }

  std::shared_ptr<InprocHub> hub_;
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

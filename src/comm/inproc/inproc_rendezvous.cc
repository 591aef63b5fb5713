// The rendezvous of an inproc group (NOTE [Inproc waiting] in comm/inproc/inproc_rendezvous.h).
#include "comm/inproc/inproc_rendezvous.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>

namespace cleave::comm {

InprocRendezvous::InprocRendezvous(int size)
    : size_(size), ranks_(std::make_unique<Rank[]>(static_cast<size_t>(size))) {}

bool InprocRendezvous::departed(int rank) const {
  return ranks_[static_cast<size_t>(rank)].departed.load(std::memory_order_acquire);
}

void InprocRendezvous::depart(int rank) {
  ranks_[static_cast<size_t>(rank)].departed.store(true, std::memory_order_release);
  gate_.wake();
}

void InprocRendezvous::arrive(int rank, uint64_t number, WaitClock::time_point deadline,
                              std::chrono::milliseconds timeout, const char* verb) {
  const auto before = static_cast<uint32_t>(number - 1) & kGenerationMask;
  const auto after = static_cast<uint32_t>(number) & kGenerationMask;
  std::atomic<uint32_t>& gate = gate_.value;
  if ((gate.load(std::memory_order_acquire) & kAborted) != 0) throw aborted_failure(rank);
  ranks_[static_cast<size_t>(rank)].reached.store(number, std::memory_order_release);
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
      if (ranks_[static_cast<size_t>(q)].reached.load(std::memory_order_acquire) < number) {
        ranks.push_back(q);
      }
    }
    return ranks;
  };
  const auto opened = [&] { return gate.load(std::memory_order_acquire) != before; };
  const auto check = [&] {
    std::vector<int> gone = missing();
    std::erase_if(gone, [&](int q) { return !departed(q); });
    if (gone.empty()) return;
    give_up(rank, before, std::move(gone),
            fmt::format("left the group (its ProcessGroup was destroyed, e.g. its thread ended) "
                        "without calling this operation, so it can never {}",
                        verb));
  };
  while (!wait_until(gate_, deadline, kInprocWait, opened, check)) {
    give_up(rank, before, missing(),
            fmt::format("did not {} within the timeout of {} ms", verb, timeout.count()));
  }
  // Aborted while it showed this rendezvous. (Opened, then aborted by ranks already waiting at
  // the next one, this rendezvous is passed: the next arrive() fails.)
  if ((gate.load(std::memory_order_acquire) & kGenerationMask) == before) {
    throw aborted_failure(rank);
  }
}

void InprocRendezvous::give_up(int rank, uint32_t before, std::vector<int> missing,
                               const std::string& what) {
  {
    std::lock_guard<std::mutex> lock(abort_mutex_);
    uint32_t seen = gate_.value.load(std::memory_order_acquire);
    do {
      if ((seen & kAborted) != 0) break;               // somebody else gave up first
      if ((seen & kGenerationMask) != before) return;  // the gate opened: go on
    } while (!gate_.value.compare_exchange_weak(seen, seen | kAborted, std::memory_order_acq_rel));
    if (abort_reason_.empty()) {
      abort_reason_ = fmt::format("rank(s) {} {}", fmt::join(missing, ", "), what);
      abort_missing_ = std::move(missing);
      aborted_by_ = rank;
    }
  }
  gate_.wake();
  throw aborted_failure(rank);
}

BackendFailure InprocRendezvous::aborted_failure(int rank) {
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

}  // namespace cleave::comm

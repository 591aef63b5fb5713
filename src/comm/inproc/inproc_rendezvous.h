// The rendezvous of an inproc group's ranks: a barrier of threads that names the ranks missing at
// the deadline and gives up at once on a rank that has left. Internal to comm.
//
// NOTE [Inproc waiting]
// Ranks are often more threads than cores (8 ranks on 2 cores), so a waiting rank polls for at
// most 50 us, giving up its core at every poll (often to the rank it waits for), then sleeps in
// slices of at most 50 ms until its operation's deadline (NOTE [Waiting] in comm/wait.h). A
// rendezvous is a counter of arrivals and a *gate* wait word (generation | aborted): the last rank
// to arrive opens the gate (the next generation) and wakes the sleepers. Each rank records how
// many rendezvous it has reached. A rank waiting at the gate gives up when the deadline passes
// (naming the ranks that have not arrived) or when a rank that has not arrived has *departed* (its
// ProcessGroup was destroyed): it names that rank at once, since it can never arrive. Giving up
// *aborts* the gate with a compare-and-swap that fails if the gate opened meanwhile (then the
// rendezvous goes on). The other waiters wake and fail with the same message, and a rank that
// arrives later fails at once, so no rank ever reads the buffers of a rank that has left.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "cleave/comm/process_group.h"
#include "comm/wait.h"

namespace cleave::comm {

// How inproc ranks wait (NOTE [Inproc waiting]).
constexpr WaitPolicy kInprocWait{std::chrono::microseconds(50), std::chrono::milliseconds(50)};

class InprocRendezvous {
 public:
  explicit InprocRendezvous(int size);
  InprocRendezvous(const InprocRendezvous&) = delete;
  InprocRendezvous& operator=(const InprocRendezvous&) = delete;

  int size() const { return size_; }

  // Rendezvous number `number` (1, 2, ... on every rank) of `rank`: returns once every rank has
  // arrived; throws BackendFailure naming the missing ranks when one has departed or `deadline`
  // passes (`timeout` is the time it was given, for the message), or when another rank gave up
  // on the rendezvous earlier. `verb` says what the missing ranks did not do ("join", "arrive").
  void arrive(int rank, uint64_t number, WaitClock::time_point deadline,
              std::chrono::milliseconds timeout, const char* verb);

  // `rank` is gone: it arrives nowhere any more, and the ranks waiting for it fail at once.
  void depart(int rank);
  bool departed(int rank) const;

 private:
  // Gate bits: the generation in the low bits, and aborted.
  static constexpr uint32_t kAborted = 1u << 30;
  static constexpr uint32_t kGenerationMask = kAborted - 1;

  struct alignas(64) Rank {
    std::atomic<uint64_t> reached{0};  // the last rendezvous this rank has arrived at
    std::atomic<bool> departed{false};
  };

  // Aborts the gate while it still shows generation `before` and throws; returns when the gate
  // opened meanwhile.
  void give_up(int rank, uint32_t before, std::vector<int> missing, const std::string& what);
  BackendFailure aborted_failure(int rank);

  const int size_;
  std::unique_ptr<Rank[]> ranks_;
  alignas(64) std::atomic<uint64_t> arrivals_{0};
  alignas(64) WaitWord gate_;

  std::mutex abort_mutex_;
  std::string abort_reason_;
  std::vector<int> abort_missing_;
  int aborted_by_ = -1;
};

}  // namespace cleave::comm

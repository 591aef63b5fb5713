// The hub of an inproc group: the one object its ranks (threads of this process) share, found
// through the group's store. Internal to comm.
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
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "cleave/comm/process_group.h"
#include "comm/call_check.h"
#include "comm/inproc/inproc_p2p.h"
#include "comm/inproc/inproc_rendezvous.h"
#include "comm/wait.h"

namespace cleave::comm {

// What one rank publishes for a round of a collective (NOTE [Inproc rounds] in
// comm/inproc/inproc_process_group.cc).
struct InprocSlot {
  CallRecord call;
  const std::byte* in = nullptr;
  std::byte* out = nullptr;
};

// One rank's round state, double-buffered by the round's parity.
struct alignas(64) InprocRoundState {
  InprocSlot slot[2];
  std::vector<std::byte> staging[2];  // only grows
};

class InprocHub {
 public:
  explicit InprocHub(int size);
  ~InprocHub();  // leaves the process-wide table
  InprocHub(const InprocHub&) = delete;
  InprocHub& operator=(const InprocHub&) = delete;

  int size() const { return rendezvous_.size(); }
  uint64_t id() const { return id_; }
  InprocRendezvous& rendezvous() { return rendezvous_; }
  InprocPointToPoint& p2p() { return p2p_; }
  InprocRoundState& round_state(int rank) { return rounds_[static_cast<size_t>(rank)]; }

  // `rank`'s ProcessGroup is gone: it arrives nowhere any more and posts nothing, and the ranks
  // waiting for it fail at once.
  void depart(int rank);

 private:
  friend std::shared_ptr<InprocHub> find_inproc_hub(const ProcessGroupOptions&,
                                                    WaitClock::time_point);
  uint64_t id_ = 0;
  InprocRendezvous rendezvous_;
  InprocPointToPoint p2p_;
  std::unique_ptr<InprocRoundState[]> rounds_;
};

// Finds the hub of the group `options` describes, or makes it on rank 0 (NOTE [Inproc hub]).
// Throws cleave::Error: kUnavailable when rank 0 does not publish it by `deadline`,
// kInvalidArgument when the hub is of another process or size, or gone.
std::shared_ptr<InprocHub> find_inproc_hub(const ProcessGroupOptions& options,
                                           WaitClock::time_point deadline);

}  // namespace cleave::comm

// The shared-memory segment of a gloo group's members on this host: its layout, its creation
// through the group's store, the members' pids and the failure word that every member watches.
// The collectives (comm/shm/shm_collectives.h), their barrier (comm/shm/shm_barrier.h) and
// point-to-point (comm/shm/shm_p2p.h) run in it. Internal to comm.
//
// NOTE [No shared memory left behind]
// Rank 0 creates the segment, every rank maps it and says so through the store, and rank 0 unlinks
// it once all have answered (or on any failure of the set-up): from then on the segment lives only
// in the mappings, and the kernel frees it when the last process holding it exits, however it
// exits. The segment's memory is reserved up front (posix_fallocate), so a full /dev/shm makes
// the group fall back to TCP instead of a SIGBUS later. A creator killed between creating and
// unlinking leaves the name behind; the name ends with the creator's pid, and the next creator on
// this host removes the names whose creator is gone.
#pragma once

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "cleave/comm/process_group.h"
#include "cleave/comm/store.h"
#include "comm/call_check.h"
#include "comm/shm/shm_mapping.h"
#include "comm/wait.h"

namespace cleave::comm {

// The segment's first bytes.
struct ShmHeader {
  alignas(64) std::atomic<uint64_t> arrivals;  // barrier arrivals of all members, ever
  alignas(64) WaitWord generation;             // barriers completed (mod 2^32)
  alignas(64) std::atomic<int32_t> culprit;    // 0, or 1 + the group rank a failed member blamed
  std::atomic<int32_t> reporter;               // the group rank of the member that failed first
  // Set by rank 0 before the others map the segment, so that every member agrees on them.
  alignas(64) uint64_t round_bytes;  // per member and round, <= kSlotBytes
  uint32_t oversubscribed;           // more members than cores on this host
};

// Per member, after the header: the barriers it has reached, its pid, and its last two calls
// (call i in calls[i % 2]: a member writes a record again only two operations later, after the
// barrier of the operation between, which no member passes before it has checked the record).
struct alignas(64) ShmMemberWord {
  std::atomic<uint64_t> arrived;
  int32_t pid;
  CallRecord calls[2];  // NOTE [Calls checked in shared-memory collectives]
};
static_assert(sizeof(ShmMemberWord) == 64);

class ShmSegment {
 public:
  // Bytes of one buffer of one member's slot (NOTE [Shared-memory collectives]).
  static constexpr size_t kSlotBytes = size_t{1} << 20;
  // Larger groups stay on TCP: the segment holds 2 * kSlotBytes per member.
  static constexpr int kMaxRanks = 64;

  // Collective over `members` (ascending group ranks that share this host, this rank among them;
  // every member calls it with the same list and the same `extra_bytes`), through `store` (the
  // group's namespace). Returns null on every member when there are fewer than 2 or more than
  // kMaxRanks, or when the segment cannot be created or mapped. Throws cleave::Error when a
  // member does not answer within options.timeout. `extra_bytes` reserves a zeroed region after
  // the collectives' own, for point-to-point channels; extra() points at it.
  static std::unique_ptr<ShmSegment> create(const ProcessGroupOptions& options, Store& store,
                                            const std::vector<int>& members,
                                            size_t extra_bytes = 0);
  ShmSegment(const ShmSegment&) = delete;
  ShmSegment& operator=(const ShmSegment&) = delete;

  // The members' group ranks; this rank's index among them; their number.
  const std::vector<int>& members() const { return members_; }
  int member() const { return member_; }
  int size() const { return static_cast<int>(members_.size()); }
  std::chrono::milliseconds timeout() const { return timeout_; }
  // Bytes per member and round of the collectives (NOTE [Rounds of shared-memory collectives]).
  size_t round_bytes() const { return static_cast<size_t>(header().round_bytes); }

  ShmHeader& header() const { return *reinterpret_cast<ShmHeader*>(mapping_->data()); }
  ShmMemberWord& word(int member) const;
  // Buffer `buffer` (0 or 1) of member `member`'s slot: kSlotBytes, written only by that member.
  std::byte* slot(int member, int buffer) const;
  // The region reserved by create's extra_bytes (null when none).
  std::byte* extra() const { return extra_; }
  int32_t member_pid(int member) const { return word(member).pid; }

  // Records that this member gave up on the operation, blaming group rank `culprit` (the first
  // record wins), and wakes the other members, which then fail at once naming it.
  void abandon(int culprit);
  // abandon(culprit), then throws BackendFailure(why) naming it.
  [[noreturn]] void fail(int culprit, const std::string& why);
  // Throws the BackendFailure of a member that abandoned the segment, if one did.
  void throw_if_abandoned() const;

 private:
  ShmSegment() = default;

  std::vector<int> members_;
  int member_ = 0;
  std::chrono::milliseconds timeout_{0};
  std::unique_ptr<shm::Mapping> mapping_;
  std::byte* slots_ = nullptr;
  std::byte* extra_ = nullptr;
};

}  // namespace cleave::comm

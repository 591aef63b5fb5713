// The check that every rank of a group calls the same collective, for the backends whose ranks
// share memory (the inproc hub, the shared-memory segment). Internal to comm.
//
// NOTE [Calls checked across ranks]
// Every rank must issue a group's collectives in the same order, with the same element counts,
// dtypes, ops and roots. Where the ranks share memory, each rank writes a CallRecord of the
// collective it calls before the operation's first rendezvous and, after it, compares every
// rank's record with its own (first_mismatch): ranks calling different collectives then fail at
// once, naming the first rank that differs and both calls, instead of pairing the wrong rounds
// (garbage) or waiting until the timeout. The sentence comes in two wordings, "AllReduce (sum of 4
// Int64 elements)" for inproc and "AllReduce(sum) of 4 elements of Int64" for shared memory:
// errors are part of the API, and users' logs and tests match each backend's own.
#pragma once

#include <cstdint>
#include <string>
#include <type_traits>

#include "cleave/comm/process_group.h"
#include "cleave/core/dtype.h"

namespace cleave::comm {

enum class Collective : int32_t {
  kAllReduce,
  kAllGather,
  kReduceScatter,
  kBroadcast,
  kAllToAll,
  kBarrier
};

// What one rank calls. Plain data: it may lie in memory that several processes map.
struct CallRecord {
  int32_t collective = static_cast<int32_t>(Collective::kBarrier);
  int32_t dtype = 0;   // DType
  int32_t detail = 0;  // the ReduceOp of a reduction, the root of a Broadcast, else 0
  int64_t count = 0;   // elements: the tensor's, or one rank's part
  bool operator==(const CallRecord&) const = default;
};
static_assert(std::is_trivially_copyable_v<CallRecord> && sizeof(CallRecord) == 24);

CallRecord call_record(Collective collective, DType dtype, int64_t count, int detail = 0);

// The first of ranks 0..size-1 whose record (record_of(q)) differs from `mine`; -1 when all agree.
template <typename RecordOf>
int first_mismatch(const CallRecord& mine, int size, const RecordOf& record_of) {
  for (int q = 0; q < size; ++q) {
    if (!(record_of(q) == mine)) return q;
  }
  return -1;
}

enum class CallWording { kInproc, kSharedMemory };

// The error for rank `rank` having called `theirs` where this rank called `mine`.
std::string mismatch_message(int rank, const CallRecord& theirs, const CallRecord& mine,
                             CallWording wording);

}  // namespace cleave::comm

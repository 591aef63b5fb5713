// The call check of the shared-memory backends (NOTE [Calls checked across ranks] in
// comm/call_check.h).
#include "comm/call_check.h"

#include <fmt/format.h>

namespace cleave::comm {
namespace {

const char* collective_name(int32_t collective) {
  static const char* const names[] = {"AllReduce", "AllGather", "ReduceScatter",
                                      "Broadcast", "AlltoAll",  "Barrier"};
  return collective >= 0 && collective < 6 ? names[collective] : "?";
}

bool is_reduction(const CallRecord& c) {
  return c.collective == static_cast<int32_t>(Collective::kAllReduce) ||
         c.collective == static_cast<int32_t>(Collective::kReduceScatter);
}

// "AllReduce (sum of 4 Int64 elements)", "Broadcast (4 Float32 elements from root 0)".
std::string describe_inproc(const CallRecord& c) {
  const std::string_view dtype = dtype_name(static_cast<DType>(c.dtype));
  const std::string_view op = reduce_op_name(static_cast<ReduceOp>(c.detail));
  switch (static_cast<Collective>(c.collective)) {
    case Collective::kAllReduce:
      return fmt::format("AllReduce ({} of {} {} elements)", op, c.count, dtype);
    case Collective::kAllGather:
      return fmt::format("AllGather ({} {} elements per rank)", c.count, dtype);
    case Collective::kReduceScatter:
      return fmt::format("ReduceScatter ({}, {} {} elements per rank)", op, c.count, dtype);
    case Collective::kBroadcast:
      return fmt::format("Broadcast ({} {} elements from root {})", c.count, dtype, c.detail);
    case Collective::kAllToAll:
      return fmt::format("AlltoAll ({} {} elements)", c.count, dtype);
    case Collective::kBarrier:
      return "Barrier";
  }
  return "?";
}

// "AllReduce(sum) of 4 elements of Int64", "Broadcast from root 1 of 4 elements of Int64".
std::string describe_shared_memory(const CallRecord& c) {
  std::string what = collective_name(c.collective);
  if (c.collective == static_cast<int32_t>(Collective::kBarrier)) return what;
  if (is_reduction(c)) {
    what += fmt::format("({})", reduce_op_name(static_cast<ReduceOp>(c.detail)));
  } else if (c.collective == static_cast<int32_t>(Collective::kBroadcast)) {
    what += fmt::format(" from root {}", c.detail);
  }
  return fmt::format("{} of {} elements of {}", what, c.count,
                     dtype_name(static_cast<DType>(c.dtype)));
}

}  // namespace

CallRecord call_record(Collective collective, DType dtype, int64_t count, int detail) {
  return CallRecord{static_cast<int32_t>(collective), static_cast<int32_t>(dtype), detail, count};
}

std::string mismatch_message(int rank, const CallRecord& theirs, const CallRecord& mine,
                             CallWording wording) {
  if (wording == CallWording::kInproc) {
    return fmt::format(
        "rank {} called {} where this rank called {}; every rank must issue the group's "
        "collectives in the same order, with the same element counts, dtypes, ops and roots",
        rank, describe_inproc(theirs), describe_inproc(mine));
  }
  return fmt::format(
      "shared memory: rank {} called {} while this rank called {}; every rank of a group must "
      "call the same collectives, with the same sizes, in the same order",
      rank, describe_shared_memory(theirs), describe_shared_memory(mine));
}

}  // namespace cleave::comm

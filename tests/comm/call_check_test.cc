// The check that all ranks call the same collective, alone (comm/call_check.h, NOTE [Calls checked
// across ranks]): which rank it names, and both wordings of its error.
#include "comm/call_check.h"

#include <gtest/gtest.h>

#include <vector>

namespace cleave::comm {
namespace {

int mismatch(const CallRecord& mine, const std::vector<CallRecord>& records) {
  return first_mismatch(mine, static_cast<int>(records.size()),
                        [&](int q) -> const CallRecord& { return records[q]; });
}

TEST(CallCheck, NamesTheFirstRankWhoseCallDiffersInAnyField) {
  const CallRecord sum =
      call_record(Collective::kAllReduce, DType::kFloat32, 10, static_cast<int>(ReduceOp::kSum));
  EXPECT_EQ(mismatch(sum, {sum}), -1);
  EXPECT_EQ(mismatch(sum, {sum, sum, sum, sum, sum, sum, sum, sum}), -1);
  const std::vector<CallRecord> others = {
      call_record(Collective::kAllReduce, DType::kFloat32, 11, static_cast<int>(ReduceOp::kSum)),
      call_record(Collective::kAllReduce, DType::kFloat64, 10, static_cast<int>(ReduceOp::kSum)),
      call_record(Collective::kAllReduce, DType::kFloat32, 10, static_cast<int>(ReduceOp::kMax)),
      call_record(Collective::kReduceScatter, DType::kFloat32, 10,
                  static_cast<int>(ReduceOp::kSum)),
      CallRecord{},
  };
  for (const CallRecord& other : others) {
    EXPECT_EQ(mismatch(sum, {sum, sum, other, sum, other}), 2);
    EXPECT_EQ(mismatch(sum, {other, sum}), 0);
  }
  // A Broadcast's root is part of the call; a Barrier is one call whatever made it.
  EXPECT_EQ(mismatch(call_record(Collective::kBroadcast, DType::kInt64, 4, 1),
                     {call_record(Collective::kBroadcast, DType::kInt64, 4, 1),
                      call_record(Collective::kBroadcast, DType::kInt64, 4, 0)}),
            1);
  EXPECT_EQ(mismatch(CallRecord{}, {call_record(Collective::kBarrier, DType::kFloat32, 0)}), -1);
}

TEST(CallCheck, TheInprocWording) {
  const CallRecord four = call_record(Collective::kAllReduce, DType::kInt64, 4);
  const CallRecord five = call_record(Collective::kAllReduce, DType::kInt64, 5);
  EXPECT_EQ(mismatch_message(0, four, five, CallWording::kInproc),
            "rank 0 called AllReduce (sum of 4 Int64 elements) where this rank called AllReduce "
            "(sum of 5 Int64 elements); every rank must issue the group's collectives in the same "
            "order, with the same element counts, dtypes, ops and roots");
  const auto said = [](const CallRecord& theirs) {
    const std::string m = mismatch_message(3, theirs, CallRecord{}, CallWording::kInproc);
    return m.substr(0, m.find(" where"));
  };
  EXPECT_EQ(said(call_record(Collective::kAllGather, DType::kFloat32, 7)),
            "rank 3 called AllGather (7 Float32 elements per rank)");
  EXPECT_EQ(said(call_record(Collective::kReduceScatter, DType::kInt32, 2,
                             static_cast<int>(ReduceOp::kProd))),
            "rank 3 called ReduceScatter (prod, 2 Int32 elements per rank)");
  EXPECT_EQ(said(call_record(Collective::kBroadcast, DType::kFloat32, 4, 0)),
            "rank 3 called Broadcast (4 Float32 elements from root 0)");
  EXPECT_EQ(said(call_record(Collective::kAllToAll, DType::kBool, 8)),
            "rank 3 called AlltoAll (8 Bool elements)");
  EXPECT_EQ(said(CallRecord{}), "rank 3 called Barrier");
}

TEST(CallCheck, TheSharedMemoryWording) {
  const CallRecord big = call_record(Collective::kAllReduce, DType::kFloat32, 1000);
  const CallRecord small = call_record(Collective::kAllReduce, DType::kFloat32, 10);
  EXPECT_EQ(mismatch_message(1, big, small, CallWording::kSharedMemory),
            "shared memory: rank 1 called AllReduce(sum) of 1000 elements of Float32 while this "
            "rank called AllReduce(sum) of 10 elements of Float32; every rank of a group must "
            "call the same collectives, with the same sizes, in the same order");
  const auto said = [](const CallRecord& theirs) {
    const std::string m = mismatch_message(3, theirs, CallRecord{}, CallWording::kSharedMemory);
    return m.substr(0, m.find(" while"));
  };
  EXPECT_EQ(said(call_record(Collective::kBroadcast, DType::kInt64, 4, 1)),
            "shared memory: rank 3 called Broadcast from root 1 of 4 elements of Int64");
  EXPECT_EQ(said(call_record(Collective::kReduceScatter, DType::kFloat64, 6,
                             static_cast<int>(ReduceOp::kMin))),
            "shared memory: rank 3 called ReduceScatter(min) of 6 elements of Float64");
  EXPECT_EQ(said(call_record(Collective::kAllGather, DType::kInt32, 5)),
            "shared memory: rank 3 called AllGather of 5 elements of Int32");
  EXPECT_EQ(said(CallRecord{}), "shared memory: rank 3 called Barrier");
}

}  // namespace
}  // namespace cleave::comm

// Attribute helpers shared by the collective primitives and their wrappers.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "cleave/cluster/activity.h"
#include "cleave/comm/process_group.h"
#include "cleave/core/shape.h"
#include "cleave/ir/attrs.h"
#include "cleave/ir/registry.h"

namespace cleave::runtime {

// The group of a communication primitive (NOTE [Group attributes] in cleave/ir/comm_ops.h): the
// group made from its "rank_list" (runtime::prepare_comm_groups, or on first use), else the
// registered group its "group" attribute names; the world of one rank when standalone.
struct GroupRef {
  std::shared_ptr<comm::ProcessGroup> group;
  std::string name;
  int size() const { return group->size(); }
  int rank() const { return group->rank(); }
};
GroupRef group_attr(const ir::Attrs& attrs, const std::string& op);

// What a collective kernel is doing, for the line a failed job prints (cluster/activity.h):
// "in AllReduce on group 'hccl_world_group'", plus `detail` (e.g. "to rank 1") when given.
std::string collective_activity(const std::string& op, const GroupRef& g,
                                const std::string& detail = "");

// "op": "sum" | "max" | "min" | "prod" | "mean" (default "sum").
comm::ReduceOp reduce_op_attr(const ir::Attrs& attrs, const std::string& op);
std::string reduce_op_attr_value(comm::ReduceOp op);

// Throws Error when `rank` is not a rank of the group.
void check_rank(const GroupRef& g, int64_t rank, const char* attr, const std::string& op);

// The runtime's parts of the communication primitives' registry entries, attached while the
// program starts (src/runtime/registrations.cc): the kernels of the collectives and Send/Recv
// (collectives.cc), of NeighborExchangeV2 (neighbor_exchange_v2.cc) and of RpcSend/RpcRecv
// (rpc_ops.cc).
void register_collective_kernels(ir::Registry& registry);
void register_neighbor_exchange_v2_kernels(ir::Registry& registry);
void register_rpc_kernels(ir::Registry& registry);

}  // namespace cleave::runtime

// The communication primitives as registry entries: shape inference and gradient rules that read
// only their attributes, so that the planner (`parallel`) can create and shape-check them without
// a cluster. Their CPU kernels talk to process groups: the runtime layer attaches them to these
// entries while the program starts (src/runtime/registrations.cc); a program without the runtime
// gets an error naming the op when it runs one.
//
// NOTE [Group attributes]
// Every collective and point-to-point primitive names its group by attributes:
//   "group"       the group's name: a registered group ("hccl_world_group", the default) or, for
//                 the groups the parallel rewrite makes, a name derived from its ranks ("0-1-2-3");
//   "group_size"  its number of ranks: what inference reads (the runtime's functional wrappers set
//                 it from the live group at the call);
//   "rank_list"   optional: the world ranks of its members, ascending. When present the group is
//                 created from it when the step is loaded (runtime::prepare_comm_groups), and
//                 group_size is its length.
// Ranks in the other attributes (root_rank, dest_rank, send_rank_ids, ...) are group ranks; a
// reduction's "op" is "sum" | "max" | "min" | "prod" | "mean". All these primitives are
// OpDef::communicates: passes never fold, merge or remove them, and every rank of the group runs
// them in the same order. Each primitive's attributes (MindSpore's names) and result:
// docs/design/comm.md, "The communication primitives".
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "cleave/core/shape.h"
#include "cleave/ir/attrs.h"
#include "cleave/ir/registry.h"

namespace cleave::ir {

// MindSpore's default group name: the world.
inline constexpr const char* kWorldCommGroup = "hccl_world_group";

// The group size of a communication primitive (NOTE [Group attributes]): the length of
// "rank_list" when present, else "group_size". Throws Error naming `op` when neither is set or
// the size is not positive.
int64_t group_size_attr(const Attrs& attrs, const std::string& op);

// The "group", "group_size" and "rank_list" attributes of `attrs` (the ones present), for making
// another primitive on the same group (a gradient rule).
Attrs group_attrs_of(const Attrs& attrs);

// A list of shapes as one int list (NeighborExchange's recv_shapes): for each shape its rank, then
// its dims; decode_shapes throws Error naming `op` when the list is malformed.
std::vector<int64_t> encode_shapes(const std::vector<Shape>& shapes);
std::vector<Shape> decode_shapes(const std::vector<int64_t>& flat, const std::string& op);

// Adds the communication primitives to `registry` (ir::register_builtin_ops calls it).
void register_comm_ops(Registry& registry);

// NeighborExchangeV2's attributes, checked (NOTE [NeighborExchangeV2 regions] in
// src/runtime/neighbor_exchange_v2.cc): neighbours clockwise from the top, -1 where there is
// none, and the [top, bottom, left, right] widths sent and received.
struct HaloSpec {
  std::array<int64_t, 8> send_ids{}, recv_ids{};
  int64_t st = 0, sb = 0, sl = 0, sr = 0;  // sent widths
  int64_t rt = 0, rb = 0, rl = 0, rr = 0;  // received widths
};
HaloSpec halo_spec(const Attrs& attrs, const std::string& op);

}  // namespace cleave::ir

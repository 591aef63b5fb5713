// The functional wrappers of the collective primitives (cleave/runtime/collectives.h) and the
// attribute helpers of collective_attrs.h.
#include <fmt/ranges.h>

#include <mutex>

#include "cleave/cluster/cluster.h"
#include "cleave/comm/group_registry.h"
#include "cleave/core/error.h"
#include "cleave/ir/dispatch.h"
#include "cleave/runtime/collectives.h"
#include "runtime/collective_attrs.h"

namespace cleave::runtime {

namespace {
// The world of a standalone process: one rank, so every collective is an identity.
std::shared_ptr<comm::ProcessGroup> solo_world() {
  static std::shared_ptr<comm::ProcessGroup> solo = [] {
    comm::ProcessGroupOptions o;
    o.store = comm::make_memory_store();
    o.name = comm::kWorldGroup;
    return comm::create_process_group(o);
  }();
  return solo;
}
}  // namespace

GroupRef group_attr(const ir::Attrs& attrs, const std::string& op) {
  const std::string name = attrs.get_or<std::string>("group", ops::kWorldCommGroup);
  std::shared_ptr<comm::ProcessGroup> group;
  try {
    group = comm::get_group(name);
  } catch (const Error& e) {
    throw Error(e.kind(), fmt::format("{}: {}", op, e.what()));
  }
  if (!group && is_initialized() && get_group_size() > 1) {
    // A world of several ranks with no communication group: a collective must not act as an
    // identity there.
    CLEAVE_FAIL(
        "{}: the world has {} ranks but cleave::init() made no communication group for it (a "
        "RANK_TABLE_FILE job without CLEAVE_RANK_TABLE_PORT has ranks only; set it to the port "
        "rank 0 serves the rendezvous on)",
        op, get_group_size());
  }
  return {group ? group : solo_world(), name};
}

comm::ReduceOp reduce_op_attr(const ir::Attrs& attrs, const std::string& op) {
  const std::string v = attrs.get_or<std::string>("op", "sum");
  if (v == "sum") return comm::ReduceOp::kSum;
  if (v == "max") return comm::ReduceOp::kMax;
  if (v == "min") return comm::ReduceOp::kMin;
  if (v == "prod") return comm::ReduceOp::kProd;
  if (v == "mean") return comm::ReduceOp::kMean;
  CLEAVE_FAIL(
      "{}: op \"{}\" is not a reduction; expected \"sum\", \"max\", \"min\", \"prod\" or "
      "\"mean\"",
      op, v);
}

std::string reduce_op_attr_value(comm::ReduceOp op) { return comm::reduce_op_name(op); }

std::string collective_activity(const std::string& op, const GroupRef& g,
                                const std::string& detail) {
  std::string text = fmt::format("in {} on group '{}'", op, g.name);
  if (!detail.empty()) text += " " + detail;
  return text;
}

void check_rank(const GroupRef& g, int64_t rank, const char* attr, const std::string& op) {
  CLEAVE_CHECK_ARG(rank >= 0 && rank < g.size(),
                   "{}: {} holds rank {}, out of range for group '{}' of {} ranks; expected 0..{}",
                   op, attr, rank, g.name, g.size(), g.size() - 1);
}

std::vector<int64_t> encode_shapes(const std::vector<Shape>& shapes) {
  std::vector<int64_t> flat;
  for (const Shape& s : shapes) {
    flat.push_back(s.rank());
    for (int64_t d : s.dims()) flat.push_back(d);
  }
  return flat;
}

std::vector<Shape> decode_shapes(const std::vector<int64_t>& flat, const std::string& op) {
  std::vector<Shape> shapes;
  size_t i = 0;
  while (i < flat.size()) {
    const int64_t rank = flat[i++];
    CLEAVE_CHECK_ARG(rank >= 0 && i + static_cast<size_t>(rank) <= flat.size(),
                     "{}: recv_shapes [{}] is malformed at entry {}; expected each shape as its "
                     "rank followed by its dims",
                     op, fmt::join(flat, ", "), i - 1);
    shapes.emplace_back(std::vector<int64_t>(flat.begin() + static_cast<ptrdiff_t>(i),
                                             flat.begin() + static_cast<ptrdiff_t>(i + rank)));
    i += static_cast<size_t>(rank);
  }
  return shapes;
}

}  // namespace cleave::runtime

namespace cleave::ops {

namespace {
const ir::OpDef& collective(const char* name) {
  runtime::ensure_collective_ops_registered();
  return ir::Registry::global().get(name);
}
}  // namespace

Tensor all_reduce(const Tensor& x, const AllReduceOptions& options) {
  static const ir::OpDef& op = collective("AllReduce");
  return ir::call1(op, {x},
                   {{"op", runtime::reduce_op_attr_value(options.op)}, {"group", options.group}});
}

Tensor all_gather(const Tensor& x, const GroupOptions& options) {
  static const ir::OpDef& op = collective("AllGather");
  return ir::call1(op, {x}, {{"group", options.group}});
}

Tensor reduce_scatter(const Tensor& x, const ReduceScatterOptions& options) {
  static const ir::OpDef& op = collective("ReduceScatter");
  return ir::call1(op, {x},
                   {{"op", runtime::reduce_op_attr_value(options.op)}, {"group", options.group}});
}

Tensor broadcast(const Tensor& x, const BroadcastOptions& options) {
  static const ir::OpDef& op = collective("Broadcast");
  return ir::call1(op, {x}, {{"root_rank", options.root_rank}, {"group", options.group}});
}

Tensor all_to_all(const Tensor& x, const AlltoAllOptions& options) {
  static const ir::OpDef& op = collective("AlltoAll");
  return ir::call1(op, {x},
                   {{"split_count", options.split_count},
                    {"split_dim", options.split_dim},
                    {"concat_dim", options.concat_dim},
                    {"group", options.group}});
}

std::vector<Tensor> neighbor_exchange(const std::vector<Tensor>& xs,
                                      const NeighborExchangeOptions& options) {
  static const ir::OpDef& op = collective("NeighborExchange");
  return ir::call(op, xs,
                  {{"send_rank_ids", options.send_rank_ids},
                   {"recv_rank_ids", options.recv_rank_ids},
                   {"recv_shapes", runtime::encode_shapes(options.recv_shapes)},
                   {"recv_type", options.recv_type},
                   {"group", options.group}});
}

Tensor send(const Tensor& x, const SendOptions& options) {
  static const ir::OpDef& op = collective("Send");
  return ir::call1(
      op, {x},
      {{"dest_rank", options.dest_rank}, {"sr_tag", options.sr_tag}, {"group", options.group}});
}

Tensor recv(const Tensor& token, const RecvOptions& options) {
  static const ir::OpDef& op = collective("Recv");
  return ir::call1(op, {token},
                   {{"src_rank", options.src_rank},
                    {"sr_tag", options.sr_tag},
                    {"shape", options.shape.dims()},
                    {"dtype", options.dtype},
                    {"group", options.group}});
}

void barrier(const std::string& group) {
  runtime::group_attr({{"group", group}}, "Barrier").group->barrier();
}

}  // namespace cleave::ops

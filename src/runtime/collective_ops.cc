// The functional wrappers of the collective primitives (cleave/runtime/collectives.h), the
// attribute helpers of collective_attrs.h, and the groups made from rank lists.
#include <fmt/ranges.h>

#include <algorithm>
#include <mutex>

#include "cleave/cluster/cluster.h"
#include "cleave/comm/group_registry.h"
#include "cleave/core/error.h"
#include "cleave/ir/comm_ops.h"
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

// NOTE [Groups from rank lists]
// The groups a compiled graph names by rank list are made once per world (cached by the world
// group and the list) as sub-groups of the world. Making one blocks until every member makes it,
// so prepare_comm_groups makes a graph's groups in one global order (ascending rank lists): the
// smallest list not yet made has all its members waiting on it, so no rank waits forever. A list
// of every world rank is the world itself.
namespace {
struct CachedGroup {
  std::weak_ptr<comm::ProcessGroup> world;
  std::vector<int64_t> ranks;
  std::shared_ptr<comm::ProcessGroup> group;
};
std::mutex g_cache_mutex;
std::vector<CachedGroup> g_cache;

std::string rank_list_text(const std::vector<int64_t>& ranks) {
  return fmt::format("{}", fmt::join(ranks, "-"));
}

GroupRef group_of_ranks(const std::vector<int64_t>& ranks, const std::string& op) {
  const std::string name = rank_list_text(ranks);
  std::shared_ptr<comm::ProcessGroup> world = comm::get_group(comm::kWorldGroup);
  if (world == nullptr) {
    CLEAVE_CHECK_ARG(ranks == std::vector<int64_t>{0},
                     "{}: group of world ranks ({}) needs a job of several ranks, but this process "
                     "is standalone (world size 1); call cleave::init() in a launched job",
                     op, fmt::join(ranks, ", "));
    return {solo_world(), name};
  }
  CLEAVE_CHECK_ARG(ranks.back() < world->size(),
                   "{}: group of world ranks ({}) names rank {}, but the world has {} ranks", op,
                   fmt::join(ranks, ", "), ranks.back(), world->size());
  if (static_cast<int>(ranks.size()) == world->size()) return {world, name};
  {
    std::lock_guard<std::mutex> lock(g_cache_mutex);
    std::erase_if(g_cache, [](const CachedGroup& c) { return c.world.expired(); });
    for (const CachedGroup& c : g_cache) {
      if (c.world.lock() == world && c.ranks == ranks) return {c.group, name};
    }
  }
  const int me = world->rank();
  CLEAVE_CHECK_ARG(std::find(ranks.begin(), ranks.end(), me) != ranks.end(),
                   "{}: this process (world rank {}) is not a member of group ({}); only members "
                   "run a collective",
                   op, me, fmt::join(ranks, ", "));
  // Made without the lock: ranks as threads of one process each make their own group at once.
  std::vector<int> members(ranks.begin(), ranks.end());
  auto group = comm::create_subgroup(*world, members, "ranks_" + name);
  std::lock_guard<std::mutex> lock(g_cache_mutex);
  g_cache.push_back({world, ranks, group});
  return {group, name};
}
}  // namespace

GroupRef group_attr(const ir::Attrs& attrs, const std::string& op) {
  if (attrs.has("rank_list")) {
    return group_of_ranks(attrs.get<std::vector<int64_t>>("rank_list", op), op);
  }
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

void prepare_comm_groups(const ir::Graph& graph) {
  std::vector<std::vector<int64_t>> lists;
  for (const ir::Node& n : graph.nodes) {
    if (n.is_op() && n.op->communicates && n.attrs.has("rank_list")) {
      lists.push_back(n.attrs.get<std::vector<int64_t>>("rank_list", n.op->name));
    }
  }
  std::sort(lists.begin(), lists.end());
  lists.erase(std::unique(lists.begin(), lists.end()), lists.end());
  for (const std::vector<int64_t>& ranks : lists) group_of_ranks(ranks, graph.name);
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

}  // namespace cleave::runtime

namespace cleave::ops {

namespace {
const ir::OpDef& collective(const char* name) { return ir::Registry::global().get(name); }

// `attrs` plus the group attributes of the registered group `group` (NOTE [Group attributes]):
// its name and its size, read from the live group now.
ir::Attrs on_group(const std::string& group, const char* op, ir::Attrs attrs) {
  const runtime::GroupRef g = runtime::group_attr({{"group", group}}, op);
  attrs.set("group", group);
  attrs.set("group_size", static_cast<int64_t>(g.size()));
  return attrs;
}
}  // namespace

Tensor all_reduce(const Tensor& x, const AllReduceOptions& options) {
  static const ir::OpDef& op = collective("AllReduce");
  return ir::call1(
      op, {x},
      on_group(options.group, "AllReduce", {{"op", runtime::reduce_op_attr_value(options.op)}}));
}

Tensor all_gather(const Tensor& x, const GroupOptions& options) {
  static const ir::OpDef& op = collective("AllGather");
  return ir::call1(op, {x}, on_group(options.group, "AllGather", {}));
}

Tensor reduce_scatter(const Tensor& x, const ReduceScatterOptions& options) {
  static const ir::OpDef& op = collective("ReduceScatter");
  return ir::call1(op, {x},
                   on_group(options.group, "ReduceScatter",
                            {{"op", runtime::reduce_op_attr_value(options.op)}}));
}

Tensor broadcast(const Tensor& x, const BroadcastOptions& options) {
  static const ir::OpDef& op = collective("Broadcast");
  return ir::call1(op, {x},
                   on_group(options.group, "Broadcast", {{"root_rank", options.root_rank}}));
}

Tensor all_to_all(const Tensor& x, const AlltoAllOptions& options) {
  static const ir::OpDef& op = collective("AlltoAll");
  return ir::call1(op, {x},
                   on_group(options.group, "AlltoAll",
                            {{"split_count", options.split_count},
                             {"split_dim", options.split_dim},
                             {"concat_dim", options.concat_dim}}));
}

std::vector<Tensor> neighbor_exchange(const std::vector<Tensor>& xs,
                                      const NeighborExchangeOptions& options) {
  static const ir::OpDef& op = collective("NeighborExchange");
  return ir::call(op, xs,
                  on_group(options.group, "NeighborExchange",
                           {{"send_rank_ids", options.send_rank_ids},
                            {"recv_rank_ids", options.recv_rank_ids},
                            {"recv_shapes", ir::encode_shapes(options.recv_shapes)},
                            {"recv_type", options.recv_type}}));
}

Tensor neighbor_exchange_v2(const Tensor& x, const NeighborExchangeV2Options& options) {
  static const ir::OpDef& op = collective("NeighborExchangeV2");
  return ir::call1(op, {x},
                   on_group(options.group, "NeighborExchangeV2",
                            {{"send_rank_ids", options.send_rank_ids},
                             {"recv_rank_ids", options.recv_rank_ids},
                             {"send_lens", options.send_lens},
                             {"recv_lens", options.recv_lens},
                             {"data_format", options.data_format}}));
}

Tensor send(const Tensor& x, const SendOptions& options) {
  static const ir::OpDef& op = collective("Send");
  return ir::call1(op, {x},
                   on_group(options.group, "Send",
                            {{"dest_rank", options.dest_rank}, {"sr_tag", options.sr_tag}}));
}

Tensor recv(const Tensor& token, const RecvOptions& options) {
  static const ir::OpDef& op = collective("Recv");
  return ir::call1(op, {token},
                   on_group(options.group, "Recv",
                            {{"src_rank", options.src_rank},
                             {"sr_tag", options.sr_tag},
                             {"shape", options.shape.dims()},
                             {"dtype", options.dtype}}));
}

void barrier(const std::string& group) {
  runtime::group_attr({{"group", group}}, "Barrier").group->barrier();
}

}  // namespace cleave::ops

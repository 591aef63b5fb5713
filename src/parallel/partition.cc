// Distributed graph partition (NOTE [Distributed graph partition] in cleave/parallel/partition.h).
//
// Four steps: resolve every node's rank (placement.cc); expand the graph over the micro-batches
// (micro_batch.cc; a plain copy with one micro-batch); simulate a schedule of the expanded graph
// (schedule.cc); and here, find the cut edges and emit each rank's nodes in the schedule's order,
// with RpcSend/RpcRecv on the cut edges.
#include "cleave/parallel/partition.h"

#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <tuple>

#include "parallel/partition_steps.h"

namespace cleave::parallel {
namespace {

using ir::Graph;
using ir::Node;
using ir::NodeKind;
using ir::TensorMeta;
using ir::ValueRef;

constexpr int kMaxTags = 1 << 15;  // MPI's guaranteed tag bound, which the comm layer keeps

struct Cuts {
  std::map<std::tuple<int, int, int>, int> tag;          // (node, output, destination) -> tag
  std::map<std::pair<int, int>, std::vector<int>> dsts;  // (node, output) -> destinations
  std::vector<CutEdge> edges;
};

Cuts find_cuts(const ExpandedGraph& e, const PartitionOptions& o) {
  const Graph& g = e.g;
  std::vector<std::vector<std::vector<int>>> readers(g.nodes.size());  // [node][output] -> ranks
  for (size_t j = 0; j < g.nodes.size(); ++j) readers[j].resize(g.nodes[j].outputs.size());
  for (size_t u = 0; u < g.nodes.size(); ++u) {
    for (const ValueRef& v : g.nodes[u].inputs) readers[v.node][v.output].push_back(e.rank[u]);
  }
  for (const ValueRef& v : g.outputs) readers[v.node][v.output].push_back(o.output_rank);
  Cuts cuts;
  for (size_t j = 0; j < g.nodes.size(); ++j) {
    const int src = e.rank[j];
    if (src < 0) continue;  // held by every rank
    for (size_t k = 0; k < readers[j].size(); ++k) {
      std::vector<int> ranks = readers[j][k];
      std::sort(ranks.begin(), ranks.end());
      ranks.erase(std::unique(ranks.begin(), ranks.end()), ranks.end());
      for (int dst : ranks) {
        if (dst == src || dst < 0) continue;
        const int tag = static_cast<int>(cuts.edges.size());
        CLEAVE_CHECK_ARG(tag < kMaxTags,
                         "partition of '{}': the step needs more than {} cut edges (tags); place "
                         "fewer, larger pieces on separate ranks or use fewer micro-batches",
                         g.name, kMaxTags);
        const TensorMeta& meta = g.nodes[j].outputs[k];
        cuts.tag[{static_cast<int>(j), static_cast<int>(k), dst}] = tag;
        cuts.dsts[{static_cast<int>(j), static_cast<int>(k)}].push_back(dst);
        cuts.edges.push_back({src, dst, tag, g.nodes[j].name,
                              meta.shape.numel() * static_cast<int64_t>(dtype_size(meta.dtype))});
      }
    }
  }
  return cuts;
}

Graph build_rank(const ExpandedGraph& e, int r, const SimulatedSchedule& s, const Cuts& cuts,
                 const PartitionOptions& o) {
  const Graph& g = e.g;
  Graph rg;
  rg.name = fmt::format("{}_rank{}", g.name, r);
  std::map<std::pair<int, int>, ValueRef> local;
  const ir::Placement here{kWorkerRole, r};
  auto push = [&](Node node) {
    rg.nodes.push_back(std::move(node));
    return static_cast<int>(rg.nodes.size()) - 1;
  };
  for (int j : g.inputs) {
    const int id = push(g.nodes[j]);
    rg.inputs.push_back(id);
    local[{j, 0}] = {id, 0};
  }
  auto send = [&](int j, int k, ValueRef v) {
    auto it = cuts.dsts.find({j, k});
    if (it == cuts.dsts.end()) return;
    for (int dst : it->second) {
      Node s;
      s.kind = NodeKind::kOp;
      s.op = o.send_op;
      s.attrs = {{"dst_rank", int64_t{dst}},
                 {"group", o.group},
                 {"tag", int64_t{cuts.tag.at({j, k, dst})}}};
      s.inputs = {v};
      s.name = g.nodes[j].name + ".rpcsend";
      s.scope = g.nodes[j].scope;
      s.placement = here;
      push(std::move(s));
    }
  };
  auto value = [&](ValueRef v) -> ValueRef {
    auto it = local.find({v.node, v.output});
    if (it != local.end()) return it->second;
    const Node& p = g.nodes[v.node];
    const int src = e.rank[v.node];
    if (src == kEverywhere || src == r) {
      CLEAVE_ASSERT(!p.is_op(), "partition: op '{}' is used on rank {} before it runs", p.name, r);
      const ValueRef bound{push(p), 0};
      local[{v.node, v.output}] = bound;
      return bound;
    }
    const TensorMeta& meta = g.meta(v);
    Node rn;
    rn.kind = NodeKind::kOp;
    rn.op = o.recv_op;
    rn.attrs = {{"dtype", meta.dtype},
                {"group", o.group},
                {"shape", meta.shape.dims()},
                {"src_rank", int64_t{src}},
                {"tag", int64_t{cuts.tag.at({v.node, v.output, r})}}};
    rn.outputs = {meta};
    rn.name = p.name + ".rpcrecv";
    rn.scope = p.scope;
    rn.placement = here;
    const ValueRef received{push(std::move(rn)), 0};
    local[{v.node, v.output}] = received;
    return received;
  };
  for (size_t j = 0; j < g.nodes.size(); ++j) {
    if (g.nodes[j].kind == NodeKind::kParameter && e.rank[j] == r) {
      send(static_cast<int>(j), 0, value({static_cast<int>(j), 0}));
    }
  }
  for (int j : s.order) {
    if (e.rank[j] != r) continue;
    Node c = g.nodes[j];
    for (ValueRef& v : c.inputs) v = value(v);
    c.placement = here;
    const int id = push(std::move(c));
    for (size_t k = 0; k < rg.nodes[id].outputs.size(); ++k) {
      const ValueRef out{id, static_cast<int>(k)};
      local[{j, static_cast<int>(k)}] = out;
      send(j, static_cast<int>(k), out);
    }
  }
  if (r == o.output_rank) {
    for (const ValueRef& v : g.outputs) rg.outputs.push_back(value(v));
  }
  return rg;
}

}  // namespace

Partition partition(const ir::Graph& graph, const PartitionOptions& options) {
  CLEAVE_CHECK_ARG(options.world_size >= 1, "partition: world_size is {}; expected >= 1",
                   options.world_size);
  CLEAVE_CHECK_ARG(options.micro_batches >= 1, "partition: micro_batches is {}; expected >= 1",
                   options.micro_batches);
  CLEAVE_CHECK_ARG(options.output_rank >= 0 && options.output_rank < options.world_size,
                   "partition: output_rank is {}; expected a rank in [0, {})", options.output_rank,
                   options.world_size);
  CLEAVE_CHECK_ARG(options.send_op != nullptr && options.recv_op != nullptr,
                   "partition: send_op and recv_op must be given (runtime::rpc_send_op())");
  CLEAVE_CHECK_ARG(options.step_begin <= static_cast<int>(graph.nodes.size()),
                   "partition: step_begin {} is past the graph's {} nodes", options.step_begin,
                   graph.nodes.size());
  Partition result;
  result.node_rank = resolve_ranks(graph, options);
  const ExpandedGraph e = expand_micro_batches(graph, result.node_rank, options);
  const SimulatedSchedule s = simulate_schedule(e, options.world_size);
  Cuts cuts = find_cuts(e, options);
  for (int r = 0; r < options.world_size; ++r) {
    result.ranks.push_back(build_rank(e, r, s, cuts, options));
  }
  result.cuts = std::move(cuts.edges);
  result.simulated_makespan = s.makespan;
  result.simulated_serial = s.serial;
  return result;
}

}  // namespace cleave::parallel

// Distributed graph partition (NOTE [Distributed graph partition] in cleave/parallel/partition.h).
//
// Three steps: resolve every node's rank; expand the graph over the micro-batches (a plain copy
// with one micro-batch); simulate a schedule of the expanded graph and emit each rank's nodes in
// the schedule's order, with RpcSend/RpcRecv on the cut edges.
#include "cleave/parallel/partition.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <tuple>

#include "cleave/ir/registry.h"

namespace cleave::parallel {
namespace {

using ir::Graph;
using ir::Node;
using ir::NodeKind;
using ir::TensorMeta;
using ir::ValueRef;

constexpr int kEverywhere = -1;  // inputs and constants: every rank holds them
constexpr int kUnset = -2;
constexpr int kMaxTags = 1 << 15;  // MPI's guaranteed tag bound, which the comm layer keeps
constexpr double kLatency = 20;    // estimated cost of a cut edge, in the units of op_cost

std::string describe(const Node& n) {
  return fmt::format("op {} ('{}', scope {})", n.op->name, n.name, n.scope);
}

std::vector<std::vector<int>> users_of(const Graph& g) {
  std::vector<std::vector<int>> users(g.nodes.size());
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    for (const ValueRef& v : g.nodes[i].inputs) {
      std::vector<int>& u = users[v.node];
      if (u.empty() || u.back() != static_cast<int>(i)) u.push_back(static_cast<int>(i));
    }
  }
  return users;
}

int step_begin_of(const Graph& g, const PartitionOptions& o) {
  return o.step_begin < 0 ? static_cast<int>(g.nodes.size()) : o.step_begin;
}

// ---- ranks ----

std::vector<int> resolve_ranks(const Graph& g, const PartitionOptions& o) {
  const int n = static_cast<int>(g.nodes.size());
  const int step_begin = step_begin_of(g, o);
  std::vector<int> rank(n, kUnset);
  for (int i = 0; i < n; ++i) {
    const Node& node = g.nodes[i];
    if (node.kind == NodeKind::kInput || node.kind == NodeKind::kConstant) {
      rank[i] = kEverywhere;
      continue;
    }
    if (!node.is_op()) continue;  // parameters: below
    if (o.use_placement && !node.placement.empty()) {
      const ir::Placement& p = node.placement;
      CLEAVE_CHECK_ARG(p.role == kWorkerRole,
                       "{} is placed on role '{}' (rank {}); only workers run graph ops (the "
                       "scheduler runs none): place it with role \"{}\"",
                       describe(node), p.role, p.rank, kWorkerRole);
      CLEAVE_CHECK_ARG(p.rank >= 0 && p.rank < o.world_size,
                       "{} is placed on {} rank {}; expected a rank in [0, {}): the job has {} "
                       "worker(s) (MS_WORKER_NUM)",
                       describe(node), kWorkerRole, p.rank, o.world_size, o.world_size);
      rank[i] = static_cast<int>(p.rank);
    } else if (i < step_begin) {
      rank[i] = 0;
    }
  }
  const std::vector<std::vector<int>> users = users_of(g);
  for (int i = 0; i < n; ++i) {
    if (g.nodes[i].kind != NodeKind::kParameter) continue;
    for (int u : users[i]) {
      if (rank[u] >= 0) {
        rank[i] = rank[u];
        break;
      }
    }
    if (rank[i] == kUnset) rank[i] = 0;
  }
  // The per-step part, last to first: an update runs where its parameter lives, another
  // unlabelled op with the op that consumes its result.
  for (int i = n - 1; i >= step_begin; --i) {
    if (rank[i] != kUnset) continue;
    const Node& node = g.nodes[i];
    int r = kUnset;
    if (node.op->mutates_inputs && !node.inputs.empty()) {
      r = rank[node.inputs[0].node];
    } else {
      for (int u : users[i]) {
        if (rank[u] >= 0) {
          r = rank[u];
          break;
        }
      }
    }
    rank[i] = r >= 0 ? r : 0;
  }
  return rank;
}

// ---- expansion over micro-batches (NOTE [Micro-batches]) ----

struct Expanded {
  Graph g;
  std::vector<int> rank;
  std::vector<int> micro;   // -1: once per step before the micro-batches; M: after them
  std::vector<int> origin;  // the node of the input graph it comes from (schedule priority)
  std::vector<bool> step;   // the per-step part
};

Node make_op(const ir::OpDef& op, std::vector<ValueRef> inputs, const Graph& g, std::string name,
             std::string scope) {
  Node n;
  n.kind = NodeKind::kOp;
  n.op = &op;
  std::vector<TensorMeta> metas;
  for (const ValueRef& v : inputs) metas.push_back(g.meta(v));
  n.outputs = op.infer(ir::InferContext{op, n.attrs, metas});
  n.inputs = std::move(inputs);
  n.name = std::move(name);
  n.scope = std::move(scope);
  return n;
}

Expanded expand(const Graph& g, const std::vector<int>& rank, const PartitionOptions& o) {
  const int n = static_cast<int>(g.nodes.size());
  const int M = o.micro_batches;
  const int step_begin = step_begin_of(g, o);
  std::vector<bool> per_micro(n, false);
  for (int i = 0; i < n; ++i) {
    const Node& node = g.nodes[i];
    if (node.kind == NodeKind::kInput) per_micro[i] = true;
    if (!node.is_op() || i >= step_begin) continue;
    for (const ValueRef& v : node.inputs) per_micro[i] = per_micro[i] || per_micro[v.node];
  }

  Expanded e;
  e.g.name = g.name;
  std::vector<std::vector<int>> idx(M, std::vector<int>(n, -1));
  auto add = [&](Node node, int r, int micro, int origin, bool step) {
    e.g.nodes.push_back(std::move(node));
    e.rank.push_back(r);
    e.micro.push_back(micro);
    e.origin.push_back(origin);
    e.step.push_back(step);
    return static_cast<int>(e.g.nodes.size()) - 1;
  };
  auto copy_of = [&](int i, int m) {
    Node c = g.nodes[i];
    for (ValueRef& v : c.inputs) {
      v.node = idx[m][v.node];
      CLEAVE_ASSERT(v.node >= 0, "partition: an input of node %{} is not expanded yet", i);
    }
    return c;
  };
  auto share = [&](int i, int j) {
    for (int m = 0; m < M; ++m) idx[m][i] = j;
  };
  for (int i = 0; i < n; ++i) {
    const NodeKind kind = g.nodes[i].kind;
    if (kind == NodeKind::kParameter || kind == NodeKind::kConstant) {
      share(i, add(g.nodes[i], rank[i], -1, i, false));
    }
  }
  for (int m = 0; m < M; ++m) {
    for (int k : g.inputs) {
      Node c = g.nodes[k];
      if (M > 1) c.name = fmt::format("{}_{}", c.name, m);
      idx[m][k] = add(std::move(c), kEverywhere, m, k, false);
      e.g.inputs.push_back(idx[m][k]);
    }
  }
  for (int i = 0; i < step_begin; ++i) {
    if (g.nodes[i].is_op() && !per_micro[i]) share(i, add(copy_of(i, 0), rank[i], -1, i, false));
  }
  for (int m = 0; m < M; ++m) {
    for (int i = 0; i < step_begin; ++i) {
      if (!g.nodes[i].is_op() || !per_micro[i]) continue;
      Node c = copy_of(i, m);
      if (M > 1) c.name = fmt::format("{}@mb{}", c.name, m);
      idx[m][i] = add(std::move(c), rank[i], m, i, false);
    }
  }

  // What the per-step part and the outputs read of the per-micro-batch part: the mean over the
  // micro-batches, computed on the rank that produces the value.
  std::map<std::pair<int, int>, ValueRef> averaged;
  auto boundary = [&](ValueRef v) -> ValueRef {
    const ValueRef first{idx[0][v.node], v.output};
    if (!per_micro[v.node] || M == 1) return first;
    auto it = averaged.find({v.node, v.output});
    if (it != averaged.end()) return it->second;
    const Node& p = g.nodes[v.node];
    const TensorMeta& meta = g.meta(v);
    CLEAVE_CHECK_ARG(is_floating(meta.dtype),
                     "micro-batching: '{}' ({} {}) is computed per micro-batch and read by the "
                     "optimizer or returned, but only floating values can be averaged over "
                     "micro-batches",
                     p.name, dtype_name(meta.dtype), meta.shape.to_string());
    const int r = std::max(rank[v.node], 0);
    static const ir::OpDef& add_op = ir::Registry::global().get("Add");
    static const ir::OpDef& mul_op = ir::Registry::global().get("Mul");
    const std::string scope = "Default/micro_batches";
    ValueRef acc = first;
    for (int m = 1; m < M; ++m) {
      Node sum = make_op(add_op, {acc, {idx[m][v.node], v.output}}, e.g,
                         fmt::format("{}.accumulate_{}", p.name, m), scope);
      acc = {add(std::move(sum), r, M, v.node, false), 0};
    }
    Node scale;
    scale.kind = NodeKind::kConstant;
    scale.value = Tensor::scalar(1.0 / M, meta.dtype);
    scale.outputs = {{scale.value.shape(), meta.dtype}};
    scale.name = "const";
    scale.scope = scope;
    scale.literal = true;
    const int scale_node = add(std::move(scale), kEverywhere, -1, v.node, false);
    Node mean = make_op(mul_op, {acc, {scale_node, 0}}, e.g, p.name + ".average", scope);
    acc = {add(std::move(mean), r, M, v.node, false), 0};
    averaged[{v.node, v.output}] = acc;
    return acc;
  };
  for (int i = step_begin; i < n; ++i) {
    if (!g.nodes[i].is_op()) continue;
    Node c = g.nodes[i];
    for (ValueRef& v : c.inputs) v = boundary(v);
    share(i, add(std::move(c), rank[i], M, i, true));
  }
  for (const ValueRef& v : g.outputs) e.g.outputs.push_back(boundary(v));
  return e;
}

// ---- schedule (NOTE [A deadlock-free order]) ----

// An estimate of an op's time: a fixed overhead, memory traffic, and for the ops that multiply
// (matmuls, convolutions and their backward) the square root of the product of the element
// counts of their operands and result, which is the multiply-add count of a matmul (mk * kn * mn
// = (mkn)^2) and close to it for a convolution.
double op_cost(const Graph& g, const Node& n) {
  double elements = 0, product = 1;
  for (const ValueRef& v : n.inputs) {
    const double c = static_cast<double>(g.meta(v).shape.numel());
    elements += c;
    product *= std::max(c, 1.0);
  }
  for (const TensorMeta& m : n.outputs) {
    const double c = static_cast<double>(m.shape.numel());
    elements += c;
    product *= std::max(c, 1.0);
  }
  double cost = 1 + elements / 4096;
  const std::string& name = n.op->name;
  if (name.find("MatMul") != std::string::npos || name.find("Conv") != std::string::npos) {
    cost += std::sqrt(product) / 4096;
  }
  return cost;
}

struct Schedule {
  std::vector<int> order;  // the op nodes of the expanded graph, by simulated start time
  double makespan = 0, serial = 0;
};

Schedule simulate(const Expanded& e, int world_size) {
  const Graph& g = e.g;
  const int n = static_cast<int>(g.nodes.size());
  std::vector<int> deps(n, 0);
  std::vector<std::vector<int>> succ(n);
  std::vector<double> ready(n, 0), finish(n, 0), start(n, 0), cost(n, 0);
  auto edge = [&](int from, int to) {
    succ[from].push_back(to);
    ++deps[to];
  };
  std::vector<int> nonstep_left(world_size, 0), first_step(world_size, -1),
      last_step(world_size, -1);
  for (int j = 0; j < n; ++j) {
    const Node& node = g.nodes[j];
    if (!node.is_op()) continue;
    cost[j] = op_cost(g, node);
    const int r = e.rank[j];
    for (const ValueRef& v : node.inputs) {
      if (g.nodes[v.node].is_op()) {
        edge(v.node, j);
      } else if (e.rank[v.node] >= 0 && e.rank[v.node] != r) {
        ready[j] = std::max(ready[j], kLatency);  // a parameter sent at the start of the step
      }
    }
    if (!e.step[j]) {
      ++nonstep_left[r];
    } else if (last_step[r] < 0) {
      first_step[r] = j;
      last_step[r] = j;
      ++deps[j];  // released when the rank's other work is scheduled
    } else {
      edge(last_step[r], j);
      last_step[r] = j;
    }
  }
  std::vector<int> eligible;
  for (int j = 0; j < n; ++j) {
    if (g.nodes[j].is_op() && deps[j] == 0) eligible.push_back(j);
  }
  for (int r = 0; r < world_size; ++r) {
    if (nonstep_left[r] == 0 && first_step[r] >= 0 && --deps[first_step[r]] == 0) {
      eligible.push_back(first_step[r]);
    }
  }
  std::vector<double> free_at(world_size, 0);
  std::vector<int> seq;
  Schedule s;
  while (!eligible.empty()) {
    size_t best = 0;
    auto key = [&](int j) {
      return std::make_tuple(std::max(free_at[e.rank[j]], ready[j]), e.micro[j], e.origin[j], j);
    };
    for (size_t k = 1; k < eligible.size(); ++k) {
      if (key(eligible[k]) < key(eligible[best])) best = k;
    }
    const int j = eligible[best];
    eligible[best] = eligible.back();
    eligible.pop_back();
    const int r = e.rank[j];
    start[j] = std::max(free_at[r], ready[j]);
    finish[j] = start[j] + cost[j];
    free_at[r] = finish[j];
    s.serial += cost[j];
    s.makespan = std::max(s.makespan, finish[j]);
    seq.push_back(j);
    for (int t : succ[j]) {
      ready[t] = std::max(ready[t], finish[j] + (e.rank[t] == r ? 0 : kLatency));
      if (--deps[t] == 0) eligible.push_back(t);
    }
    if (!e.step[j] && --nonstep_left[r] == 0 && first_step[r] >= 0) {
      ready[first_step[r]] = std::max(ready[first_step[r]], finish[j]);
      if (--deps[first_step[r]] == 0) eligible.push_back(first_step[r]);
    }
  }
  const auto ops =
      std::count_if(g.nodes.begin(), g.nodes.end(), [](const Node& x) { return x.is_op(); });
  CLEAVE_ASSERT(static_cast<int64_t>(seq.size()) == ops,
                "partition: the schedule placed {} of {} ops (a cycle?)", seq.size(), ops);
  // Every dependency finishes before its successor starts and costs are positive, so ordering
  // by start time keeps dependencies in order; ties keep the simulation's order.
  s.order = seq;
  std::stable_sort(s.order.begin(), s.order.end(),
                   [&](int a, int b) { return start[a] < start[b]; });
  return s;
}

// ---- cut edges and the per-rank graphs ----

struct Cuts {
  std::map<std::tuple<int, int, int>, int> tag;          // (node, output, destination) -> tag
  std::map<std::pair<int, int>, std::vector<int>> dsts;  // (node, output) -> destinations
  std::vector<CutEdge> edges;
};

Cuts find_cuts(const Expanded& e, const PartitionOptions& o) {
  const Graph& g = e.g;
  const std::vector<std::vector<int>> users = users_of(g);
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

Graph build_rank(const Expanded& e, int r, const Schedule& s, const Cuts& cuts,
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

bool has_placement(const ir::Graph& graph) {
  return std::any_of(graph.nodes.begin(), graph.nodes.end(),
                     [](const Node& n) { return n.is_op() && !n.placement.empty(); });
}

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
  const Expanded e = expand(graph, result.node_rank, options);
  const Schedule s = simulate(e, options.world_size);
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

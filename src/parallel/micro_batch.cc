// The expansion of a graph over its micro-batches: NOTE [Micro-batches] in
// cleave/parallel/partition.h.
#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <utility>

#include "cleave/ir/registry.h"
#include "parallel/partition_steps.h"

namespace cleave::parallel {
namespace {

using ir::Graph;
using ir::Node;
using ir::NodeKind;
using ir::TensorMeta;
using ir::ValueRef;

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

}  // namespace

ExpandedGraph expand_micro_batches(const Graph& g, const std::vector<int>& rank,
                                   const PartitionOptions& o) {
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

  ExpandedGraph e;
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

}  // namespace cleave::parallel

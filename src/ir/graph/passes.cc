// Verifier, dead-code elimination, common-subexpression elimination and constant folding.
#include "cleave/ir/passes.h"

#include <fmt/format.h>

#include <map>
#include <tuple>

#include "cleave/ir/dispatch.h"

namespace cleave::ir {
namespace {

bool is_random(const OpDef& op) { return op.random; }

// Keeps the nodes marked in `keep` (in order) and rewrites every reference through `redirect`
// (applied before renumbering): the one place that renumbers a graph.
void compact(Graph& g, const std::vector<bool>& keep, const std::vector<int>& redirect) {
  std::vector<int> new_index(g.nodes.size(), -1);
  std::vector<Node> nodes;
  nodes.reserve(g.nodes.size());
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    if (!keep[i]) continue;
    new_index[i] = static_cast<int>(nodes.size());
    nodes.push_back(std::move(g.nodes[i]));
  }
  auto fix = [&](ValueRef& v) {
    v.node = new_index[redirect[v.node]];
    CLEAVE_ASSERT(v.node >= 0, "compact: a kept value refers to a removed node");
  };
  for (Node& n : nodes) {
    for (ValueRef& v : n.inputs) fix(v);
  }
  for (ValueRef& v : g.outputs) fix(v);
  for (int& i : g.inputs) i = new_index[i];
  g.nodes = std::move(nodes);
}

std::vector<int> identity(size_t n) {
  std::vector<int> r(n);
  for (size_t i = 0; i < n; ++i) r[i] = static_cast<int>(i);
  return r;
}

std::string metas_to_string(const std::vector<TensorMeta>& metas) {
  std::string s;
  for (const TensorMeta& m : metas)
    s += (s.empty() ? "" : ", ") + fmt::format("{} {}", dtype_name(m.dtype), m.shape.to_string());
  return "(" + s + ")";
}

}  // namespace

std::string value_name(const Graph& g, ValueRef v) {
  if (v.node < 0 || v.node >= static_cast<int>(g.nodes.size())) return fmt::format("%{}", v.node);
  const Node& n = g.nodes[v.node];
  switch (n.kind) {
    case NodeKind::kInput:
    case NodeKind::kParameter: {
      int para = 0;
      for (int i = 0; i <= v.node; ++i) {
        const NodeKind k = g.nodes[i].kind;
        if (k == NodeKind::kInput || k == NodeKind::kParameter) ++para;
      }
      return fmt::format("%para{}_{}", para, n.name);
    }
    case NodeKind::kConstant:
      return fmt::format("%const{}", v.node);
    case NodeKind::kOp:
      break;
  }
  if (n.outputs.size() == 1) return fmt::format("%{}", v.node);
  return fmt::format("%{}[{}]", v.node, v.output);
}

std::string node_label(const Graph& g, int node) {
  const Node& n = g.nodes[node];
  if (n.is_op()) return fmt::format("%{} ({} '{}')", node, n.op->name, n.name);
  return value_name(g, {node, 0});
}

void verify(const Graph& g, Bindings bindings) {
  const int count = static_cast<int>(g.nodes.size());
  // `user` is a node, or `count` for the graph's outputs (which has no node to name: reading
  // g.nodes[count] was a heap-buffer-overflow that ASan found).
  auto user_label = [&](int user) {
    return user < count ? node_label(g, user) : std::string("the graph");
  };
  auto check_ref = [&](ValueRef v, int user, const std::string& where) {
    CLEAVE_CHECK_ARG(v.node >= 0 && v.node < count,
                     "verify '{}': {} {} refers to node %{}, which does not exist (a dangling "
                     "value; the graph has {} nodes)",
                     g.name, user_label(user), where, v.node, count);
    CLEAVE_CHECK_ARG(v.node < user,
                     "verify '{}': {} {} refers to {}, which does not come before it: the graph "
                     "has a cycle or is not in topological order",
                     g.name, user_label(user), where, node_label(g, v.node));
    const Node& src = g.nodes[v.node];
    CLEAVE_CHECK_ARG(v.output >= 0 && v.output < static_cast<int>(src.outputs.size()),
                     "verify '{}': {} {} refers to output {} of {}, which has {} output(s) (a "
                     "dangling value)",
                     g.name, user_label(user), where, v.output, node_label(g, v.node),
                     src.outputs.size());
  };
  for (int i = 0; i < count; ++i) {
    const Node& n = g.nodes[i];
    if (!n.is_op()) {
      CLEAVE_CHECK_ARG(n.inputs.empty() && n.outputs.size() == 1,
                       "verify '{}': {} must have no inputs and one output", g.name,
                       node_label(g, i));
      if (n.kind != NodeKind::kInput) {
        const bool shape_ok =
            bindings == Bindings::kDeferred || n.value.shape() == n.outputs[0].shape;
        CLEAVE_CHECK_ARG(n.value.defined() && shape_ok && n.value.dtype() == n.outputs[0].dtype,
                         "verify '{}': {} is recorded as {} but its bound tensor is {}", g.name,
                         node_label(g, i), metas_to_string(n.outputs),
                         n.value.defined() ? metas_to_string({{n.value.shape(), n.value.dtype()}})
                                           : std::string("undefined"));
      }
      continue;
    }
    CLEAVE_CHECK_ARG(n.op != nullptr, "verify '{}': node %{} is an op node without a primitive",
                     g.name, i);
    std::vector<TensorMeta> in_metas;
    for (size_t k = 0; k < n.inputs.size(); ++k) {
      check_ref(n.inputs[k], i, fmt::format("input {}", k));
      in_metas.push_back(g.meta(n.inputs[k]));
    }
    if (n.op->num_inputs != OpDef::kVariadic) {
      CLEAVE_CHECK_ARG(static_cast<int>(n.inputs.size()) == n.op->num_inputs,
                       "verify '{}': {} has {} inputs; {} takes {}", g.name, node_label(g, i),
                       n.inputs.size(), n.op->name, n.op->num_inputs);
    }
    std::vector<TensorMeta> inferred;
    try {
      inferred = n.op->infer(InferContext{*n.op, n.attrs, in_metas});
    } catch (const Error& e) {
      CLEAVE_FAIL("verify '{}': {} does not type-check: {}", g.name, node_label(g, i), e.what());
    }
    bool same = inferred.size() == n.outputs.size();
    for (size_t k = 0; same && k < inferred.size(); ++k) {
      same = inferred[k].shape == n.outputs[k].shape && inferred[k].dtype == n.outputs[k].dtype;
    }
    CLEAVE_CHECK_ARG(same,
                     "verify '{}': {} records outputs {} but its inputs {} give {}: a pass "
                     "changed a shape or dtype inconsistently",
                     g.name, node_label(g, i), metas_to_string(n.outputs),
                     metas_to_string(in_metas), metas_to_string(inferred));
  }
  for (int in : g.inputs) {
    CLEAVE_CHECK_ARG(in >= 0 && in < count && g.nodes[in].kind == NodeKind::kInput,
                     "verify '{}': graph input %{} is not an input node", g.name, in);
  }
  for (size_t k = 0; k < g.outputs.size(); ++k)
    check_ref(g.outputs[k], count, fmt::format("output {}", k));
}

int dead_code_elimination(Graph& g) {
  const size_t count = g.nodes.size();
  std::vector<bool> live(count, false);
  for (const ValueRef& v : g.outputs) live[v.node] = true;
  for (size_t i = 0; i < count; ++i) {
    const Node& n = g.nodes[i];
    if (n.has_side_effect() || n.kind == NodeKind::kInput || n.kind == NodeKind::kParameter) {
      live[i] = true;
    }
  }
  for (size_t i = count; i-- > 0;) {
    if (!live[i]) continue;
    for (const ValueRef& v : g.nodes[i].inputs) live[v.node] = true;
  }
  int removed = 0;
  for (bool l : live) removed += l ? 0 : 1;
  if (removed > 0) compact(g, live, identity(count));
  return removed;
}

void reorder_nodes(Graph& g, const std::vector<int>& order) {
  const size_t count = g.nodes.size();
  CLEAVE_CHECK_ARG(order.size() == count,
                   "reorder_nodes '{}': the order has {} entries; the graph has {} nodes", g.name,
                   order.size(), count);
  std::vector<int> new_index(count, -1);
  for (size_t k = 0; k < count; ++k) {
    const int old = order[k];
    CLEAVE_CHECK_ARG(
        old >= 0 && static_cast<size_t>(old) < count && new_index[old] < 0,
        "reorder_nodes '{}': entry {} is %{}, which is {}", g.name, k, old,
        old >= 0 && static_cast<size_t>(old) < count ? "listed twice" : "not a node of the graph");
    new_index[old] = static_cast<int>(k);
  }
  for (size_t k = 0; k < count; ++k) {
    for (const ValueRef& v : g.nodes[order[k]].inputs) {
      CLEAVE_CHECK_ARG(new_index[v.node] < static_cast<int>(k),
                       "reorder_nodes '{}': {} would come before its input {}", g.name,
                       node_label(g, order[k]), node_label(g, v.node));
    }
  }
  std::vector<Node> nodes;
  nodes.reserve(count);
  for (int old : order) nodes.push_back(std::move(g.nodes[old]));
  for (Node& n : nodes) {
    for (ValueRef& v : n.inputs) v.node = new_index[v.node];
  }
  for (ValueRef& v : g.outputs) v.node = new_index[v.node];
  for (int& i : g.inputs) i = new_index[i];
  g.nodes = std::move(nodes);
}

std::vector<int> storage_roots(const Graph& g) {
  std::vector<int> root(g.nodes.size());
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    const Node& n = g.nodes[i];
    root[i] = n.is_op() && n.op->output_is_view && !n.inputs.empty() ? root[n.inputs[0].node]
                                                                     : static_cast<int>(i);
  }
  return root;
}

int common_subexpression_elimination(Graph& g) {
  const size_t count = g.nodes.size();
  std::vector<int> redirect = identity(count);
  std::vector<bool> keep(count, true);
  using Key = std::tuple<const OpDef*, std::string, std::vector<std::pair<int, int>>>;
  std::map<Key, int> seen;
  int merged = 0;
  for (size_t i = 0; i < count; ++i) {
    Node& n = g.nodes[i];
    for (ValueRef& v : n.inputs) v.node = redirect[v.node];
    if (!n.is_op()) continue;
    if (n.op->mutates_inputs) {  // the inputs of later ops may hold other values now
      seen.clear();
      continue;
    }
    if (n.op->communicates || is_random(*n.op)) continue;
    std::vector<std::pair<int, int>> ins;
    for (const ValueRef& v : n.inputs) ins.emplace_back(v.node, v.output);
    Key key{n.op, n.attrs.to_string(), std::move(ins)};
    auto [it, inserted] = seen.emplace(std::move(key), static_cast<int>(i));
    if (!inserted) {
      redirect[i] = it->second;
      keep[i] = false;
      ++merged;
    }
  }
  for (ValueRef& v : g.outputs) v.node = redirect[v.node];
  if (merged > 0) compact(g, keep, identity(count));
  return merged;
}

int constant_folding(Graph& g) {
  int folded = 0;
  for (Node& n : g.nodes) {
    if (!n.is_op() || n.has_side_effect() || is_random(*n.op) || n.outputs.size() != 1) continue;
    bool all_literal = !n.inputs.empty();
    std::vector<Tensor> inputs;
    for (const ValueRef& v : n.inputs) {
      const Node& src = g.nodes[v.node];
      all_literal = all_literal && src.kind == NodeKind::kConstant && src.literal;
      if (!all_literal) break;
      inputs.push_back(src.value);
    }
    if (!all_literal) continue;
    NoGradGuard no_grad;
    Tensor result = call1(*n.op, inputs, n.attrs);
    if (n.op->output_is_view) result = result.clone();  // own its storage: a literal
    n.kind = NodeKind::kConstant;
    n.op = nullptr;
    n.attrs = {};
    n.inputs.clear();
    n.value = result;
    n.literal = true;
    ++folded;
  }
  if (folded > 0) dead_code_elimination(g);
  return folded;
}

}  // namespace cleave::ir

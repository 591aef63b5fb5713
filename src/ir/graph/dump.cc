// Text and Graphviz forms of a graph (seed 003's IR dump style), and the text form of a strategy
// (cleave/ir/graph.h).
#include "cleave/ir/dump.h"

#include <fmt/format.h>

#include "cleave/ir/passes.h"

namespace cleave::ir {

std::string strategy_to_string(const Strategy& strategy) {
  std::string out = "(";
  for (size_t i = 0; i < strategy.size(); ++i) {
    if (i > 0) out += ", ";
    out += "(";
    for (size_t j = 0; j < strategy[i].size(); ++j) {
      out += (j > 0 ? ", " : "") + std::to_string(strategy[i][j]);
    }
    out += ")";
  }
  return out + ")";
}

namespace {

std::string annotations(const Node& n) {
  std::string out;
  if (!n.strategy.empty()) {
    out += " {in_strategy: " + strategy_to_string(n.strategy) +
           (n.strategy_derived ? ", derived: true}" : "}");
  }
  auto layouts = [](const std::vector<TensorLayout>& ls) {
    std::string text = "(";
    for (size_t i = 0; i < ls.size(); ++i) text += (i > 0 ? ", " : "") + ls[i].to_string();
    return text + ")";
  };
  if (!n.in_layouts.empty()) out += " {in_layouts: " + layouts(n.in_layouts) + "}";
  if (!n.out_strategy.empty()) out += " {out_strategy: " + strategy_to_string(n.out_strategy) + "}";
  if (!n.out_layouts.empty()) out += " {out_layouts: " + layouts(n.out_layouts) + "}";
  if (!n.placement.empty()) {
    out += fmt::format(" {{placement: (role: {}, rank: {})}}",
                       n.placement.role.empty() ? "-" : n.placement.role, n.placement.rank);
  }
  return out;
}

std::string kind_name(NodeKind k) {
  switch (k) {
    case NodeKind::kInput:
      return "input";
    case NodeKind::kParameter:
      return "parameter";
    case NodeKind::kConstant:
      return "constant";
    case NodeKind::kOp:
      return "op";
  }
  return "?";
}

}  // namespace

std::string dot_escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    out += c;
  }
  return out;
}

std::string meta_to_string(const TensorMeta& meta) {
  return fmt::format("<Tensor[{}], {}>", dtype_name(meta.dtype), meta.shape.to_string());
}

std::string dump_text(const Graph& g, const NodeNotes& notes) {
  std::string out;
  int params = 0;
  for (const Node& n : g.nodes) params += n.kind == NodeKind::kParameter ? 1 : 0;
  out += fmt::format("# IR entry: @{}\n# Total inputs: {}\n# Total params: {}\n# Total ops: {}\n",
                     g.name, g.inputs.size(), params, g.num_ops());
  std::string args;
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    const Node& n = g.nodes[i];
    if (n.is_op()) continue;
    const std::string name = value_name(g, {static_cast<int>(i), 0});
    if (n.kind != NodeKind::kConstant) args += (args.empty() ? "" : ", ") + name;
    out += fmt::format("{}: {} : {}{}", name, meta_to_string(n.outputs[0]), kind_name(n.kind),
                       n.kind == NodeKind::kConstant && n.literal ? " (literal)" : "");
    if (i < notes.size() && !notes[i].empty()) out += "  # " + notes[i];
    out += "\n";
  }
  out += fmt::format("\nsubgraph @{}({}) {{\n", g.name, args);
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    const Node& n = g.nodes[i];
    if (!n.is_op()) continue;
    std::string ins, in_types, out_types;
    for (const ValueRef& v : n.inputs) {
      ins += (ins.empty() ? "" : ", ") + value_name(g, v);
      in_types += (in_types.empty() ? "" : ", ") + meta_to_string(g.meta(v));
    }
    for (const TensorMeta& m : n.outputs)
      out_types += (out_types.empty() ? "" : ", ") + meta_to_string(m);
    out += fmt::format("  %{}(out) = {}({}) {{instance name: {}}}", i, n.op->name, ins, n.name);
    if (!n.attrs.empty()) out += " primitive_attrs: " + n.attrs.to_string();
    if (n.has_side_effect()) out += " {side_effect: true}";
    out += annotations(n) + "\n";
    out += fmt::format("      : ({}) -> ({})\n", in_types, out_types);
    out += fmt::format("      # scope: ({})\n", n.scope);
    if (i < notes.size() && !notes[i].empty()) out += "      # " + notes[i] + "\n";
  }
  std::string rets;
  for (const ValueRef& v : g.outputs) rets += (rets.empty() ? "" : ", ") + value_name(g, v);
  out += fmt::format("  return({})\n}}\n", rets);
  return out;
}

std::string dump_dot(const Graph& g) {
  std::string out =
      fmt::format("digraph \"{}\" {{\n  rankdir=TB;\n  node [fontsize=10];\n", dot_escape(g.name));
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    const Node& n = g.nodes[i];
    const std::string meta = meta_to_string(n.outputs.empty() ? TensorMeta{} : n.outputs[0]);
    if (n.is_op()) {
      out += fmt::format("  n{} [shape=box, label=\"%{} {}\\n{}\\n{}\"{}];\n", i, i, n.op->name,
                         dot_escape(n.name), n.outputs.empty() ? "(side effect)" : dot_escape(meta),
                         n.has_side_effect() ? ", style=filled, fillcolor=lightpink" : "");
    } else {
      out +=
          fmt::format("  n{} [shape=ellipse, label=\"{}\\n{}\"{}];\n", i,
                      dot_escape(value_name(g, {static_cast<int>(i), 0})), dot_escape(meta),
                      n.kind == NodeKind::kParameter ? ", style=filled, fillcolor=lightblue" : "");
    }
    for (const ValueRef& v : n.inputs) out += fmt::format("  n{} -> n{};\n", v.node, i);
  }
  for (size_t k = 0; k < g.outputs.size(); ++k) {
    out += fmt::format("  out{} [shape=doublecircle, label=\"out {}\"];\n  n{} -> out{};\n", k, k,
                       g.outputs[k].node, k);
  }
  return out + "}\n";
}

}  // namespace cleave::ir

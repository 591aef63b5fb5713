// cleave-ir --ranks (NOTE [Per-rank dumps and cut edges] in ir_ranks.h).
#include "ir_ranks.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <fstream>
#include <regex>
#include <set>
#include <sstream>
#include <stdexcept>

#include "cleave/ir/dump.h"
#include "cleave/ir/parse.h"
#include "cleave/ir/passes.h"

namespace fs = std::filesystem;

namespace cleave::tools {
namespace {

// How the per-rank view names a value: "%12" for every output of op 12, value_name otherwise.
std::string name_of(const ir::Graph& g, const ir::ValueRef& v) {
  return g.nodes[static_cast<size_t>(v.node)].is_op() ? fmt::format("%{}", v.node)
                                                      : ir::value_name(g, {v.node, 0});
}

long long int_attr(const ir::Node& n, const char* key) { return n.attrs.get_or<int64_t>(key, -1); }

}  // namespace

RankGraph parse_rank_dump(const fs::path& path, int rank) {
  ir::ParsedGraph parsed;
  try {
    parsed = ir::parse_file(path);
  } catch (const std::exception& e) {
    throw std::runtime_error(e.what());
  }
  const ir::Graph& graph = parsed.graph;
  RankGraph g;
  g.rank = rank;
  g.path = path;
  g.entry = graph.name;
  for (size_t i = 0; i < graph.nodes.size(); ++i) {
    const ir::Node& n = graph.nodes[i];
    const ir::ValueRef self{static_cast<int>(i), 0};
    if (!n.is_op()) {
      const char* kind = n.kind == ir::NodeKind::kInput       ? "input"
                         : n.kind == ir::NodeKind::kParameter ? "parameter"
                                                              : "constant";
      g.values.push_back({.name = name_of(graph, self), .kind = kind});
      continue;
    }
    IrValue v{.name = name_of(graph, self), .kind = "op", .op = n.op->name, .instance = n.name};
    for (const ir::ValueRef& in : n.inputs) v.inputs.push_back(name_of(graph, in));
    v.tag = int_attr(n, "tag");
    v.dst_rank = int_attr(n, "dst_rank");
    v.src_rank = int_attr(n, "src_rank");
    ++g.ops;
    if (v.op == "RpcSend") ++g.sends;
    if (v.op == "RpcRecv") ++g.recvs;
    g.values.push_back(std::move(v));
  }
  for (const ir::ValueRef& v : graph.outputs) g.outputs.push_back(name_of(graph, v));
  return g;
}

PartitionView read_partition(const fs::path& dir, const std::string& stage) {
  if (!fs::is_directory(dir)) throw std::runtime_error("'" + dir.string() + "' is not a folder");
  static const std::regex dump_name(R"(^(.+)_rank(\d+)\.ir$)");
  std::map<std::string, std::map<int, fs::path>> stages;
  for (const fs::directory_entry& entry : fs::directory_iterator(dir)) {
    const std::string name = entry.path().filename().string();
    std::smatch m;
    if (entry.is_regular_file() && std::regex_match(name, m, dump_name)) {
      stages[m[1]][std::stoi(m[2])] = entry.path();
    }
  }
  PartitionView view;
  if (stage.empty()) {
    if (stages.empty()) {
      throw std::runtime_error("no per-rank dumps (<stage>_rank<R>.ir) in '" + dir.string() +
                               "'; expected e.g. 15_partition_rank0.ir (save_graphs >= 1)");
    }
    if (stages.size() > 1) {
      std::string names;
      for (const auto& [name, files] : stages) names += (names.empty() ? "" : ", ") + name;
      throw std::runtime_error("'" + dir.string() + "' holds per-rank dumps of several stages (" +
                               names + "); choose one with --stage");
    }
    view.stage = stages.begin()->first;
  } else {
    view.stage = stage;
    if (stages.count(stage) == 0) {
      throw std::runtime_error("no dumps " + stage + "_rank<R>.ir in '" + dir.string() + "'");
    }
  }
  for (const auto& [rank, path] : stages[view.stage]) {
    view.ranks.push_back(parse_rank_dump(path, rank));
  }
  return view;
}

void match_cut_edges(PartitionView& view) {
  struct End {
    int rank;
    const IrValue* value;
  };
  std::map<long long, std::vector<End>> sends, recvs;
  std::set<int> ranks;
  for (const RankGraph& g : view.ranks) {
    ranks.insert(g.rank);
    for (const IrValue& v : g.values) {
      if (v.op != "RpcSend" && v.op != "RpcRecv") continue;
      if (v.tag < 0) {
        view.errors.push_back(
            fmt::format("{} {} on rank {} has no tag attribute", v.op, v.name, g.rank));
        continue;
      }
      (v.op == "RpcSend" ? sends : recvs)[v.tag].push_back({g.rank, &v});
    }
  }
  auto where = [](const std::string& op, const End& e) {
    return fmt::format("{} {} on rank {}", op, e.value->name, e.rank);
  };
  std::set<long long> tags;
  for (const auto& [tag, ends] : sends) tags.insert(tag);
  for (const auto& [tag, ends] : recvs) tags.insert(tag);
  for (long long tag : tags) {
    const std::vector<End>& s = sends[tag];
    const std::vector<End>& r = recvs[tag];
    const std::string t = fmt::format("tag {}", tag);
    if (s.size() > 1 || r.size() > 1) {
      std::string list;
      for (const End& e : s) list += (list.empty() ? "" : ", ") + where("RpcSend", e);
      for (const End& e : r) list += (list.empty() ? "" : ", ") + where("RpcRecv", e);
      view.errors.push_back(t + " is used by more than one send or recv: " + list);
      continue;
    }
    // The end of the partner that is missing: on a rank with a dump, or on one without.
    auto partner = [&](long long rank) {
      return ranks.count(static_cast<int>(rank)) != 0 ? fmt::format(" on rank {}", rank)
                                                      : fmt::format(": rank {} has no dump", rank);
    };
    if (r.empty()) {
      view.errors.push_back(fmt::format("{} ({}, dst_rank {}) has no matching RpcRecv{}",
                                        where("RpcSend", s[0]), t, s[0].value->dst_rank,
                                        partner(s[0].value->dst_rank)));
      continue;
    }
    if (s.empty()) {
      view.errors.push_back(fmt::format("{} ({}, src_rank {}) has no matching RpcSend{}",
                                        where("RpcRecv", r[0]), t, r[0].value->src_rank,
                                        partner(r[0].value->src_rank)));
      continue;
    }
    const End& send = s[0];
    const End& recv = r[0];
    if (send.value->dst_rank != recv.rank || recv.value->src_rank != send.rank) {
      view.errors.push_back(fmt::format(
          "{} (dst_rank {}) and {} (src_rank {}) share {} but do not name each other's rank",
          where("RpcSend", send), send.value->dst_rank, where("RpcRecv", recv),
          recv.value->src_rank, t));
      continue;
    }
    view.cut_edges.push_back({.tag = tag,
                              .from_rank = send.rank,
                              .to_rank = recv.rank,
                              .send = send.value->name,
                              .recv = recv.value->name});
  }
}

std::string partition_dot(const PartitionView& view) {
  std::ostringstream out;
  out << "digraph \"" << cleave::ir::dot_escape(view.stage) << "\" {\n"
      << "  rankdir=TB;\n  compound=true;\n  node [fontsize=10];\n";
  // Node ids: r<rank>_<index in the rank's values>; names such as %para3_fc1.weight are labels.
  auto id_of = [](const RankGraph& g, const std::string& name) -> std::string {
    for (size_t i = 0; i < g.values.size(); ++i) {
      if (g.values[i].name == name) return fmt::format("r{}_{}", g.rank, i);
    }
    return "";
  };
  for (const RankGraph& g : view.ranks) {
    out << "  subgraph cluster_rank" << g.rank << " {\n"
        << "    label=\"rank " << g.rank << ": " << g.ops << " ops, " << g.sends << " sends, "
        << g.recvs << " recvs\";\n    style=rounded;\n";
    for (size_t i = 0; i < g.values.size(); ++i) {
      const IrValue& v = g.values[i];
      const std::string id = fmt::format("r{}_{}", g.rank, i);
      if (v.kind == "op") {
        std::string style;
        // Escaped parts joined by Graphviz's line break "\\n".
        std::string label = cleave::ir::dot_escape(v.name + " " + v.op);
        if (v.op == "RpcSend" || v.op == "RpcRecv") {
          style = ", style=filled, fillcolor=gold";
          label += v.op == "RpcSend" ? fmt::format("\\ntag {}, to rank {}", v.tag, v.dst_rank)
                                     : fmt::format("\\ntag {}, from rank {}", v.tag, v.src_rank);
        } else if (!v.instance.empty()) {
          label += "\\n" + cleave::ir::dot_escape(v.instance);
        }
        out << "    " << id << " [shape=box, label=\"" << label << "\"" << style << "];\n";
      } else {
        out << "    " << id << " [shape=ellipse, label=\"" << cleave::ir::dot_escape(v.name) << "\""
            << (v.kind == "parameter" ? ", style=filled, fillcolor=lightblue" : "") << "];\n";
      }
      for (const std::string& input : v.inputs) {
        const std::string from = id_of(g, input);
        if (!from.empty()) out << "    " << from << " -> " << id << ";\n";
      }
    }
    for (size_t k = 0; k < g.outputs.size(); ++k) {
      const std::string from = id_of(g, g.outputs[k]);
      if (from.empty()) continue;
      const std::string id = fmt::format("r{}_out{}", g.rank, k);
      out << "    " << id << " [shape=doublecircle, label=\"out " << k << "\"];\n"
          << "    " << from << " -> " << id << ";\n";
    }
    out << "  }\n";
  }
  auto rank_of = [&](int rank) -> const RankGraph& {
    return *std::find_if(view.ranks.begin(), view.ranks.end(),
                         [&](const RankGraph& g) { return g.rank == rank; });
  };
  for (const CutEdge& e : view.cut_edges) {
    out << "  " << id_of(rank_of(e.from_rank), e.send) << " -> "
        << id_of(rank_of(e.to_rank), e.recv)
        << " [style=dashed, color=red, penwidth=2, label=\"tag " << e.tag
        << "\", fontcolor=red];\n";
  }
  out << "}\n";
  return out.str();
}

}  // namespace cleave::tools

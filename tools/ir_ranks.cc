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

namespace fs = std::filesystem;

namespace cleave::tools {
namespace {

long long find_attr(const std::string& attrs, const std::string& key) {
  const std::regex pattern("(^|[{,]\\s*)" + key + ": (\\d+)");
  std::smatch m;
  if (std::regex_search(attrs, m, pattern)) return std::stoll(m[2]);
  return -1;
}

// "%3[1]" -> "%3"; other names unchanged.
std::string value_of(std::string ref) {
  const size_t bracket = ref.find('[');
  if (bracket != std::string::npos && ref.size() > 1 && std::isdigit(ref[1]) != 0) {
    ref.resize(bracket);
  }
  return ref;
}

std::vector<std::string> split_refs(const std::string& args) {
  std::vector<std::string> refs;
  static const std::regex ref(R"(%[^,\s()]+)");
  for (auto it = std::sregex_iterator(args.begin(), args.end(), ref); it != std::sregex_iterator();
       ++it) {
    refs.push_back(value_of(it->str()));
  }
  return refs;
}

}  // namespace

RankGraph parse_rank_dump(const fs::path& path, int rank) {
  std::ifstream in(path);
  if (!in) throw std::runtime_error("cannot read '" + path.string() + "'");
  static const std::regex entry_line(R"(^# IR entry: @(\S+))");
  static const std::regex value_line(R"(^(%\S+): <[^>]*> : (input|parameter|constant))");
  // The op line: %N(out) = Op(args) {instance name: ...} [primitive_attrs: {...}] ...
  static const std::regex op_line(
      R"(^\s+(%\d+)\(out\) = ([A-Za-z0-9_]+)\(([^)]*)\)(?: \{instance name: ([^}]*)\})?(.*)$)");
  static const std::regex attrs_part(R"(primitive_attrs: (\{[^}]*\}))");
  static const std::regex return_line(R"(^\s+return\((.*)\)\s*$)");
  RankGraph g;
  g.rank = rank;
  g.path = path;
  std::string line;
  std::smatch m;
  while (std::getline(in, line)) {
    if (std::regex_search(line, m, entry_line)) {
      g.entry = m[1];
    } else if (std::regex_search(line, m, value_line)) {
      g.values.push_back({.name = m[1], .kind = m[2]});
    } else if (std::regex_search(line, m, op_line)) {
      IrValue v{.name = m[1], .kind = "op", .op = m[2], .instance = m[4]};
      v.inputs = split_refs(m[3]);
      const std::string rest = m[5];
      std::smatch a;
      if (std::regex_search(rest, a, attrs_part)) {
        const std::string attrs = a[1];
        v.tag = find_attr(attrs, "tag");
        v.dst_rank = find_attr(attrs, "dst_rank");
        v.src_rank = find_attr(attrs, "src_rank");
      }
      ++g.ops;
      if (v.op == "RpcSend") ++g.sends;
      if (v.op == "RpcRecv") ++g.recvs;
      g.values.push_back(std::move(v));
    } else if (std::regex_search(line, m, return_line)) {
      g.outputs = split_refs(m[1]);
    }
  }
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
                               "'; expected e.g. 14_partition_rank0.ir (save_graphs >= 1)");
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

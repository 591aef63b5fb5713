// cleave-ir: summarises an IR dump (save_graphs) and renders its graph with Graphviz.
//
//   cleave-ir DUMP [--render svg|png|none] [--out FILE]
//   cleave-ir --ranks DIR [--stage NAME] [--render svg|png|none] [--out FILE]
//
// DUMP is NN_<stage>.ir or NN_<stage>.dot; the other file of the pair is found next to it. The
// summary (from the .ir) lists the op count by primitive, the parameters with their types, and
// the memory plan's peak (the end of the highest buffer of the "# buffer:" notes, which only the
// NN_execute stage carries), and for a parallel step (SEMI_AUTO_PARALLEL) how many operators have
// a given or derived strategy and the communication operators by group (their rank lists).
// Rendering runs Graphviz's `dot` (Debian package graphviz) on the .dot and writes FILE (default:
// the dump's name with .svg or .png).
//
// --ranks reads the per-rank dumps DIR/<stage>_rank<R>.ir of a partitioned graph (Cell::place;
// NAME defaults to the only stage with per-rank dumps in DIR, e.g. 14_partition), prints each
// rank's op, send and recv counts and the cut edges (RpcSend -> RpcRecv, by tag), and writes one
// Graphviz file with a cluster per rank and the cut edges between them: FILE with the extension
// .dot (default DIR/<stage>_ranks.dot), rendered to FILE (default DIR/<stage>_ranks.svg). A send
// or recv whose tag has no partner is reported as an error (NOTE [Per-rank dumps and cut edges]
// in tools/ir_ranks.h); the .dot is still written, but not rendered.
//
// Exit status 0 on success, 1 on a bad dump, mismatched tags or a failed render, 2 on bad usage.
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <regex>
#include <string>
#include <vector>

#include "ir_ranks.h"

namespace fs = std::filesystem;

namespace {

struct Summary {
  std::string entry;
  std::map<std::string, int> ops;
  // A parallel step's communication: "AllReduce over ranks (0, 1, 2, 3)" -> count; and how many
  // ops carry a strategy given with shard() and a derived one.
  std::map<std::string, int> comm;
  int given = 0, derived = 0;
  std::vector<std::string> params;
  int inputs = 0, constants = 0, ops_total = 0;
  long long peak_bytes = -1;
};

Summary summarise(std::istream& in) {
  static const std::regex op_line(R"(^\s+%\d+\(out\) = ([A-Za-z0-9_]+)\()");
  static const std::regex value_line(R"(^(%\S+): (<[^>]*>) : (input|parameter|constant))");
  static const std::regex buffer_note(R"(\[(\d+), \+(\d+)\))");
  static const std::regex entry_line(R"(^# IR entry: @(\S+))");
  static const std::regex rank_list(R"(rank_list: (\([0-9, ]+\)))");
  Summary s;
  std::string line;
  std::smatch m;
  while (std::getline(in, line)) {
    if (std::regex_search(line, m, entry_line)) {
      s.entry = m[1];
    } else if (std::regex_search(line, m, op_line)) {
      ++s.ops[m[1]];
      ++s.ops_total;
      std::smatch r;
      if (std::regex_search(line, r, rank_list))
        ++s.comm[std::string(m[1]) + " over ranks " + std::string(r[1])];
      if (line.find("{in_strategy: ") != std::string::npos) {
        ++(line.find("derived: true") != std::string::npos ? s.derived : s.given);
      }
    } else if (std::regex_search(line, m, value_line)) {
      if (m[3] == "parameter") s.params.push_back(std::string(m[1]) + " " + std::string(m[2]));
      if (m[3] == "input") ++s.inputs;
      if (m[3] == "constant") ++s.constants;
    } else if (line.find("# buffer: ") != std::string::npos) {
      for (auto it = std::sregex_iterator(line.begin(), line.end(), buffer_note);
           it != std::sregex_iterator(); ++it) {
        const long long end = std::stoll((*it)[1]) + std::stoll((*it)[2]);
        if (end > s.peak_bytes) s.peak_bytes = end;
      }
    }
  }
  return s;
}

void print(const Summary& s, const fs::path& path) {
  std::cout << "graph @" << (s.entry.empty() ? "?" : s.entry) << " (" << path.string() << ")\n";
  std::cout << "  ops: " << s.ops_total << "\n";
  for (const auto& [op, count] : s.ops) std::cout << "    " << op << ": " << count << "\n";
  if (s.given + s.derived > 0) {
    std::cout << "  strategies: " << s.given << " given (shard), " << s.derived << " derived\n";
  }
  if (!s.comm.empty()) {
    std::cout << "  communication of the parallel rewrite:\n";
    for (const auto& [what, count] : s.comm) std::cout << "    " << what << ": " << count << "\n";
  }
  std::cout << "  inputs: " << s.inputs << ", constants: " << s.constants << "\n";
  std::cout << "  parameters: " << s.params.size() << "\n";
  for (const std::string& p : s.params) std::cout << "    " << p << "\n";
  if (s.peak_bytes >= 0) {
    std::cout << "  memory plan peak: " << s.peak_bytes << " bytes ("
              << static_cast<double>(s.peak_bytes) / (1024.0 * 1024.0) << " MiB)\n";
  } else {
    std::cout << "  memory plan peak: not in this stage (see the NN_execute.ir of the same folder)\n";
  }
}

int usage() {
  std::cerr << "usage: cleave-ir DUMP.ir|DUMP.dot [--render svg|png|none] [--out FILE]\n"
               "       cleave-ir --ranks DIR [--stage NAME] [--render svg|png|none] [--out "
               "FILE]\n";
  return 2;
}

// Runs Graphviz's dot on `dot` into `out`; 0 on success, 1 with a message otherwise.
int render(const fs::path& dot, const std::string& format, const fs::path& out) {
  if (std::system("command -v dot >/dev/null 2>&1") != 0) {
    std::cerr
        << "cleave-ir: Graphviz's 'dot' is not installed (Debian: apt-get install graphviz)\n";
    return 1;
  }
  const std::string cmd = "dot -T" + format + " '" + dot.string() + "' -o '" + out.string() + "'";
  if (std::system(cmd.c_str()) != 0) {
    std::cerr << "cleave-ir: rendering failed: " << cmd << "\n";
    return 1;
  }
  std::cout << "rendered " << out.string() << "\n";
  return 0;
}

int single_dump(const fs::path& dump, const std::string& format, fs::path out) {
  fs::path ir = dump, dot = dump;
  ir.replace_extension(".ir");
  dot.replace_extension(".dot");
  if (!fs::exists(dump)) {
    std::cerr << "cleave-ir: '" << dump.string() << "' does not exist\n";
    return 1;
  }
  if (fs::exists(ir)) {
    std::ifstream in(ir);
    print(summarise(in), ir);
  } else {
    std::cout << "(no " << ir.filename().string() << " next to the dump: no summary)\n";
  }
  if (format == "none") return 0;
  if (!fs::exists(dot)) {
    std::cerr << "cleave-ir: no Graphviz file '" << dot.string() << "' to render\n";
    return 1;
  }
  if (out.empty()) out = fs::path(dot).replace_extension("." + format);
  return render(dot, format, out);
}

int all_ranks(const fs::path& dir, const std::string& stage, const std::string& format,
              fs::path out) {
  cleave::tools::PartitionView view;
  try {
    view = cleave::tools::read_partition(dir, stage);
  } catch (const std::exception& e) {
    std::cerr << "cleave-ir: " << e.what() << "\n";
    return 1;
  }
  cleave::tools::match_cut_edges(view);
  std::cout << "partition " << view.stage << " (" << dir.string() << "): " << view.ranks.size()
            << " ranks, " << view.cut_edges.size() << " cut edges\n";
  for (const cleave::tools::RankGraph& g : view.ranks) {
    std::cout << "  rank " << g.rank << ": " << g.ops << " ops, " << g.sends << " sends, "
              << g.recvs << " recvs (" << g.path.filename().string() << ")\n";
  }
  for (const cleave::tools::CutEdge& e : view.cut_edges) {
    std::cout << "  cut edge tag " << e.tag << ": rank " << e.from_rank << " " << e.send
              << " -> rank " << e.to_rank << " " << e.recv << "\n";
  }
  if (out.empty()) out = dir / (view.stage + "_ranks." + (format == "none" ? "dot" : format));
  const fs::path dot = fs::path(out).replace_extension(".dot");
  {
    std::ofstream file(dot);
    file << cleave::tools::partition_dot(view);
    if (!file) {
      std::cerr << "cleave-ir: cannot write '" << dot.string() << "'\n";
      return 1;
    }
  }
  std::cout << "wrote " << dot.string() << "\n";
  if (!view.errors.empty()) {
    for (const std::string& error : view.errors) std::cerr << "cleave-ir: error: " << error << "\n";
    std::cerr << "cleave-ir: " << view.errors.size()
              << " mismatched sends/recvs; the ranks would wait on each other (not rendered)\n";
    return 1;
  }
  if (format == "none") return 0;
  return render(dot, format, out);
}

}  // namespace

int main(int argc, char** argv) {
  fs::path dump, ranks_dir, out;
  std::string format = "svg", stage;
  bool ranks = false;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--render" && i + 1 < argc) {
      format = argv[++i];
    } else if (arg == "--out" && i + 1 < argc) {
      out = argv[++i];
    } else if (arg == "--ranks" && i + 1 < argc) {
      ranks = true;
      ranks_dir = argv[++i];
    } else if (arg == "--stage" && i + 1 < argc) {
      stage = argv[++i];
    } else if (!arg.starts_with("--") && dump.empty()) {
      dump = arg;
    } else {
      return usage();
    }
  }
  if (ranks == !dump.empty() || (!stage.empty() && !ranks)) return usage();
  if (format != "svg" && format != "png" && format != "none") {
    std::cerr << "cleave-ir: --render " << format
              << " is not supported; expected svg, png or none\n";
    return 2;
  }
  return ranks ? all_ranks(ranks_dir, stage, format, out) : single_dump(dump, format, out);
}

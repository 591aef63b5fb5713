// cleave-ir: summarises an IR dump (save_graphs) and renders its graph with Graphviz.
//
//   cleave-ir DUMP [--render svg|png|none] [--out FILE]
//   cleave-ir --ranks DIR [--stage NAME] [--render svg|png|none] [--out FILE]
//   cleave-ir --passes [--parallel-mode MODE] [--device-num N] [--placed] [--micro-batches M]
//             [--eval] [--strategy-load] [--strategy-save]
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
// NAME defaults to the only stage with per-rank dumps in DIR, e.g. 15_partition), prints each
// rank's op, send and recv counts and the cut edges (RpcSend -> RpcRecv, by tag), and writes one
// Graphviz file with a cluster per rank and the cut edges between them: FILE with the extension
// .dot (default DIR/<stage>_ranks.dot), rendered to FILE (default DIR/<stage>_ranks.svg). A send
// or recv whose tag has no partner is reported as an error (NOTE [Per-rank dumps and cut edges]
// in tools/ir_ranks.h); the .dot is still written, but not rendered.
//
// --passes prints the compile pipeline (NOTE [Compile pipeline] in cleave/runtime/pipeline.h) for
// a context: every pass in order with its dump number, whether it runs for a training step (or
// with --eval an evaluation step) in MODE (stand_alone, data_parallel, semi_auto_parallel or
// auto_parallel) on N devices, placed with Cell::place (--placed) or in M micro-batches, with
// strategy files loaded or saved, and what it does; then the load step's execute dump.
//
// Exit status 0 on success, 1 on a bad dump, mismatched tags or a failed render, 2 on bad usage.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <string>
#include <vector>

#include "cleave/ir/parse.h"
#include "cleave/ir/passes.h"
#include "cleave/ir/registry.h"
#include "cleave/runtime/pipeline.h"
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

// The end of the highest buffer of a "buffer: [OFFSET, +BYTES)" note; -1 when there is none.
long long buffer_end(const std::string& note) {
  long long end = -1;
  for (size_t at = note.find("buffer: ["); at != std::string::npos;
       at = note.find("buffer: [", at + 1)) {
    char* rest = nullptr;
    const long long offset = std::strtoll(note.c_str() + at + 9, &rest, 10);
    if (rest == nullptr || std::string_view(rest).substr(0, 3) != ", +") continue;
    end = std::max(end, offset + std::strtoll(rest + 3, nullptr, 10));
  }
  return end;
}

Summary summarise(const cleave::ir::ParsedGraph& parsed) {
  const cleave::ir::Graph& g = parsed.graph;
  Summary s;
  s.entry = g.name;
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    const cleave::ir::Node& n = g.nodes[i];
    if (i < parsed.notes.size()) s.peak_bytes = std::max(s.peak_bytes, buffer_end(parsed.notes[i]));
    switch (n.kind) {
      case cleave::ir::NodeKind::kInput:
        ++s.inputs;
        continue;
      case cleave::ir::NodeKind::kConstant:
        ++s.constants;
        continue;
      case cleave::ir::NodeKind::kParameter:
        s.params.push_back(cleave::ir::value_name(g, {static_cast<int>(i), 0}) + " " +
                           cleave::ir::meta_to_string(n.outputs[0]));
        continue;
      case cleave::ir::NodeKind::kOp:
        break;
    }
    ++s.ops[n.op->name];
    ++s.ops_total;
    if (n.attrs.has("rank_list")) {
      ++s.comm[n.op->name + " over ranks " +
               cleave::ir::attr_to_string(n.attrs.get<std::vector<int64_t>>("rank_list"))];
    }
    if (!n.strategy.empty()) ++(n.strategy_derived ? s.derived : s.given);
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
    std::cout
        << "  memory plan peak: not in this stage (see the NN_execute.ir of the same folder)\n";
  }
}

int usage() {
  std::cerr << "usage: cleave-ir DUMP.ir|DUMP.dot [--render svg|png|none] [--out FILE]\n"
               "       cleave-ir --ranks DIR [--stage NAME] [--render svg|png|none] [--out "
               "FILE]\n"
               "       cleave-ir --passes [--parallel-mode MODE] [--device-num N] [--placed] "
               "[--micro-batches M] [--eval] [--strategy-load] [--strategy-save]\n";
  return 2;
}

struct PassesContext {
  std::string mode = "stand_alone";
  int64_t device_num = 1;
  bool placed = false, eval = false, strategy_load = false, strategy_save = false;
  int micro_batches = 1;
};

int passes(const PassesContext& c) {
  namespace rt = cleave::runtime;
  const std::map<std::string, rt::ParallelMode> modes = {
      {"stand_alone", rt::STAND_ALONE},
      {"data_parallel", rt::DATA_PARALLEL},
      {"semi_auto_parallel", rt::SEMI_AUTO_PARALLEL},
      {"auto_parallel", rt::AUTO_PARALLEL}};
  auto mode = modes.find(c.mode);
  if (mode == modes.end()) {
    std::cerr << "cleave-ir: --parallel-mode " << c.mode
              << " is not a parallel mode; expected stand_alone, data_parallel, "
                 "semi_auto_parallel or auto_parallel\n";
    return 2;
  }
  if (c.device_num < 1 || c.micro_batches < 1) {
    std::cerr << "cleave-ir: --device-num and --micro-batches must be at least 1\n";
    return 2;
  }
  rt::StepProgram program;
  if (!c.eval) program.update = [](const std::vector<cleave::Tensor>&) {};
  rt::CompileOptions options;
  options.mode = mode->second;
  options.world_size = options.device_num = c.device_num;
  options.micro_batches = c.eval ? 1 : c.micro_batches;
  if (c.strategy_load) options.strategy_load_file = "strategy.json";
  if (c.strategy_save) options.strategy_save_file = "strategy.json";
  rt::CompileState state{.program = program, .options = options};
  if (c.placed) {  // a graph with one placed op
    cleave::ir::Node op;
    op.op = &cleave::ir::Registry::global().get("Neg");
    op.placement = {"MS_WORKER", 1};
    state.graph.nodes.push_back(op);
  }
  std::cout << "compile pipeline for " << (c.eval ? "an evaluation" : "a training") << " step, "
            << rt::parallel_mode_name(options.mode) << " on " << c.device_num << " device"
            << (c.device_num == 1 ? "" : "s") << (c.placed ? ", placed" : "")
            << (options.micro_batches > 1
                    ? ", " + std::to_string(options.micro_batches) + " micro-batches"
                    : "")
            << ":\n";
  const std::vector<rt::Pass>& list = rt::compile_passes();
  for (size_t k = 0; k < list.size(); ++k) {
    const rt::Pass& p = list[k];
    const bool runs = p.applies(state);
    const char* dump = p.dump == rt::Pass::Dump::kGraph       ? "dump"
                       : p.dump == rt::Pass::Dump::kPartition ? "dump per rank"
                                                              : "";
    std::printf("  %02zu %-26s %-5s %-13s %s\n", k + 1, p.name.c_str(), runs ? "runs" : "-", dump,
                runs ? p.what.c_str() : ("(" + p.when + ")").c_str());
  }
  std::printf("  %02zu %-26s %-5s %-13s %s\n", list.size() + 1, "execute", "load", "dump",
              "the load step: the executor's memory plan (runtime::load)");
  return 0;
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
    try {
      print(summarise(cleave::ir::parse_file(ir)), ir);
    } catch (const std::exception& e) {
      std::cerr << "cleave-ir: " << e.what() << "\n";
      return 1;
    }
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
  bool ranks = false, list_passes = false;
  PassesContext context;
  auto number = [&](int& i, auto& value) {
    try {
      value = std::stoll(argv[++i]);
      return true;
    } catch (const std::exception&) {
      std::cerr << "cleave-ir: " << argv[i - 1] << " " << argv[i] << ": expected a number\n";
      return false;
    }
  };
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--passes") {
      list_passes = true;
    } else if (arg == "--parallel-mode" && i + 1 < argc) {
      context.mode = argv[++i];
    } else if (arg == "--device-num" && i + 1 < argc) {
      if (!number(i, context.device_num)) return 2;
    } else if (arg == "--micro-batches" && i + 1 < argc) {
      if (!number(i, context.micro_batches)) return 2;
    } else if (arg == "--placed") {
      context.placed = true;
    } else if (arg == "--eval") {
      context.eval = true;
    } else if (arg == "--strategy-load") {
      context.strategy_load = true;
    } else if (arg == "--strategy-save") {
      context.strategy_save = true;
    } else if (arg == "--render" && i + 1 < argc) {
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
  if (list_passes) return ranks || !dump.empty() ? usage() : passes(context);
  if (ranks == !dump.empty() || (!stage.empty() && !ranks)) return usage();
  if (format != "svg" && format != "png" && format != "none") {
    std::cerr << "cleave-ir: --render " << format
              << " is not supported; expected svg, png or none\n";
    return 2;
  }
  return ranks ? all_ranks(ranks_dir, stage, format, out) : single_dump(dump, format, out);
}

// The compile pipeline's dumps (runtime/dump.h).
#include "runtime/dump.h"

#include <fmt/format.h>

#include <filesystem>
#include <fstream>

#include "cleave/core/error.h"

namespace cleave::runtime {
namespace {

void write_file(const std::filesystem::path& path, const std::string& text) {
  std::ofstream out(path);
  out << text;
  CLEAVE_CHECK_ARG(out.good(), "save_graphs: cannot write '{}'", path.string());
}

}  // namespace

void dump_graph(const CompileOptions& options, const ir::Graph& graph, int number,
                const std::string& stage, const ir::NodeNotes& notes, const std::string& folder) {
  if (options.save_graphs < 1) return;
  const std::string name = folder.empty() ? graph.name : folder;
  if (options.world_size > 1 && options.rank != 0) {
    const std::string own = fmt::format("_rank{}", options.rank);
    if (name.size() < own.size() || name.compare(name.size() - own.size(), own.size(), own) != 0) {
      return;
    }
  }
  const std::filesystem::path dir = std::filesystem::path(options.save_graphs_path) / name;
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  CLEAVE_CHECK_ARG(!ec,
                   "save_graphs: cannot create '{}': {} (set save_graphs_path to a writable "
                   "folder)",
                   dir.string(), ec.message());
  const std::string base = fmt::format("{:02d}_{}", number, stage);
  write_file(dir / (base + ".ir"), ir::dump_text(graph, notes));
  write_file(dir / (base + ".dot"), ir::dump_dot(graph));
}

}  // namespace cleave::runtime

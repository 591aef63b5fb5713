#include "cleave/runtime/compile.h"

#include <fmt/format.h>

#include <filesystem>
#include <fstream>

#include "cleave/ir/passes.h"
#include "cleave/runtime/context.h"

namespace cleave::runtime {
namespace {

void write_file(const std::filesystem::path& path, const std::string& text) {
  std::ofstream out(path);
  out << text;
  CLEAVE_CHECK_ARG(out.good(), "save_graphs: cannot write '{}'", path.string());
}

}  // namespace

void dump_stage(const ir::Graph& graph, int number, const std::string& stage,
                const ir::NodeNotes& notes) {
  const Context& ctx = get_context();
  if (ctx.save_graphs < 1) return;
  const std::filesystem::path dir = std::filesystem::path(ctx.save_graphs_path) / graph.name;
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

std::unique_ptr<Executor> compile(ir::Graph graph) {
  ir::verify(graph);
  ir::constant_folding(graph);
  dump_stage(graph, 7, "constant_fold");
  ir::common_subexpression_elimination(graph);
  dump_stage(graph, 8, "cse");
  ir::dead_code_elimination(graph);
  dump_stage(graph, 8, "dce");
  auto executor = std::make_unique<Executor>(std::move(graph));
  dump_stage(executor->graph(), 9, "execute", executor->plan_notes());
  return executor;
}

}  // namespace cleave::runtime

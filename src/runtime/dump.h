// Writing the compile pipeline's dumps (NOTE [Compile pipeline] in cleave/runtime/pipeline.h).
#pragma once

#include <string>

#include "cleave/ir/dump.h"
#include "cleave/ir/graph.h"
#include "cleave/runtime/pipeline.h"

namespace cleave::runtime {

// Writes `graph` as NN_<stage>.ir and NN_<stage>.dot (NN = `number`, two digits) under
// options.save_graphs_path/<folder> (empty folder: the graph's name) when options.save_graphs >=
// 1; nothing otherwise. In a job of several ranks every rank compiles the same step: rank 0
// writes the shared folders and every rank's partition, each rank only its own <name>_rank<R>
// folders, so ranks sharing one save_graphs_path never write the same file. Throws Error when the
// folder cannot be made or a file cannot be written.
void dump_graph(const CompileOptions& options, const ir::Graph& graph, int number,
                const std::string& stage, const ir::NodeNotes& notes = {},
                const std::string& folder = "");

}  // namespace cleave::runtime

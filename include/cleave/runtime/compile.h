// The compile pipeline of GRAPH_MODE, after tracing.
//
// NOTE [Compile pipeline]
// Stages, numbered as in the dumps (save_graphs >= 1 writes NN_<stage>.ir and NN_<stage>.dot
// under save_graphs_path/<graph name>/; gaps are left for the parallel passes of later issues):
//   01_trace      the forward graph as traced from construct
//   05_autodiff   + the backward (autodiff::graph_grad)
//   06_optimizer  + the optimizer's in-place updates (side effects)
//   07_constant_fold, 08_cse, 08_dce (in compile())
//   09_execute    the graph the executor runs, with each op's buffer from the memory plan
#pragma once

#include <memory>
#include <string>

#include "cleave/ir/dump.h"
#include "cleave/ir/graph.h"
#include "cleave/runtime/executor.h"

namespace cleave::runtime {

// Writes `graph` as NN_<stage>.ir and .dot when the context's save_graphs >= 1 (no-op otherwise).
// Throws Error when the folder cannot be created or a file cannot be written.
void dump_stage(const ir::Graph& graph, int number, const std::string& stage,
                const ir::NodeNotes& notes = {});

// Verifies a traced graph, runs constant folding, CSE and DCE (dumping each stage), and returns
// an executor for it (memory planned, arena allocated).
std::unique_ptr<Executor> compile(ir::Graph graph);

}  // namespace cleave::runtime

// The stages after tracing (07-10 of NOTE [Compile pipeline] in cleave/runtime/pipeline.h): the
// simplifying passes, the memory plan, and the partition of a placed step.
#pragma once

#include <memory>
#include <string>

#include "cleave/ir/dump.h"
#include "cleave/ir/graph.h"
#include "cleave/runtime/executor.h"

namespace cleave::runtime {

// Writes `graph` as NN_<stage>.ir and .dot when the context's save_graphs >= 1 (no-op otherwise).
// Throws Error when the folder cannot be created or a file cannot be written.
// `folder` replaces the graph's name as the folder under save_graphs_path when not empty.
void dump_stage(const ir::Graph& graph, int number, const std::string& stage,
                const ir::NodeNotes& notes = {}, const std::string& folder = "");

// Verifies a traced graph, runs constant folding, CSE and DCE (dumping each stage), and returns
// an executor for it (memory planned, arena allocated).
std::unique_ptr<Executor> compile(ir::Graph graph);

struct DistributedCompileOptions {
  // The first node of the per-step part (the optimizer's updates); -1 for a forward.
  int step_begin = -1;
  // parallel::PartitionOptions::micro_batches; the graph was traced for one micro-batch.
  int micro_batches = 1;
};

// Whether a traced graph will be partitioned: this process is one of several workers
// (cleave::init) and some op carries a placement (Cell::place / Primitive::place).
bool is_placed(const ir::Graph& graph);

// compile() for this process's part of `graph`: when is_placed(graph), the graph is cut by its
// placements (parallel::partition over the world group) and this rank's graph is compiled; with
// micro_batches > 1 and no placement, the micro-batched graph of one rank (gradient accumulation
// on this process); otherwise compile(graph). The executor's inputs are then the graph's inputs
// once per micro-batch (micro-batch-major), and it returns the graph's outputs on rank 0 and no
// outputs on the other ranks.
std::unique_ptr<Executor> compile_distributed(ir::Graph graph,
                                              const DistributedCompileOptions& options);

}  // namespace cleave::runtime

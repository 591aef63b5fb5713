// Distributed graph partition (MindSpore's Cell.place / Primitive.place): cuts a traced training
// step into one graph per worker, joined by RpcSend/RpcRecv pairs. `parallel` plans only; the
// runtime executes the per-rank graphs.
//
// NOTE [Distributed graph partition]
// Where each node runs (its rank):
//   - an op with a placement (Cell::place, Primitive::place) runs on that rank; the role must be
//     MS_WORKER and the rank within [0, world_size);
//   - a backward op runs where its forward op runs (graph autodiff copies the placement);
//   - an unlabelled op of the step's forward/backward runs on worker 0;
//   - a parameter lives on the rank of the first op that uses it, and its optimizer update (an op
//     that mutates its inputs) runs there; unlabelled optimizer ops run with the op that consumes
//     their result. The owner of a parameter used on several ranks sends its value to the others
//     at the start of the step, and sums the gradient contributions they send back;
//   - inputs (data, label) and constants are held by every rank: no rank receives them.
// Every value produced on one rank and used on another is a cut edge: an RpcSend on the producer
// after the value is computed and an RpcRecv on the consumer right before its first use, with a
// tag unique to (value, micro-batch, destination) within the step. Why: docs/design/partition.md.
//
// NOTE [Micro-batches]
// With micro_batches = M > 1 the graph must have been traced for one micro-batch (batch / M
// rows). The per-micro-batch part (every op of the forward and backward that depends on an input)
// is copied M times, each copy reading its own inputs; the values it hands to the per-step part
// (the gradients the optimizer reads) and the graph outputs (the loss) are summed over the copies
// and scaled by 1/M on the rank that produces them. That is the full-batch result when the loss is
// a mean over the batch. Ops that do not depend on an input run once per step.
//
// NOTE [A deadlock-free order]
// All ranks derive their order from one global schedule: a list-scheduling simulation over the
// expanded graph (op costs from cleave/parallel/cost_model.h, a latency per cut edge) in which an
// idle rank starts the ready op of the oldest micro-batch first — the 1F1B pattern: once the
// pipeline is full, a rank alternates the backward of an old micro-batch with the forward of a new
// one. The per-step part of a rank (optimizer updates) starts only after all its other work, in
// trace order, so no update overwrites a parameter another op of that rank still reads; the sends
// of a parameter happen at the start of the step, before any update. Each rank runs its ops in the
// order of their simulated start times. Sends never block (RpcSend posts a copy) and a receive
// waits only for a value produced earlier in the global order, so the lowest blocked receive in
// that order would always have its sender past the send: no rank can wait forever on another.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "cleave/ir/graph.h"

namespace cleave::parallel {

// The role placed ops must name (the only role that runs graph ops).
inline constexpr const char* kWorkerRole = "MS_WORKER";

struct PartitionOptions {
  int world_size = 1;
  // NOTE [Micro-batches]; 1: none.
  int micro_batches = 1;
  // Index of the first node of the per-step part (the optimizer's updates); -1 when the graph
  // has none (a forward for evaluation).
  int step_begin = -1;
  // false: ignore placements and put every op on rank 0 (micro-batching a network that is not
  // placed: gradient accumulation on one process).
  bool use_placement = true;
  // The primitives of a cut edge (runtime::rpc_send_op / rpc_recv_op).
  const ir::OpDef* send_op = nullptr;
  const ir::OpDef* recv_op = nullptr;
  std::string group = "world";
  // The rank that returns the graph's outputs (the loss; the logits of an evaluation).
  int output_rank = 0;
};

struct CutEdge {
  int src_rank = 0;
  int dst_rank = 0;
  int tag = 0;
  std::string value;  // the name of the node producing the value
  int64_t bytes = 0;
};

struct Partition {
  // For every node of the input graph, the rank it runs on; -1 for inputs and constants (held
  // by every rank).
  std::vector<int> node_rank;
  // One graph per world rank (named "<graph name>_rank<r>"), its nodes in the order the rank
  // runs them. Inputs: the input graph's inputs once per micro-batch, micro-batch-major
  // ("data_0", "label_0", "data_1", ...; the original names with one micro-batch), on every
  // rank. Outputs: the input graph's outputs on output_rank; none on the other ranks.
  std::vector<ir::Graph> ranks;
  std::vector<CutEdge> cuts;
  // The schedule's estimated step time and the sum of all op costs (estimated cost units).
  double simulated_makespan = 0;
  double simulated_serial = 0;
};

// Whether any op of `graph` carries a placement.
bool has_placement(const ir::Graph& graph);

// Cuts `graph` (NOTE [Distributed graph partition]). Throws Error for a placement whose role is
// not MS_WORKER or whose rank is outside [0, world_size), naming the op and its scope; for
// micro_batches < 1; when the step needs more than 32768 tags.
Partition partition(const ir::Graph& graph, const PartitionOptions& options);

}  // namespace cleave::parallel

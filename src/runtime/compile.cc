#include "cleave/runtime/compile.h"

#include <fmt/format.h>

#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "cleave/comm/group_registry.h"
#include "cleave/comm/shm_mailbox.h"
#include "cleave/core/env.h"
#include "cleave/ir/passes.h"
#include "cleave/parallel/partition.h"
#include "cleave/runtime/collectives.h"
#include "cleave/runtime/context.h"
#include "cleave/runtime/core_binding.h"
#include "cleave/runtime/rpc.h"

namespace cleave::runtime {
namespace {

void write_file(const std::filesystem::path& path, const std::string& text) {
  std::ofstream out(path);
  out << text;
  CLEAVE_CHECK_ARG(out.good(), "save_graphs: cannot write '{}'", path.string());
}

}  // namespace

void dump_stage(const ir::Graph& graph, int number, const std::string& stage,
                const ir::NodeNotes& notes, const std::string& folder) {
  const Context& ctx = get_context();
  if (ctx.save_graphs < 1) return;
  const std::string name = folder.empty() ? graph.name : folder;
  // In a job of several workers every process traces the same step: worker 0 writes the shared
  // graphs (and every rank's partition), each worker its own rank's compiled graph, so that
  // workers sharing one save_graphs_path never write the same file.
  if (const int rank = comm::world_rank(); comm::world_size() > 1 && rank != 0) {
    const std::string own = fmt::format("_rank{}", rank);
    if (name.size() < own.size() || name.compare(name.size() - own.size(), own.size(), own) != 0) {
      return;
    }
  }
  const std::filesystem::path dir = std::filesystem::path(ctx.save_graphs_path) / name;
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
  prepare_comm_groups(graph);
  ir::constant_folding(graph);
  dump_stage(graph, 7, "constant_fold");
  ir::common_subexpression_elimination(graph);
  dump_stage(graph, 8, "cse");
  ir::dead_code_elimination(graph);
  dump_stage(graph, 8, "dce");
  auto executor = std::make_unique<Executor>(
      std::move(graph), ExecutorOptions{.zero_copy = env::flag("CLEAVE_RPC_ZERO_COPY")});
  dump_stage(executor->graph(), 9, "execute", executor->plan_notes());
  return executor;
}

}  // namespace cleave::runtime

namespace cleave::runtime {

namespace {

// NOTE [Shared-memory mailboxes] (cleave/comm/shm_mailbox.h): when every worker is on this host,
// the cut edges go through shared memory instead of the world group's transport, unless
// CLEAVE_RPC_SHM=0. Collective: every rank compiles the same partition at the same time.
void use_shared_memory(parallel::Partition& parts, int rank) {
  if (!env::flag("CLEAVE_RPC_SHM")) return;
  std::shared_ptr<comm::ProcessGroup> group = comm::get_group(comm::kWorldGroup);
  if (group == nullptr) return;
  std::vector<comm::MailboxEdge> edges;
  for (const parallel::CutEdge& cut : parts.cuts) {
    edges.push_back({cut.src_rank, cut.dst_rank, cut.tag, static_cast<size_t>(cut.bytes)});
  }
  const std::chrono::microseconds spin(env::integer("CLEAVE_RPC_SPIN_US", 0, 1'000'000));
  auto boxes = comm::ShmMailboxes::create(*group, edges, group->options().timeout, spin);
  if (boxes == nullptr) return;
  const int64_t channel = register_rpc_channel(std::move(boxes));
  for (ir::Node& n : parts.ranks[rank].nodes) {
    if (n.is_op() && (n.op == &rpc_send_op() || n.op == &rpc_recv_op())) {
      n.attrs.set("channel", channel);
    }
  }
}

// A hash of what the partition depends on: every node's kind, primitive, attributes, inputs,
// output types and placement, and the graph's inputs and outputs.
int64_t fingerprint(const ir::Graph& graph) {
  std::string text;
  for (const ir::Node& n : graph.nodes) {
    text += fmt::format("{}|{}|{}|{}|{}|", static_cast<int>(n.kind), n.is_op() ? n.op->name : "",
                        n.attrs.to_string(), n.placement.role, n.placement.rank);
    for (const ir::ValueRef& v : n.inputs) text += fmt::format("{}.{},", v.node, v.output);
    for (const ir::TensorMeta& m : n.outputs) {
      text += fmt::format("{}{};", dtype_name(m.dtype), m.shape.to_string());
    }
  }
  for (int i : graph.inputs) text += fmt::format("in{},", i);
  for (const ir::ValueRef& v : graph.outputs) text += fmt::format("out{}.{},", v.node, v.output);
  return static_cast<int64_t>(std::hash<std::string>{}(text) >> 1);
}

// Every worker must have traced the same step: the partition (and the order of messages) is
// computed by each worker from its own trace. Collective over the world group.
void check_same_trace(const ir::Graph& graph) {
  std::shared_ptr<comm::ProcessGroup> group = comm::get_group(comm::kWorldGroup);
  if (group == nullptr) return;
  Tensor lo = Tensor::full({1}, 0.0, DType::kInt64);
  lo.data<int64_t>()[0] = fingerprint(graph);
  Tensor hi = lo.clone();
  group->all_reduce(lo, comm::ReduceOp::kMin);
  group->all_reduce(hi, comm::ReduceOp::kMax);
  CLEAVE_CHECK_ARG(lo.data<int64_t>()[0] == hi.data<int64_t>()[0],
                   "placed graph '{}': the workers traced different training steps (rank {} of {} "
                   "differs from another); every worker must run the same program (same network, "
                   "placements, optimizer and batch shapes) to partition a placed network",
                   graph.name, group->rank(), group->size());
}

}  // namespace

bool is_placed(const ir::Graph& graph) {
  return comm::world_size() > 1 && parallel::has_placement(graph);
}

std::unique_ptr<Executor> compile_distributed(ir::Graph graph,
                                              const DistributedCompileOptions& options) {
  const bool placed = is_placed(graph);
  if (!placed && options.micro_batches == 1) return compile(std::move(graph));
  if (placed) {
    core_binding_mode_from_env();  // a bad CLEAVE_BIND_CORES fails here, not 40 steps later
    check_same_trace(graph);
  }
  parallel::PartitionOptions po;
  po.world_size = placed ? comm::world_size() : 1;
  po.micro_batches = options.micro_batches;
  po.step_begin = options.step_begin;
  po.use_placement = placed;
  po.send_op = &rpc_send_op();
  po.recv_op = &rpc_recv_op();
  parallel::Partition parts = parallel::partition(graph, po);
  for (size_t r = 0; r < parts.ranks.size(); ++r) {
    dump_stage(parts.ranks[r], 10, fmt::format("partition_rank{}", r), {}, graph.name);
  }
  const int rank = placed ? comm::world_rank() : 0;
  if (placed) use_shared_memory(parts, rank);
  std::unique_ptr<Executor> executor = compile(std::move(parts.ranks[rank]));
  if (placed) executor->mark_placed();
  return executor;
}

}  // namespace cleave::runtime

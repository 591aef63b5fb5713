// The load step (NOTE [Compile pipeline] in cleave/runtime/pipeline.h): what a compiled plan
// needs from this process and the others before it runs.
#include <fmt/format.h>

#include <chrono>
#include <cstdio>

#include "cleave/comm/group_registry.h"
#include "cleave/comm/shm_mailbox.h"
#include "cleave/core/env.h"
#include "cleave/runtime/collectives.h"
#include "cleave/runtime/core_binding.h"
#include "cleave/runtime/pipeline.h"
#include "cleave/runtime/rpc.h"
#include "cleave/runtime/sharded_parameters.h"
#include "runtime/dump.h"
#include "runtime/thread_split.h"

namespace cleave::runtime {
namespace {

// What load reads from the environment (NOTE [Environment variables] in cleave/core/env.h), once.
struct LoadOptions {
  bool rpc_shm = true;  // CLEAVE_RPC_SHM
  std::chrono::microseconds rpc_spin{0};
  bool zero_copy = true;  // CLEAVE_RPC_ZERO_COPY
};

LoadOptions load_options(const CompiledPlan& plan) {
  LoadOptions o;
  if (!plan.placed) return o;
  o.rpc_shm = env::flag("CLEAVE_RPC_SHM");
  o.rpc_spin = std::chrono::microseconds(env::integer("CLEAVE_RPC_SPIN_US", 0, 1'000'000));
  o.zero_copy = env::flag("CLEAVE_RPC_ZERO_COPY");
  core_binding_mode_from_env();  // a bad CLEAVE_BIND_CORES fails here, not 40 steps later
  return o;
}

// Every worker must have traced the same step: each computes the partition (and the order of
// messages) from its own trace. Collective over the world group.
void check_same_trace(const CompiledPlan& plan) {
  std::shared_ptr<comm::ProcessGroup> group = comm::get_group(comm::kWorldGroup);
  if (group == nullptr) return;
  Tensor lo = Tensor::full({1}, 0.0, DType::kInt64);
  lo.data<int64_t>()[0] = plan.trace_fingerprint;
  Tensor hi = lo.clone();
  group->all_reduce(lo, comm::ReduceOp::kMin);
  group->all_reduce(hi, comm::ReduceOp::kMax);
  std::string name = plan.graph.name;
  if (const size_t r = name.rfind("_rank"); r != std::string::npos) name.resize(r);
  CLEAVE_CHECK_ARG(lo.data<int64_t>()[0] == hi.data<int64_t>()[0],
                   "placed graph '{}': the workers traced different training steps (rank {} of {} "
                   "differs from another); every worker must run the same program (same network, "
                   "placements, optimizer and batch shapes) to partition a placed network",
                   name, group->rank(), group->size());
}

// NOTE [Shared-memory mailboxes] (cleave/comm/shm_mailbox.h): when every worker is on this host,
// the cut edges go through shared memory instead of the world group's transport. Collective:
// every rank loads the same partition at the same time.
void use_shared_memory(CompiledPlan& plan, const LoadOptions& options) {
  std::shared_ptr<comm::ProcessGroup> group = comm::get_group(comm::kWorldGroup);
  if (group == nullptr) return;
  std::vector<comm::MailboxEdge> edges;
  for (const parallel::CutEdge& cut : plan.cuts) {
    edges.push_back({cut.src_rank, cut.dst_rank, cut.tag, static_cast<size_t>(cut.bytes)});
  }
  auto boxes =
      comm::ShmMailboxes::create(*group, edges, group->options().timeout, options.rpc_spin);
  if (boxes == nullptr) return;
  const int64_t channel = register_rpc_channel(std::move(boxes));
  for (ir::Node& n : plan.graph.nodes) {
    if (n.is_op() && (n.op == &rpc_send_op() || n.op == &rpc_recv_op())) {
      n.attrs.set("channel", channel);
    }
  }
}

}  // namespace

std::unique_ptr<CompiledStep> load(CompiledPlan plan) {
  const LoadOptions options = load_options(plan);
  if (plan.placed) check_same_trace(plan);
  for (const ParameterSlice& s : plan.parameter_slices) {
    shard_parameter(s.tensor, s.name, s.layout, plan.options.rank, s.like);
  }
  if (!plan.broadcast_parameters.empty()) {
    std::shared_ptr<comm::ProcessGroup> world = comm::get_group(comm::kWorldGroup);
    if (world != nullptr && world->size() > 1) {
      for (const Tensor& t : plan.broadcast_parameters) world->broadcast(t, 0);
    }
  }
  prepare_comm_groups(plan.graph);
  if (plan.placed && options.rpc_shm) use_shared_memory(plan, options);
  if (!plan.placed && plan.options.mode != STAND_ALONE && plan.options.world_size > 1) {
    bind_spmd_worker();  // NOTE [SPMD workers on few cores]
  }
  if (plan.options.thread_split > 1) {  // NOTE [Threads split the batch]
    auto split =
        std::make_unique<ThreadSplit>(plan.graph, plan.options.thread_split, plan.num_inputs);
    dump_graph(plan.options, split->update().graph(), plan.execute_dump_number, "execute",
               split->update().plan_notes());
    for (int b = 0; b < split->parts(); ++b) {
      const Executor& block = split->block(b);
      dump_graph(plan.options, block.graph(), plan.execute_dump_number,
                 fmt::format("execute_block{}", b), block.plan_notes());
    }
    return std::make_unique<CompiledStep>(std::move(split), plan.num_inputs);
  }
  auto executor = std::make_unique<Executor>(
      std::move(plan.graph),
      ExecutorOptions{.zero_copy = options.zero_copy,
                      .collectives_in_flight = core_left_for_communication()});
  dump_graph(plan.options, executor->graph(), plan.execute_dump_number, "execute",
             executor->plan_notes());
  if (plan.placed) executor->mark_placed();
  const int micro_batches = plan.options.micro_batches;
  return std::make_unique<CompiledStep>(std::move(executor), micro_batches, plan.num_inputs);
}

std::unique_ptr<CompiledStep> compile_step(const StepProgram& program) {
  CompiledPlan plan = compile(program, compile_options(program));
  if (plan.options.rank == 0) {
    for (const std::string& m : plan.messages) std::fprintf(stderr, "cleave: %s\n", m.c_str());
  }
  return load(std::move(plan));
}

CompiledStep::CompiledStep(std::unique_ptr<Executor> executor, int micro_batches, size_t num_inputs)
    : executor_(std::move(executor)), micro_batches_(micro_batches), num_inputs_(num_inputs) {}

CompiledStep::CompiledStep(std::unique_ptr<ThreadSplit> split, size_t num_inputs)
    : split_(std::move(split)), micro_batches_(split_->parts()), num_inputs_(num_inputs) {}

CompiledStep::~CompiledStep() = default;

Executor& CompiledStep::executor() { return split_ ? split_->update() : *executor_; }
const Executor& CompiledStep::executor() const { return split_ ? split_->update() : *executor_; }
int CompiledStep::thread_split() const { return split_ ? split_->parts() : 1; }

// Micro-batch-major: (data_0, label_0, data_1, label_1, ...) (NOTE [Micro-batches]).
std::vector<Tensor> CompiledStep::micro_batch_feed(const std::vector<Tensor>& inputs) const {
  std::vector<Tensor> feed;
  for (int k = 0; k < micro_batches_; ++k) {
    for (const Tensor& t : inputs) {
      CLEAVE_CHECK_ARG(t.defined() && t.rank() >= 1 && t.shape()[0] % micro_batches_ == 0,
                       "graph '{}': an input of shape {} cannot be cut into {} micro-batches",
                       executor().graph().name,
                       t.defined() ? t.shape().to_string() : std::string("(undefined)"),
                       micro_batches_);
      const int64_t rows = t.shape()[0] / micro_batches_;
      feed.push_back(t.narrow_rows(k * rows, rows));
    }
  }
  return feed;
}

std::vector<Tensor> CompiledStep::run(const std::vector<Tensor>& inputs) {
  CLEAVE_CHECK_ARG(inputs.size() == num_inputs_, "graph '{}': {} inputs given; expected {}",
                   executor().graph().name, inputs.size(), num_inputs_);
  if (split_) return split_->run(micro_batch_feed(inputs));
  if (micro_batches_ == 1) return executor_->run(inputs);
  return executor_->run(micro_batch_feed(inputs));
}

std::vector<bool> CompiledStep::inputs_read() const {
  std::vector<bool> read(num_inputs_, false);
  const std::vector<bool> per_input = split_ ? split_->inputs_read() : executor_->inputs_read();
  for (size_t k = 0; k < per_input.size(); ++k) {
    read[k % num_inputs_] = read[k % num_inputs_] || per_input[k];
  }
  return read;
}

}  // namespace cleave::runtime

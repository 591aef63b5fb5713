// The executor's run loop: for each node, wait for what it needs, run its kernel, record. Where
// values live is decided by the memory plan (memory_plan.cc), what is measured by the profiler
// (profiling.cc).
#include "cleave/runtime/executor.h"

#include <fmt/format.h>

#include <algorithm>
#include <functional>

#include "cleave/comm/shm_mailbox.h"
#include "cleave/ir/passes.h"
#include "cleave/runtime/rpc.h"

namespace cleave::runtime {

Executor::Executor(ir::Graph graph, ExecutorOptions options) : graph_(std::move(graph)) {
  ir::verify(graph_);
  wait_at_ = options.collectives_in_flight
                 ? collective_waits(graph_)
                 : std::vector<int>(graph_.nodes.size(), -1);  // every one runs inline
  plan_ = plan_memory(graph_, {}, wait_at_);
  if (options.zero_copy) {
    cut_edges_ =
        bind_cut_edges(graph_, plan_, [](const ir::Node& n) { return rpc_channel(n.attrs); });
  }
  if (cut_edges_.count > 0) {  // the same buffers, numbered alike, placed without the bound ones
    const std::vector<std::vector<int>> buffer_of = plan_.buffer_of;
    plan_ = plan_memory(
        graph_,
        [&](int node, int output) {
          return cut_edges_.of_buffer[buffer_of[node][output]].boxes != nullptr;
        },
        wait_at_);
  }
  for (int at : wait_at_) async_ops_ += at >= 0 ? 1 : 0;
  waiters_.assign(graph_.nodes.size() + 1, {});
  arena_ = Tensor::empty({static_cast<int64_t>(std::max<size_t>(plan_.peak_bytes, 1))},
                         DType::kBool);  // one byte per element
  const size_t count = graph_.nodes.size();
  slot_base_.resize(count + 1);
  for (size_t i = 0; i < count; ++i) {
    slot_base_[i + 1] = slot_base_[i] + static_cast<int>(graph_.nodes[i].outputs.size());
  }
  values_.resize(slot_base_[count]);
  node_inputs_.resize(count);
  node_outputs_.resize(count);
  for (size_t i = 0; i < count; ++i) {
    const ir::Node& n = graph_.nodes[i];
    if (n.kind == ir::NodeKind::kParameter || n.kind == ir::NodeKind::kConstant) {
      values_[slot_base_[i]] = n.value;
      continue;
    }
    if (!n.is_op()) continue;
    node_inputs_[i].resize(n.inputs.size());
    if (n.op->output_is_view) continue;
    for (size_t k = 0; k < n.outputs.size(); ++k) {
      auto impl = std::make_shared<TensorImpl>();
      const int b = plan_.buffer_of[i][k];
      const MemoryPlan::Buffer& buf = plan_.buffers[b];
      if (buf.offset >= 0) {
        impl->storage = arena_.impl()->storage;
        impl->offset_bytes = static_cast<size_t>(buf.offset);
      } else {
        const MailboxSlot& slot = cut_edges_.of_buffer[b];
        CLEAVE_ASSERT(slot.boxes != nullptr, "buffer of node {} output {} has no place", i, k);
        impl->storage = Storage::borrow(slot.boxes->message(slot.tag), buf.bytes, Device::cpu());
      }
      impl->shape = n.outputs[k].shape;
      impl->dtype = n.outputs[k].dtype;
      values_[slot_base_[i] + k] = Tensor(impl);
      node_outputs_[i].push_back(Tensor(impl));
    }
    CLEAVE_ASSERT(n.op->cpu_kernel != nullptr, "op '{}' has no CPU kernel", n.op->name);
  }
  for (const ir::Node& n : graph_.nodes) {
    placed_ = placed_ || (n.is_op() && (n.op == &rpc_send_op() || n.op == &rpc_recv_op()));
  }
  // inputs_read_[k]: some op (or output) reads graph input k.
  std::vector<int> input_of(count, -1);
  for (size_t k = 0; k < graph_.inputs.size(); ++k)
    input_of[graph_.inputs[k]] = static_cast<int>(k);
  inputs_read_.assign(graph_.inputs.size(), false);
  auto mark = [&](const ir::ValueRef& v) {
    if (input_of[v.node] >= 0) inputs_read_[input_of[v.node]] = true;
  };
  for (const ir::Node& n : graph_.nodes) std::for_each(n.inputs.begin(), n.inputs.end(), mark);
  std::for_each(graph_.outputs.begin(), graph_.outputs.end(), mark);
  reads_inputs_ = std::find(inputs_read_.begin(), inputs_read_.end(), true) != inputs_read_.end();
}

void Executor::set_profiling(bool on) { profiler_.set_node_timing(on, graph_.nodes.size()); }

void Executor::bind_inputs(const std::vector<Tensor>& inputs) {
  CLEAVE_CHECK_ARG(inputs.size() == graph_.inputs.size(),
                   "graph '{}': {} inputs given; the graph was compiled for {}", graph_.name,
                   inputs.size(), graph_.inputs.size());
  for (size_t k = 0; k < inputs.size(); ++k) {
    const ir::Node& n = graph_.nodes[graph_.inputs[k]];
    const Tensor& t = inputs[k];
    CLEAVE_CHECK_ARG(t.defined() && !t.is_symbolic() && t.device().is_cpu() &&
                         t.shape() == n.outputs[0].shape && t.dtype() == n.outputs[0].dtype,
                     "graph '{}': input {} ('{}') must be a CPU tensor {} {}; got {}", graph_.name,
                     k, n.name, dtype_name(n.outputs[0].dtype), n.outputs[0].shape.to_string(),
                     t.defined()
                         ? fmt::format("{} {}", dtype_name(t.dtype()), t.shape().to_string())
                         : std::string("an undefined Tensor"));
    values_[slot_base_[graph_.inputs[k]]] = t;
  }
}

// NOTE [Collectives in flight]: the collectives to wait for before `node` (or the end).
void Executor::wait_for_collectives(size_t node) {
  std::vector<std::function<void()>>& list = waiters_[node];
  if (list.empty()) return;
  const ExecutorProfiler::Clock::time_point start = ExecutorProfiler::Clock::now();
  for (size_t k = 0; k < list.size(); ++k) {
    std::function<void()> w = std::move(list[k]);
    list[k] = nullptr;
    w();
  }
  list.clear();
  profiler_.add_collective_wait(start);
}

// NOTE [Collectives in flight]: a failure leaves no collective working on the arena.
void Executor::drain_collectives() {
  for (auto& list : waiters_) {
    for (auto& w : list) {
      try {
        w();
      } catch (...) {
      }
    }
    list.clear();
  }
}

// NOTE [Zero-copy cut edges]: waits until the receivers released the slots `node` writes.
void Executor::claim_slots(size_t node) {
  const std::vector<MailboxSlot>& slots = cut_edges_.claim_before[node];
  if (slots.empty()) return;
  const ExecutorProfiler::Clock::time_point start = ExecutorProfiler::Clock::now();
  for (const MailboxSlot& slot : slots) slot.boxes->claim(slot.tag);
  profiler_.add_cut_edge_wait(start);
}

void Executor::release_slots(size_t node) {
  for (const MailboxSlot& slot : cut_edges_.release_after[node]) slot.boxes->release(slot.tag);
}

std::vector<Tensor> Executor::run(const std::vector<Tensor>& inputs, bool copy_outputs) {
  bind_inputs(inputs);
  const size_t count = graph_.nodes.size();
  const bool slots = cut_edges_.count > 0;  // NOTE [Zero-copy cut edges]
  profiler_.begin_run(count, placed_);
  // No slots to claim and no op timed: a computing op needs nothing around its kernel.
  const bool plain = !slots && !profiler_.times_ops();
  if (placed_) post_receives(graph_);
  try {
    for (size_t i = 0; i < count; ++i) {
      if (async_ops_ > 0) wait_for_collectives(i);
      const ir::Node& n = graph_.nodes[i];
      if (!n.is_op()) continue;
      std::vector<Tensor>& ins = node_inputs_[i];
      for (size_t k = 0; k < n.inputs.size(); ++k) {
        ins[k] = values_[slot_base_[n.inputs[k].node] + n.inputs[k].output];
      }
      if (n.op->output_is_view) {
        values_[slot_base_[i]] = ins[0].view(n.outputs[0].shape);
        continue;
      }
      const ir::KernelContext context{*n.op, n.attrs, ins, node_outputs_[i]};
      if (wait_at_[i] >= 0) {  // started now, waited for at wait_at_[i]
        waiters_[static_cast<size_t>(wait_at_[i])].push_back(n.op->async_kernel(context));
        continue;
      }
      if (plain && !n.op->communicates) {  // the common case: nothing to claim or measure
        n.op->cpu_kernel(context);
        continue;
      }
      if (slots) claim_slots(i);
      const ExecutorProfiler::OpStart start = profiler_.start_op(*n.op);
      n.op->cpu_kernel(context);
      profiler_.end_op(i, *n.op, start);
      if (slots) release_slots(i);
    }
    if (async_ops_ > 0) wait_for_collectives(count);
  } catch (...) {
    drain_collectives();
    throw;
  }
  if (placed_) {
    const ExecutorProfiler::Clock::time_point start = ExecutorProfiler::Clock::now();
    wait_pending_sends();
    profiler_.add_cut_edge_wait(start);
  }
  profiler_.end_run(graph_);
  std::vector<Tensor> out;
  out.reserve(graph_.outputs.size());
  for (const ir::ValueRef& v : graph_.outputs) {
    const Tensor& value = values_[slot_base_[v.node] + v.output];
    out.push_back(copy_outputs ? value.clone() : value);
  }
  for (int in : graph_.inputs) values_[slot_base_[in]] = Tensor();  // do not keep the caller's data
  if (slots) release_slots(count);
  return out;
}

std::vector<std::string> Executor::plan_notes() const { return memory_plan_notes(graph_, plan_); }

}  // namespace cleave::runtime

// The executor: runs a compiled graph on the buffers of its memory plan (memory_plan.cc).
#include "cleave/runtime/executor.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <ctime>
#include <functional>

#include "cleave/comm/shm_mailbox.h"
#include "cleave/ir/passes.h"
#include "cleave/runtime/context.h"
#include "cleave/runtime/core_binding.h"
#include "cleave/runtime/rpc.h"

namespace cleave::runtime {
namespace {

// CPU time of the calling thread: unlike a wall clock it does not count time the thread was
// descheduled (ranks of a placed job time-share the cores).
double thread_cpu_seconds() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

}  // namespace

Executor::Executor(ir::Graph graph, ExecutorOptions options) : graph_(std::move(graph)) {
  ir::verify(graph_);
  wait_at_ = collective_waits(graph_);
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

void Executor::set_profiling(bool on) {
  profiling_ = on;
  if (on) node_seconds_.assign(graph_.nodes.size(), 0.0);
}

std::vector<Tensor> Executor::run(const std::vector<Tensor>& inputs) {
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
  const size_t count = graph_.nodes.size();
  double compute_seconds = 0, comm_seconds = 0;
  const bool op_times = placed_ && placed_op_profiling();
  if (op_times) op_cpu_seconds_.assign(count, 0.0);
  if (placed_) post_receives(graph_);
  // NOTE [Collectives in flight]: a failure leaves no collective working on the arena.
  auto drain = [&] {
    for (auto& list : waiters_) {
      for (auto& w : list) {
        try {
          w();
        } catch (...) {
        }
      }
      list.clear();
    }
  };
  auto wait_for = [&](size_t i) {
    std::vector<std::function<void()>>& list = waiters_[i];
    if (list.empty()) return;
    const auto start = std::chrono::steady_clock::now();
    for (size_t k = 0; k < list.size(); ++k) {
      std::function<void()> w = std::move(list[k]);
      list[k] = nullptr;
      w();
    }
    list.clear();
    communication_wait_seconds_ +=
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  };
  try {
    for (size_t i = 0; i < count; ++i) {
      const ir::Node& n = graph_.nodes[i];
      if (async_ops_ > 0) wait_for(i);
      if (!n.is_op()) continue;
      std::vector<Tensor>& ins = node_inputs_[i];
      for (size_t k = 0; k < n.inputs.size(); ++k) {
        ins[k] = values_[slot_base_[n.inputs[k].node] + n.inputs[k].output];
      }
      if (n.op->output_is_view) {
        values_[slot_base_[i]] = ins[0].view(n.outputs[0].shape);
        continue;
      }
      if (wait_at_[i] >= 0) {
        waiters_[static_cast<size_t>(wait_at_[i])].push_back(
            n.op->async_kernel(ir::KernelContext{*n.op, n.attrs, ins, node_outputs_[i]}));
        continue;
      }
      if (!profiling_ && !placed_) {
        if (n.op->communicates) {  // inline: the whole operation is communication not hidden
          const auto start = std::chrono::steady_clock::now();
          n.op->cpu_kernel(ir::KernelContext{*n.op, n.attrs, ins, node_outputs_[i]});
          communication_wait_seconds_ +=
              std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
          continue;
        }
        n.op->cpu_kernel(ir::KernelContext{*n.op, n.attrs, ins, node_outputs_[i]});
        continue;
      }
      auto start = std::chrono::steady_clock::now();
      if (cut_edges_.count > 0 && !cut_edges_.claim_before[i].empty()) {
        for (const MailboxSlot& slot : cut_edges_.claim_before[i]) slot.boxes->claim(slot.tag);
        const auto now = std::chrono::steady_clock::now();
        comm_seconds += std::chrono::duration<double>(now - start).count();
        start = now;  // (not counted as the op's time)
      }
      const double cpu_start = op_times ? thread_cpu_seconds() : 0.0;
      n.op->cpu_kernel(ir::KernelContext{*n.op, n.attrs, ins, node_outputs_[i]});
      if (op_times) op_cpu_seconds_[i] = thread_cpu_seconds() - cpu_start;
      const double seconds =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      if (profiling_) node_seconds_[i] += seconds;
      (n.op->communicates ? comm_seconds : compute_seconds) += seconds;
      if (cut_edges_.count > 0) {
        for (const MailboxSlot& slot : cut_edges_.release_after[i]) slot.boxes->release(slot.tag);
      }
    }
    if (async_ops_ > 0) wait_for(count);
  } catch (...) {
    drain();
    throw;
  }
  if (placed_) {
    const auto start = std::chrono::steady_clock::now();
    wait_pending_sends();
    comm_seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    add_placed_run_stats(compute_seconds, comm_seconds);
    note_placed_run(compute_seconds);
    if (op_times) add_placed_op_times(graph_, op_cpu_seconds_);
  }
  std::vector<Tensor> out;
  out.reserve(graph_.outputs.size());
  for (const ir::ValueRef& v : graph_.outputs) {
    out.push_back(values_[slot_base_[v.node] + v.output].clone());
  }
  for (int in : graph_.inputs) values_[slot_base_[in]] = Tensor();  // do not keep the caller's data
  if (cut_edges_.count > 0) {
    for (const MailboxSlot& slot : cut_edges_.release_after[count]) {
      slot.boxes->release(slot.tag);
    }
  }
  return out;
}

std::vector<std::string> Executor::plan_notes() const { return memory_plan_notes(graph_, plan_); }

}  // namespace cleave::runtime

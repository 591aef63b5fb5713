// The memory plan and the executor (NOTE [Memory plan]).
#include "cleave/runtime/executor.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <ctime>
#include <functional>

#include "cleave/ir/passes.h"
#include "cleave/runtime/context.h"
#include "cleave/runtime/core_binding.h"
#include "cleave/runtime/rpc.h"

namespace cleave::runtime {
namespace {

constexpr size_t kAlign = 64;
size_t align_up(size_t n) { return (n + kAlign - 1) / kAlign * kAlign; }

// CPU time of the calling thread: unlike a wall clock it does not count time the thread was
// descheduled (ranks of a placed job time-share the cores).
double thread_cpu_seconds() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

}  // namespace

MemoryPlan plan_memory(const ir::Graph& g, const std::function<bool(int, int)>& external,
                       const std::vector<int>& read_until) {
  const int count = static_cast<int>(g.nodes.size());
  MemoryPlan plan;
  plan.offset.resize(count);
  plan.buffer_of.resize(count);
  std::vector<MemoryPlan::Buffer>& buffers = plan.buffers;
  for (int i = 0; i < count; ++i) {
    const ir::Node& n = g.nodes[i];
    plan.offset[i].assign(n.outputs.size(), -1);
    plan.buffer_of[i].assign(n.outputs.size(), -1);
    if (!n.is_op()) continue;
    const int reads_until = read_until.empty() ? i : std::max(i, read_until[i]);
    for (const ir::ValueRef& v : n.inputs) {
      const int b = plan.buffer_of[v.node][v.output];
      if (b >= 0) buffers[b].last = std::max(buffers[b].last, reads_until);
    }
    if (n.op->output_is_view) {
      plan.buffer_of[i][0] = plan.buffer_of[n.inputs[0].node][n.inputs[0].output];
      continue;
    }
    for (size_t k = 0; k < n.outputs.size(); ++k) {
      const size_t bytes =
          static_cast<size_t>(n.outputs[k].shape.numel()) * dtype_size(n.outputs[k].dtype);
      plan.buffer_of[i][k] = static_cast<int>(buffers.size());
      MemoryPlan::Buffer buf{.node = i, .output = static_cast<int>(k), .bytes = bytes};
      buf.first = i;
      buf.last = reads_until;  // a collective in flight writes its outputs until its wait
      buffers.push_back(buf);
    }
  }
  for (const ir::ValueRef& v : g.outputs) {
    const int b = plan.buffer_of[v.node][v.output];
    if (b >= 0) buffers[b].last = count;
  }
  std::vector<int> order;
  for (size_t b = 0; b < buffers.size(); ++b) {
    if (!external || !external(buffers[b].node, buffers[b].output)) {
      order.push_back(static_cast<int>(b));
    }
  }
  auto room = [&](int b) { return align_up(std::max<size_t>(buffers[b].bytes, 1)); };
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return room(a) > room(b); });
  std::vector<int> placed;
  for (int b : order) {
    MemoryPlan::Buffer& buf = buffers[b];
    // Intervals [offset, offset + room) of placed buffers alive at the same time, by offset.
    std::vector<std::pair<size_t, size_t>> busy;
    for (int p : placed) {
      const MemoryPlan::Buffer& o = buffers[p];
      if (o.first <= buf.last && buf.first <= o.last) {
        busy.emplace_back(static_cast<size_t>(o.offset), static_cast<size_t>(o.offset) + room(p));
      }
    }
    std::sort(busy.begin(), busy.end());
    size_t offset = 0;
    for (const auto& [start, end] : busy) {
      if (offset + room(b) <= start) break;
      offset = std::max(offset, end);
    }
    buf.offset = static_cast<int64_t>(offset);
    placed.push_back(b);
    plan.peak_bytes = std::max(plan.peak_bytes, offset + room(b));
    plan.total_bytes += room(b);
  }
  for (const MemoryPlan::Buffer& buf : buffers) plan.offset[buf.node][buf.output] = buf.offset;
  plan.num_buffers = static_cast<int>(placed.size());
  return plan;
}

// NOTE [Zero-copy cut edges] (executor.h): which buffers live in a mailbox slot.
void Executor::bind_mailboxes() {
  const int count = static_cast<int>(graph_.nodes.size());
  if (!zero_copy_) return;  // copy every message (for comparison)
  const ir::OpDef& send = rpc_send_op();
  const ir::OpDef& recv = rpc_recv_op();
  // Buffers that an op writes in place (optimizer updates): never bound.
  std::vector<bool> mutated(plan_.buffers.size(), false);
  auto buffer_of = [&](const ir::ValueRef& v) { return plan_.buffer_of[v.node][v.output]; };
  for (const ir::Node& n : graph_.nodes) {
    if (!n.is_op() || !n.op->mutates_inputs) continue;
    for (const ir::ValueRef& v : n.inputs) {
      if (buffer_of(v) >= 0) mutated[buffer_of(v)] = true;
    }
  }
  std::vector<Mailbox>& binding = mailbox_of_buffer_;
  binding.assign(plan_.buffers.size(), {});
  for (int i = 0; i < count; ++i) {
    const ir::Node& n = graph_.nodes[i];
    if (!n.is_op() || (n.op != &send && n.op != &recv)) continue;
    comm::ShmMailboxes* boxes = rpc_channel(n.attrs);
    if (boxes == nullptr) continue;
    const int tag = static_cast<int>(n.attrs.get<int64_t>("tag"));
    const int b = n.op == &recv ? buffer_of({i, 0}) : buffer_of(n.inputs[0]);
    if (b < 0 || binding[b].boxes != nullptr || mutated[b]) continue;
    const MemoryPlan::Buffer& buf = plan_.buffers[b];
    const ir::TensorMeta& meta =
        n.op == &recv ? n.outputs[0] : graph_.nodes[n.inputs[0].node].outputs[n.inputs[0].output];
    const size_t bytes = static_cast<size_t>(meta.shape.numel()) * dtype_size(meta.dtype);
    // A send binds the buffer its input lies in only when the message is the whole buffer (not
    // a row range of it) and no receive already owns it.
    if (bytes != buf.bytes || bytes == 0) continue;
    if (n.op == &send && graph_.nodes[buf.node].op == &recv) continue;
    binding[b] = {boxes, tag, n.op == &recv};
  }
  claim_before_.assign(count, {});
  release_after_.assign(count + 1, {});
  for (size_t b = 0; b < binding.size(); ++b) {
    const Mailbox& box = binding[b];
    if (box.boxes == nullptr) continue;
    const MemoryPlan::Buffer& buf = plan_.buffers[b];
    ++zero_copy_buffers_;
    if (box.incoming) {
      release_after_[static_cast<size_t>(buf.last)].push_back(box);
    } else {
      claim_before_[static_cast<size_t>(buf.node)].push_back(box);
    }
  }
}

namespace {

// NOTE [Collectives in flight]: where each asynchronous op of `g` is waited for (-1: none).
std::vector<int> collective_waits(const ir::Graph& g) {
  const int count = static_cast<int>(g.nodes.size());
  std::vector<int> wait_at(count, -1);
  std::vector<int> first_reader(count, count);
  for (int i = count - 1; i >= 0; --i) {
    for (const ir::ValueRef& v : g.nodes[i].inputs) first_reader[v.node] = i;
  }
  for (const ir::ValueRef& v : g.outputs)
    first_reader[v.node] = std::min(first_reader[v.node], count);
  int next_mutation = count;
  for (int i = count - 1; i >= 0; --i) {
    const ir::Node& n = g.nodes[i];
    if (n.is_op() && n.op->async_kernel) {
      const int at = std::min(first_reader[i], next_mutation);
      if (at > i + 1) wait_at[i] = at;
    }
    if (n.is_op() && n.op->mutates_inputs) next_mutation = i;
  }
  return wait_at;
}

}  // namespace

Executor::Executor(ir::Graph graph, ExecutorOptions options)
    : graph_(std::move(graph)), zero_copy_(options.zero_copy) {
  ir::verify(graph_);
  wait_at_ = collective_waits(graph_);
  plan_ = plan_memory(graph_, {}, wait_at_);
  bind_mailboxes();
  if (zero_copy_buffers_ > 0) {  // the same buffers, numbered alike, placed without the bound ones
    const std::vector<std::vector<int>> buffer_of = plan_.buffer_of;
    plan_ = plan_memory(
        graph_,
        [&](int node, int output) {
          return mailbox_of_buffer_[buffer_of[node][output]].boxes != nullptr;
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
        const Mailbox& box = mailbox_of_buffer_[b];
        CLEAVE_ASSERT(box.boxes != nullptr, "buffer of node {} output {} has no place", i, k);
        impl->storage = Storage::borrow(box.boxes->message(box.tag), buf.bytes, Device::cpu());
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
      if (zero_copy_buffers_ > 0 && !claim_before_[i].empty()) {
        for (const Mailbox& box : claim_before_[i]) box.boxes->claim(box.tag);
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
      if (zero_copy_buffers_ > 0) {
        for (const Mailbox& box : release_after_[i]) box.boxes->release(box.tag);
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
  if (zero_copy_buffers_ > 0) {
    for (const Mailbox& box : release_after_[count]) box.boxes->release(box.tag);
  }
  return out;
}

std::vector<std::string> Executor::plan_notes() const {
  std::vector<std::string> notes(graph_.nodes.size());
  for (size_t i = 0; i < graph_.nodes.size(); ++i) {
    const ir::Node& n = graph_.nodes[i];
    if (!n.is_op() || n.outputs.empty()) continue;
    if (n.op->output_is_view) {
      notes[i] = "buffer: view of input 0";
      continue;
    }
    std::string s;
    for (size_t k = 0; k < n.outputs.size(); ++k) {
      s += fmt::format("{}[{}, +{})", s.empty() ? "buffer: " : ", ", plan_.offset[i][k],
                       n.outputs[k].shape.numel() * dtype_size(n.outputs[k].dtype));
    }
    notes[i] = s;
  }
  return notes;
}

}  // namespace cleave::runtime

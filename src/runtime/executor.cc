// The memory plan and the executor (NOTE [Memory plan]).
#include "cleave/runtime/executor.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>

#include "cleave/ir/passes.h"
#include "cleave/runtime/context.h"
#include "cleave/runtime/rpc.h"

namespace cleave::runtime {
namespace {

constexpr size_t kAlign = 64;
size_t align_up(size_t n) { return (n + kAlign - 1) / kAlign * kAlign; }

struct Buffer {
  int node, output;
  size_t bytes;
  int first, last;  // lifetime in node indices, inclusive
  int64_t offset = -1;
};

}  // namespace

MemoryPlan plan_memory(const ir::Graph& g) {
  const int count = static_cast<int>(g.nodes.size());
  MemoryPlan plan;
  plan.offset.resize(count);
  // root[node][output]: the buffer (index into `buffers`) a value lives in, or -1.
  std::vector<std::vector<int>> root(count);
  std::vector<Buffer> buffers;
  for (int i = 0; i < count; ++i) {
    const ir::Node& n = g.nodes[i];
    plan.offset[i].assign(n.outputs.size(), -1);
    root[i].assign(n.outputs.size(), -1);
    if (!n.is_op()) continue;
    for (const ir::ValueRef& v : n.inputs) {
      const int b = root[v.node][v.output];
      if (b >= 0) buffers[b].last = std::max(buffers[b].last, i);
    }
    if (n.op->output_is_view) {
      root[i][0] = root[n.inputs[0].node][n.inputs[0].output];
      continue;
    }
    for (size_t k = 0; k < n.outputs.size(); ++k) {
      const size_t bytes =
          static_cast<size_t>(n.outputs[k].shape.numel()) * dtype_size(n.outputs[k].dtype);
      root[i][k] = static_cast<int>(buffers.size());
      buffers.push_back({i, static_cast<int>(k), align_up(std::max<size_t>(bytes, 1)), i, i});
    }
  }
  for (const ir::ValueRef& v : g.outputs) {
    const int b = root[v.node][v.output];
    if (b >= 0) buffers[b].last = count;
  }
  std::vector<int> order(buffers.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = static_cast<int>(i);
  std::stable_sort(order.begin(), order.end(),
                   [&](int a, int b) { return buffers[a].bytes > buffers[b].bytes; });
  std::vector<int> placed;
  for (int b : order) {
    Buffer& buf = buffers[b];
    // Intervals [offset, offset + bytes) of placed buffers alive at the same time, by offset.
    std::vector<std::pair<size_t, size_t>> busy;
    for (int p : placed) {
      const Buffer& o = buffers[p];
      if (o.first <= buf.last && buf.first <= o.last) {
        busy.emplace_back(static_cast<size_t>(o.offset), static_cast<size_t>(o.offset) + o.bytes);
      }
    }
    std::sort(busy.begin(), busy.end());
    size_t offset = 0;
    for (const auto& [start, end] : busy) {
      if (offset + buf.bytes <= start) break;
      offset = std::max(offset, end);
    }
    buf.offset = static_cast<int64_t>(offset);
    placed.push_back(b);
    plan.peak_bytes = std::max(plan.peak_bytes, offset + buf.bytes);
    plan.total_bytes += buf.bytes;
  }
  for (const Buffer& buf : buffers) plan.offset[buf.node][buf.output] = buf.offset;
  plan.num_buffers = static_cast<int>(buffers.size());
  return plan;
}

Executor::Executor(ir::Graph graph) : graph_(std::move(graph)) {
  ir::verify(graph_);
  plan_ = plan_memory(graph_);
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
      impl->storage = arena_.impl()->storage;
      impl->offset_bytes = static_cast<size_t>(plan_.offset[i][k]);
      impl->shape = n.outputs[k].shape;
      impl->dtype = n.outputs[k].dtype;
      values_[slot_base_[i] + k] = Tensor(impl);
      node_outputs_[i].push_back(Tensor(impl));
    }
    CLEAVE_ASSERT(n.op->cpu_kernel != nullptr, "op '{}' has no CPU kernel", n.op->name);
  }
  for (const ir::Node& n : graph_.nodes) placed_ = placed_ || (n.is_op() && n.op->communicates);
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
  if (placed_) post_receives(graph_);
  for (size_t i = 0; i < count; ++i) {
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
    if (!profiling_ && !placed_) {
      n.op->cpu_kernel(ir::KernelContext{*n.op, n.attrs, ins, node_outputs_[i]});
      continue;
    }
    const auto start = std::chrono::steady_clock::now();
    n.op->cpu_kernel(ir::KernelContext{*n.op, n.attrs, ins, node_outputs_[i]});
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (profiling_) node_seconds_[i] += seconds;
    (n.op->communicates ? comm_seconds : compute_seconds) += seconds;
  }
  if (placed_) {
    const auto start = std::chrono::steady_clock::now();
    wait_pending_sends();
    comm_seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    add_placed_run_stats(compute_seconds, comm_seconds);
  }
  std::vector<Tensor> out;
  out.reserve(graph_.outputs.size());
  for (const ir::ValueRef& v : graph_.outputs) {
    out.push_back(values_[slot_base_[v.node] + v.output].clone());
  }
  for (int in : graph_.inputs) values_[slot_base_[in]] = Tensor();  // do not keep the caller's data
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

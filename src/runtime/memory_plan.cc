// The memory plan (NOTE [Memory plan]), the waits for collectives in flight and the cut-edge
// buffers bound to mailbox slots.
#include "cleave/runtime/memory_plan.h"

#include <fmt/format.h>

#include <algorithm>
#include <utility>

#include "cleave/ir/passes.h"
#include "cleave/runtime/rpc.h"

namespace cleave::runtime {
namespace {

constexpr size_t kAlign = 64;
size_t align_up(size_t n) { return (n + kAlign - 1) / kAlign * kAlign; }

size_t value_bytes(const ir::TensorMeta& meta) {
  return static_cast<size_t>(meta.shape.numel()) * dtype_size(meta.dtype);
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
      plan.buffer_of[i][k] = static_cast<int>(buffers.size());
      MemoryPlan::Buffer buf{
          .node = i, .output = static_cast<int>(k), .bytes = value_bytes(n.outputs[k])};
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

std::vector<int> collective_waits(const ir::Graph& g) {
  const int count = static_cast<int>(g.nodes.size());
  std::vector<int> wait_at(count, -1);
  std::vector<int> first_reader(count, count);
  for (int i = count - 1; i >= 0; --i) {
    for (const ir::ValueRef& v : g.nodes[i].inputs) first_reader[v.node] = i;
  }
  for (const ir::ValueRef& v : g.outputs)
    first_reader[v.node] = std::min(first_reader[v.node], count);
  // next_write[r]: the first node after the one being looked at that writes into storage r.
  const std::vector<int> root = ir::storage_roots(g);
  std::vector<int> next_write(count, count);
  for (int i = count - 1; i >= 0; --i) {
    const ir::Node& n = g.nodes[i];
    if (n.is_op() && n.op->async_kernel) {
      int at = first_reader[i];
      for (const ir::ValueRef& v : n.inputs) at = std::min(at, next_write[root[v.node]]);
      if (at > i + 1) wait_at[i] = at;
    }
    if (!n.is_op() || !n.op->mutates_inputs) continue;
    for (size_t k = 0; k < n.inputs.size(); ++k) {
      if (n.op->writes_input(k)) next_write[root[n.inputs[k].node]] = i;
    }
  }
  return wait_at;
}

CutEdgeSlots bind_cut_edges(const ir::Graph& graph, const MemoryPlan& plan,
                            const std::function<comm::ShmMailboxes*(const ir::Node&)>& channel_of) {
  const int count = static_cast<int>(graph.nodes.size());
  const ir::OpDef& send = rpc_send_op();
  const ir::OpDef& recv = rpc_recv_op();
  // Buffers that an op writes in place (optimizer updates): never bound.
  std::vector<bool> mutated(plan.buffers.size(), false);
  auto buffer_of = [&](const ir::ValueRef& v) { return plan.buffer_of[v.node][v.output]; };
  for (const ir::Node& n : graph.nodes) {
    if (!n.is_op() || !n.op->mutates_inputs) continue;
    for (const ir::ValueRef& v : n.inputs) {
      if (buffer_of(v) >= 0) mutated[buffer_of(v)] = true;
    }
  }
  CutEdgeSlots slots;
  std::vector<MailboxSlot>& binding = slots.of_buffer;
  binding.assign(plan.buffers.size(), {});
  for (int i = 0; i < count; ++i) {
    const ir::Node& n = graph.nodes[i];
    if (!n.is_op() || (n.op != &send && n.op != &recv)) continue;
    comm::ShmMailboxes* boxes = channel_of(n);
    if (boxes == nullptr) continue;
    const int tag = static_cast<int>(n.attrs.get<int64_t>("tag"));
    const int b = n.op == &recv ? buffer_of({i, 0}) : buffer_of(n.inputs[0]);
    if (b < 0 || binding[b].boxes != nullptr || mutated[b]) continue;
    const MemoryPlan::Buffer& buf = plan.buffers[b];
    const size_t bytes = value_bytes(n.op == &recv ? n.outputs[0] : graph.meta(n.inputs[0]));
    // A send binds the buffer its input lies in only when the message is the whole buffer (not
    // a row range of it) and no receive already owns it.
    if (bytes != buf.bytes || bytes == 0) continue;
    if (n.op == &send && graph.nodes[buf.node].op == &recv) continue;
    binding[b] = {boxes, tag, n.op == &recv};
  }
  slots.claim_before.assign(count, {});
  slots.release_after.assign(count + 1, {});
  for (size_t b = 0; b < binding.size(); ++b) {
    const MailboxSlot& slot = binding[b];
    if (slot.boxes == nullptr) continue;
    const MemoryPlan::Buffer& buf = plan.buffers[b];
    ++slots.count;
    if (slot.incoming) {
      slots.release_after[static_cast<size_t>(buf.last)].push_back(slot);
    } else {
      slots.claim_before[static_cast<size_t>(buf.node)].push_back(slot);
    }
  }
  return slots;
}

std::vector<std::string> memory_plan_notes(const ir::Graph& graph, const MemoryPlan& plan) {
  std::vector<std::string> notes(graph.nodes.size());
  for (size_t i = 0; i < graph.nodes.size(); ++i) {
    const ir::Node& n = graph.nodes[i];
    if (!n.is_op() || n.outputs.empty()) continue;
    if (n.op->output_is_view) {
      notes[i] = "buffer: view of input 0";
      continue;
    }
    std::string s;
    for (size_t k = 0; k < n.outputs.size(); ++k) {
      s += fmt::format("{}[{}, +{})", s.empty() ? "buffer: " : ", ", plan.offset[i][k],
                       value_bytes(n.outputs[k]));
    }
    notes[i] = s;
  }
  return notes;
}

}  // namespace cleave::runtime

// Where the values of a compiled graph live while it runs: the memory plan (one arena, buffers
// shared by values whose lifetimes are disjoint), the schedule of waits for collectives in flight
// that lengthens those lifetimes, and the cut-edge buffers that lie in a shared-memory mailbox
// slot instead of the arena. Pure functions of a graph; the executor (cleave/runtime/executor.h)
// allocates and binds what they decide.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "cleave/ir/graph.h"

namespace cleave::comm {
class ShmMailboxes;
}

namespace cleave::runtime {

// NOTE [Memory plan]
// Every output of an op that is not a view gets a buffer, live from the op that writes it to the
// last op that reads it (through any chain of views, which alias their input's buffer instead of
// owning one; graph outputs live to the end). Buffers are placed in one arena, largest first, each
// at the lowest 64-byte-aligned offset that overlaps no placed buffer whose lifetime overlaps its
// own, so buffers whose lifetimes are disjoint share memory. Parameters, constants and inputs are
// bound, not planned.
struct MemoryPlan {
  struct Buffer {
    int node = 0, output = 0;  // the op output that writes it
    size_t bytes = 0;          // the value's size (its room in the arena is rounded up to 64)
    int first = 0, last = 0;   // lifetime in node indices, inclusive; last = node count: an output
    int64_t offset = -1;       // in the arena; -1 for an external buffer
  };
  std::vector<Buffer> buffers;
  // buffer_of[node][output]: the buffer a value lies in (a view's is its input's); -1 for inputs,
  // parameters and constants.
  std::vector<std::vector<int>> buffer_of;
  // offset[node][output] in the arena; -1 for values without a buffer of their own in it.
  std::vector<std::vector<int64_t>> offset;
  size_t peak_bytes = 0;   // the arena size
  size_t total_bytes = 0;  // the sum of all buffers (what allocating each separately would hold)
  int num_buffers = 0;     // the buffers placed in the arena
};

// external(node, output) says that the buffer of that op output lies outside the arena (the
// executor binds it elsewhere): it keeps its lifetime but gets no offset. read_until[node], when
// given, is the last node index at which `node` may still read its inputs and write its outputs
// (a collective in flight, NOTE [Collectives in flight] in cleave/runtime/executor.h); their
// buffers live at least that long, read or not. Buffers are numbered in node order whatever
// `external` says, so two plans of one graph number them alike.
MemoryPlan plan_memory(const ir::Graph& graph,
                       const std::function<bool(int node, int output)>& external = {},
                       const std::vector<int>& read_until = {});

// Per node, where the executor waits for it (NOTE [Collectives in flight] in
// cleave/runtime/executor.h): for an op with an async_kernel, the index of the first node that
// reads one of its outputs or the first later op that writes into the storage of one of its
// inputs (OpDef::writes_input, through views: ir::storage_roots), whichever comes first (the node
// count: the end of the run); -1 when that is
// the very next node (it runs synchronously) and for every other node. What plan_memory takes as
// read_until.
std::vector<int> collective_waits(const ir::Graph& graph);

// NOTE [Zero-copy cut edges] (cleave/runtime/executor.h): the mailbox slot of one cut edge end.
struct MailboxSlot {
  comm::ShmMailboxes* boxes = nullptr;  // null: not bound
  int tag = 0;                          // the cut edge's tag
  bool incoming = false;                // an RpcRecv's output (else what an RpcSend sends)
};

// Which buffers of a plan lie in a mailbox slot, and when a run claims and releases the slots.
struct CutEdgeSlots {
  std::vector<MailboxSlot> of_buffer;  // per plan buffer; boxes == null: in the arena
  // Per node: the outgoing slots to claim before its kernel writes them (the writer of the
  // buffer an RpcSend sends).
  std::vector<std::vector<MailboxSlot>> claim_before;
  // Per node, and one more for the end of the run: the incoming slots to release after it (the
  // last reader of an RpcRecv's output, views followed).
  std::vector<std::vector<MailboxSlot>> release_after;
  int count = 0;  // the bound buffers
};

// Binds the buffers of `plan` that NOTE [Zero-copy cut edges] lets lie in a mailbox slot.
// channel_of(node) gives the mailboxes an RpcSend or RpcRecv node goes through, or null (its
// group's transport: nothing bound); the executor passes runtime::rpc_channel of its attributes.
// The pointers are only stored. A graph without such edges gets count 0 and empty schedules
// sized for the graph.
CutEdgeSlots bind_cut_edges(
    const ir::Graph& graph, const MemoryPlan& plan,
    const std::function<comm::ShmMailboxes*(const ir::Node& node)>& channel_of);

// Per node, the note ir::dump_text prints for it: an op's buffers as "buffer: [offset, +bytes)"
// (offset -1: outside the arena), "buffer: view of input 0" for a view, empty for the others.
std::vector<std::string> memory_plan_notes(const ir::Graph& graph, const MemoryPlan& plan);

}  // namespace cleave::runtime

// The point-to-point primitives of placed graphs: RpcSend and RpcRecv (the names MindSpore gives
// the communication operators its distributed graph partition inserts).
//
//   RpcSend(x)  {dst_rank, tag, group}                 no outputs: sends x to dst_rank
//   RpcRecv()   {src_rank, tag, shape, dtype, group}   receives one tensor from src_rank
//
// A send and a receive match by (peer, tag) on the group ("world" by default); equal tags match
// in posting order. RpcSend copies its input and posts the send asynchronously, so a rank never
// blocks on a send (NOTE [A deadlock-free order] in cleave/parallel/partition.h relies on it);
// the executor waits for the sends still in flight at the end of each run
// (wait_pending_sends). RpcRecv blocks until its tensor has arrived, bounded by the group's
// timeout. Both are side effects (OpDef::communicates): no pass removes, merges or folds them.
// Through shared-memory mailboxes (a "channel" attribute) a send is a copy into the receiver's
// slot — or no copy, when the executor had the producing op write into that slot (NOTE
// [Zero-copy cut edges] in cleave/runtime/executor.h) — and waits only while the receiver still
// holds the previous step's message of the edge; a receive into the slot itself reads in place.
#pragma once

#include <cstdint>
#include <memory>

#include "cleave/comm/shm_mailbox.h"
#include "cleave/ir/graph.h"
#include "cleave/ir/op_def.h"

namespace cleave::runtime {

// Registers RpcSend and RpcRecv in the global registry (once) and returns them.
const ir::OpDef& rpc_send_op();
const ir::OpDef& rpc_recv_op();

// Posts the receive of every RpcRecv of `graph` at once, into buffers of their own (the
// executor calls it at the start of a run): a value then flows as soon as its sender posts it,
// without the rendezvous round trip a receive posted at first use would add (Gloo sends only to
// a posted receive). Each RpcRecv then waits for its posted receive and copies the value.
void post_receives(const ir::Graph& graph);

// Waits for every RpcSend this thread posted that has not completed; throws the first failure.
void wait_pending_sends();

// Makes `boxes` the transport of the RpcSend/RpcRecv nodes whose "channel" attribute is the
// returned id (compile_distributed sets it when the workers share this host).
int64_t register_rpc_channel(std::unique_ptr<comm::ShmMailboxes> boxes);
// The shared-memory mailboxes of an RpcSend/RpcRecv node with a "channel" attribute, or null
// (the node goes through its group's transport). They live until the process exits.
comm::ShmMailboxes* rpc_channel(const ir::Attrs& attrs);

}  // namespace cleave::runtime

// RpcSend and RpcRecv (cleave/runtime/rpc.h).
#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <memory>
#include <mutex>
#include <optional>
#include <vector>

#include "cleave/cluster/activity.h"
#include "cleave/comm/group_registry.h"
#include "cleave/ir/graph.h"
#include "cleave/ir/registry.h"
#include "cleave/runtime/collectives.h"
#include "cleave/runtime/rpc.h"
#include "runtime/collective_attrs.h"

namespace cleave::runtime {
namespace {

using ir::KernelContext;
using ir::OpDef;

struct PendingSend {
  std::shared_ptr<comm::Work> work;
  Tensor buffer;  // the copy being sent, alive until the send completes
};
thread_local std::vector<PendingSend> t_pending;

// Receives posted by post_receives(), in posting order, until their RpcRecv runs.
struct PostedRecv {
  const comm::ProcessGroup* group;
  int src, tag;
  Tensor buffer;
  std::shared_ptr<comm::Work> work;
};
thread_local std::vector<PostedRecv> t_posted;

std::mutex g_channels_mutex;
std::vector<std::shared_ptr<comm::ShmMailboxes>> g_channels;

std::shared_ptr<comm::ProcessGroup> rpc_group(const ir::Attrs& attrs, const char* op) {
  const std::string name = attrs.get_or<std::string>("group", "world");
  std::shared_ptr<comm::ProcessGroup> group = comm::get_group(name);
  CLEAVE_CHECK_ARG(group != nullptr,
                   "{}: group '{}' has one rank (this process is not in a cluster); placed "
                   "graphs run only after cleave::init() in a job of several workers",
                   op, name);
  return group;
}

void kernel_send(const KernelContext& ctx) {
  const int dst = static_cast<int>(ctx.attrs.get<int64_t>("dst_rank"));
  const int tag = static_cast<int>(ctx.attrs.get<int64_t>("tag"));
  if (comm::ShmMailboxes* boxes = rpc_channel(ctx.attrs)) {
    boxes->send(tag, ctx.inputs[0].raw_data(), ctx.inputs[0].nbytes());
    return;
  }
  auto group = rpc_group(ctx.attrs, "RpcSend");
  Tensor copy = ctx.inputs[0].clone();
  t_pending.push_back({group->isend(copy, dst, tag), copy});
}

void kernel_recv(const KernelContext& ctx) {
  const int src = static_cast<int>(ctx.attrs.get<int64_t>("src_rank"));
  const int tag = static_cast<int>(ctx.attrs.get<int64_t>("tag"));
  comm::ShmMailboxes* boxes = rpc_channel(ctx.attrs);
  std::optional<cluster::ActivityScope> activity;  // for the failure line, only when it waits
  if (boxes == nullptr || !boxes->arrived(tag)) {
    activity.emplace(
        fmt::format("waiting in RpcRecv for tensor {} (tag {}) from rank {} of a placed graph",
                    ctx.outputs[0].shape().to_string(), tag, src));
  }
  if (boxes != nullptr) {
    boxes->recv(tag, ctx.outputs[0].raw_data(), ctx.outputs[0].nbytes());
    return;
  }
  auto group = rpc_group(ctx.attrs, "RpcRecv");
  auto it = std::find_if(t_posted.begin(), t_posted.end(), [&](const PostedRecv& p) {
    return p.group == group.get() && p.src == src && p.tag == tag;
  });
  if (it == t_posted.end()) {
    group->recv(ctx.outputs[0], src, tag);
    return;
  }
  const PostedRecv posted = std::move(*it);
  t_posted.erase(it);
  posted.work->wait();
  std::memcpy(ctx.outputs[0].raw_data(), posted.buffer.raw_data(), posted.buffer.nbytes());
}

}  // namespace

void register_rpc_kernels(ir::Registry& r) {
  r.attach_cpu_kernel("RpcSend", kernel_send);
  r.attach_cpu_kernel("RpcRecv", kernel_recv);
}

const ir::OpDef& rpc_send_op() { return ir::Registry::global().get("RpcSend"); }
const ir::OpDef& rpc_recv_op() { return ir::Registry::global().get("RpcRecv"); }

void post_receives(const ir::Graph& graph) {
  t_posted.clear();  // left over only by a run that failed
  const ir::OpDef& recv = rpc_recv_op();
  for (const ir::Node& n : graph.nodes) {
    if (n.op != &recv || n.attrs.has("channel")) continue;
    auto group = rpc_group(n.attrs, "RpcRecv");
    const int src = static_cast<int>(n.attrs.get<int64_t>("src_rank"));
    const int tag = static_cast<int>(n.attrs.get<int64_t>("tag"));
    Tensor buffer = Tensor::empty(n.outputs[0].shape, n.outputs[0].dtype);
    auto work = group->irecv(buffer, src, tag);
    t_posted.push_back({group.get(), src, tag, std::move(buffer), std::move(work)});
  }
}

comm::ShmMailboxes* rpc_channel(const ir::Attrs& attrs) {
  const int64_t channel = attrs.get_or<int64_t>("channel", -1);
  if (channel < 0) return nullptr;
  std::lock_guard<std::mutex> lock(g_channels_mutex);
  return g_channels.at(static_cast<size_t>(channel)).get();
}

int64_t register_rpc_channel(std::unique_ptr<comm::ShmMailboxes> boxes) {
  std::lock_guard<std::mutex> lock(g_channels_mutex);
  g_channels.push_back(std::move(boxes));
  return static_cast<int64_t>(g_channels.size()) - 1;
}

void wait_pending_sends() {
  std::vector<PendingSend> pending;
  pending.swap(t_pending);
  for (const PendingSend& p : pending) p.work->wait();
}

}  // namespace cleave::runtime

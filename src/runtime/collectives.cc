// The CPU kernels of the communication primitives (cleave/ir/comm_ops.h defines them: inference
// and gradients from attributes), attached to their entries while the program starts
// (register_collective_kernels, src/runtime/registrations.cc). A kernel finds
// its process group from the op's group attributes (NOTE [Group attributes]) and runs the
// collective on the group's backend. The functional wrappers are in collective_ops.cc.
#include "cleave/runtime/collectives.h"

#include <fmt/ranges.h>

#include <cstring>
#include <span>
#include <vector>

#include "cleave/comm/group_registry.h"
#include "cleave/core/error.h"
#include "cleave/ir/comm_ops.h"
#include "runtime/collective_attrs.h"

namespace cleave::runtime {
namespace {

using ir::KernelContext;

// ---- kernels ----

std::vector<Tensor> tensors(std::span<const Tensor> ts) { return {ts.begin(), ts.end()}; }

// AllReduce and FusedAllReduce (AllReduce's one input is a bucket of one): one AllReduce of the
// inputs' concatenation into the outputs', reading the inputs where they lie (NOTE [AllReduce
// into other buffers] in cleave/comm/process_group.h).
void kernel_all_reduce(const KernelContext& ctx) {
  const GroupRef g = group_attr(ctx.attrs, ctx.op.name);
  cluster::ActivityScope activity(collective_activity(ctx.op.name, g));
  g.group->all_reduce(tensors(ctx.outputs), tensors(ctx.inputs),
                      reduce_op_attr(ctx.attrs, ctx.op.name));
}

// Shapes seen as (outer, dim, inner) around one axis.
struct AxisView {
  int64_t outer = 1, dim = 1, inner = 1;
  AxisView(const Shape& s, int64_t axis) {
    for (int64_t d = 0; d < axis; ++d) outer *= s[d];
    dim = s[axis];
    for (int64_t d = axis + 1; d < s.rank(); ++d) inner *= s[d];
  }
};

int64_t axis_of(const ir::Attrs& attrs, const char* name, int64_t rank) {
  const int64_t a = attrs.get_or<int64_t>(name, 0);
  return a < 0 ? a + rank : a;
}

// NOTE [Gathering on an axis]
// The comm layer gathers and scatters flat chunks in group-rank order, i.e. along dim 0. On
// another axis the chunks are packed: a tensor (outer, n * dim, inner) around the axis holds n
// blocks (outer, dim, inner), block j being rows [j * dim, (j + 1) * dim) of the axis. AllGather
// receives the n blocks into a packed buffer and unpacks them; ReduceScatter packs its input into
// blocks first. When the axis has nothing before it (outer == 1) the blocks are contiguous
// already and no copy is made.
void unpack_blocks(const Tensor& packed, const Tensor& out, int64_t n, int64_t axis) {
  const AxisView v(out.shape(), axis);
  const int64_t dim = v.dim / n;
  const size_t esize = dtype_size(out.dtype());
  const size_t run = static_cast<size_t>(dim * v.inner) * esize;
  const char* src = static_cast<const char*>(packed.raw_data());
  char* dst = static_cast<char*>(out.raw_data());
  for (int64_t j = 0; j < n; ++j) {
    for (int64_t o = 0; o < v.outer; ++o) {
      std::memcpy(dst + static_cast<size_t>((o * v.dim + j * dim) * v.inner) * esize,
                  src + static_cast<size_t>((j * v.outer + o) * dim * v.inner) * esize, run);
    }
  }
}

void pack_blocks(const Tensor& in, const Tensor& packed, int64_t n, int64_t axis) {
  const AxisView v(in.shape(), axis);
  const int64_t dim = v.dim / n;
  const size_t esize = dtype_size(in.dtype());
  const size_t run = static_cast<size_t>(dim * v.inner) * esize;
  const char* src = static_cast<const char*>(in.raw_data());
  char* dst = static_cast<char*>(packed.raw_data());
  for (int64_t j = 0; j < n; ++j) {
    for (int64_t o = 0; o < v.outer; ++o) {
      std::memcpy(dst + static_cast<size_t>((j * v.outer + o) * dim * v.inner) * esize,
                  src + static_cast<size_t>((o * v.dim + j * dim) * v.inner) * esize, run);
    }
  }
}

void kernel_all_gather(const KernelContext& ctx) {
  const GroupRef g = group_attr(ctx.attrs, ctx.op.name);
  const int64_t axis = axis_of(ctx.attrs, "axis", ctx.inputs[0].rank());
  cluster::ActivityScope activity(collective_activity(ctx.op.name, g));
  if (AxisView(ctx.inputs[0].shape(), axis).outer == 1) {
    g.group->all_gather(ctx.outputs[0], ctx.inputs[0]);
    return;
  }
  Tensor packed = Tensor::empty(ctx.outputs[0].shape(), ctx.outputs[0].dtype());
  g.group->all_gather(packed, ctx.inputs[0]);
  unpack_blocks(packed, ctx.outputs[0], g.size(), axis);
}

void kernel_reduce_scatter(const KernelContext& ctx) {
  const GroupRef g = group_attr(ctx.attrs, ctx.op.name);
  const int64_t axis = axis_of(ctx.attrs, "axis", ctx.inputs[0].rank());
  const comm::ReduceOp op = reduce_op_attr(ctx.attrs, ctx.op.name);
  cluster::ActivityScope activity(collective_activity(ctx.op.name, g));
  if (AxisView(ctx.inputs[0].shape(), axis).outer == 1) {
    g.group->reduce_scatter(ctx.outputs[0], ctx.inputs[0], op);
    return;
  }
  Tensor packed = Tensor::empty(ctx.inputs[0].shape(), ctx.inputs[0].dtype());
  pack_blocks(ctx.inputs[0], packed, g.size(), axis);
  g.group->reduce_scatter(ctx.outputs[0], packed, op);
}

void kernel_broadcast(const KernelContext& ctx) {
  ctx.outputs[0].copy_from(ctx.inputs[0]);
  const GroupRef g = group_attr(ctx.attrs, ctx.op.name);
  const int64_t root = ctx.attrs.get<int64_t>("root_rank", ctx.op.name);
  cluster::ActivityScope activity(
      collective_activity(ctx.op.name, g, fmt::format("from root rank {}", root)));
  g.group->broadcast(ctx.outputs[0], static_cast<int>(root));
}

// The comm layer has no reduce-to-root: an all-reduce whose result only the root keeps.
void kernel_reduce(const KernelContext& ctx) {
  const GroupRef g = group_attr(ctx.attrs, ctx.op.name);
  const int64_t root = ctx.attrs.get<int64_t>("root_rank", ctx.op.name);
  cluster::ActivityScope activity(
      collective_activity(ctx.op.name, g, fmt::format("to root rank {}", root)));
  g.group->all_reduce(ctx.outputs[0], ctx.inputs[0], reduce_op_attr(ctx.attrs, ctx.op.name));
  if (g.rank() != root) ctx.outputs[0].fill(0.0);
}

// NOTE [AlltoAll packing]
// The comm layer exchanges equal contiguous chunks: chunk j goes to rank j. So the kernel packs
// block j of x along split_dim into chunk j of a send buffer, exchanges, and unpacks chunk j of
// the receive buffer (block j, from rank j) into position j along concat_dim of the output. A
// block is x's shape with split_dim divided by the group size, in row-major order.
void kernel_all_to_all(const KernelContext& ctx) {
  const GroupRef g = group_attr(ctx.attrs, ctx.op.name);
  const Tensor& x = ctx.inputs[0];
  const Tensor& y = ctx.outputs[0];
  const int64_t n = g.size();
  const int64_t rank = x.rank();
  auto axis = [&](const char* name) {
    const int64_t a = ctx.attrs.get<int64_t>(name, ctx.op.name);
    return a < 0 ? a + rank : a;
  };
  const int64_t split = axis("split_dim"), concat = axis("concat_dim");
  const size_t esize = dtype_size(x.dtype());
  std::vector<int64_t> block_dims = x.shape().dims();
  block_dims[static_cast<size_t>(split)] /= n;
  const Shape block(block_dims);
  const int64_t block_numel = block.numel();

  Tensor send = Tensor::empty(x.shape(), x.dtype());
  Tensor recv = Tensor::empty(x.shape(), x.dtype());
  const AxisView xs(x.shape(), split);
  const int64_t xs_block = xs.dim / n;  // block extent along split_dim
  for (int64_t j = 0; j < n; ++j) {
    char* dst = static_cast<char*>(send.raw_data()) + j * block_numel * esize;
    const char* src = static_cast<const char*>(x.raw_data());
    const size_t run = static_cast<size_t>(xs_block * xs.inner) * esize;
    for (int64_t o = 0; o < xs.outer; ++o) {
      std::memcpy(dst + o * run, src + ((o * xs.dim + j * xs_block) * xs.inner) * esize, run);
    }
  }
  {
    cluster::ActivityScope activity(collective_activity(ctx.op.name, g));
    g.group->all_to_all(recv, send);
  }
  const AxisView bs(block, concat);  // a received block around concat_dim
  const AxisView ys(y.shape(), concat);
  for (int64_t j = 0; j < n; ++j) {
    const char* src = static_cast<const char*>(recv.raw_data()) + j * block_numel * esize;
    char* dst = static_cast<char*>(y.raw_data());
    const size_t run = static_cast<size_t>(bs.dim * bs.inner) * esize;
    for (int64_t o = 0; o < bs.outer; ++o) {
      std::memcpy(dst + ((o * ys.dim + j * bs.dim) * ys.inner) * esize, src + o * run, run);
    }
  }
}

// ---- asynchronous launches (OpDef::async_kernel) ----
// The executor starts these collectives on their group's communication thread and waits where
// their outputs are first needed (NOTE [Collectives in flight] in cleave/runtime/executor.h). Each
// returns the waiter; the tensors it holds stay alive until it has run.

std::function<void()> waiter(std::shared_ptr<comm::Work> work, std::string activity,
                             std::function<void()> then = {}) {
  return [work = std::move(work), activity = std::move(activity), then = std::move(then)] {
    {
      cluster::ActivityScope scope(activity);
      work->wait();
    }
    if (then) then();
  };
}

std::function<void()> launch_all_reduce(const KernelContext& ctx) {
  const GroupRef g = group_attr(ctx.attrs, ctx.op.name);
  return waiter(g.group->all_reduce_async(tensors(ctx.outputs), tensors(ctx.inputs),
                                          reduce_op_attr(ctx.attrs, ctx.op.name)),
                collective_activity(ctx.op.name, g));
}

std::function<void()> launch_broadcast(const KernelContext& ctx) {
  ctx.outputs[0].copy_from(ctx.inputs[0]);
  const GroupRef g = group_attr(ctx.attrs, ctx.op.name);
  const int64_t root = ctx.attrs.get<int64_t>("root_rank", ctx.op.name);
  return waiter(g.group->broadcast_async(ctx.outputs[0], static_cast<int>(root)),
                collective_activity(ctx.op.name, g, fmt::format("from root rank {}", root)));
}

std::function<void()> launch_all_gather(const KernelContext& ctx) {
  const GroupRef g = group_attr(ctx.attrs, ctx.op.name);
  const int64_t axis = axis_of(ctx.attrs, "axis", ctx.inputs[0].rank());
  const std::string activity = collective_activity(ctx.op.name, g);
  if (AxisView(ctx.inputs[0].shape(), axis).outer == 1) {
    return waiter(g.group->all_gather_async(ctx.outputs[0], ctx.inputs[0]), activity);
  }
  Tensor packed = Tensor::empty(ctx.outputs[0].shape(), ctx.outputs[0].dtype());
  const Tensor out = ctx.outputs[0];
  const int64_t n = g.size();
  return waiter(g.group->all_gather_async(packed, ctx.inputs[0]), activity,
                [packed, out, n, axis] { unpack_blocks(packed, out, n, axis); });
}

std::function<void()> launch_reduce_scatter(const KernelContext& ctx) {
  const GroupRef g = group_attr(ctx.attrs, ctx.op.name);
  const int64_t axis = axis_of(ctx.attrs, "axis", ctx.inputs[0].rank());
  const comm::ReduceOp op = reduce_op_attr(ctx.attrs, ctx.op.name);
  const std::string activity = collective_activity(ctx.op.name, g);
  if (AxisView(ctx.inputs[0].shape(), axis).outer == 1) {
    return waiter(g.group->reduce_scatter_async(ctx.outputs[0], ctx.inputs[0], op), activity);
  }
  Tensor packed = Tensor::empty(ctx.inputs[0].shape(), ctx.inputs[0].dtype());
  pack_blocks(ctx.inputs[0], packed, g.size(), axis);
  // The packed copy is what the thread reads: it lives in the waiter.
  return waiter(g.group->reduce_scatter_async(ctx.outputs[0], packed, op), activity, [packed] {});
}

void kernel_neighbor_exchange(const KernelContext& ctx) {
  const GroupRef g = group_attr(ctx.attrs, ctx.op.name);
  const auto& send_ids = ctx.attrs.get<std::vector<int64_t>>("send_rank_ids", ctx.op.name);
  const auto& recv_ids = ctx.attrs.get<std::vector<int64_t>>("recv_rank_ids", ctx.op.name);
  std::vector<comm::PeerBuffer> sends, recvs;
  for (size_t k = 0; k < send_ids.size(); ++k) {
    sends.push_back({ctx.inputs[k], static_cast<int>(send_ids[k])});
  }
  for (size_t k = 0; k < recv_ids.size(); ++k) {
    recvs.push_back({ctx.outputs[k], static_cast<int>(recv_ids[k])});
  }
  cluster::ActivityScope activity(
      collective_activity(ctx.op.name, g,
                          fmt::format("sending to ranks [{}], receiving from ranks [{}]",
                                      fmt::join(send_ids, ", "), fmt::join(recv_ids, ", "))));
  g.group->exchange(sends, recvs, static_cast<int>(ctx.attrs.get_or<int64_t>("sr_tag", 0)));
}

void kernel_send(const KernelContext& ctx) {
  const GroupRef g = group_attr(ctx.attrs, ctx.op.name);
  const int64_t dest = ctx.attrs.get<int64_t>("dest_rank");
  cluster::ActivityScope activity(
      collective_activity(ctx.op.name, g, fmt::format("to rank {}", dest)));
  g.group->send(ctx.inputs[0], static_cast<int>(dest),
                static_cast<int>(ctx.attrs.get<int64_t>("sr_tag")));
}

void kernel_recv(const KernelContext& ctx) {
  const GroupRef g = group_attr(ctx.attrs, ctx.op.name);
  const int64_t src = ctx.attrs.get<int64_t>("src_rank");
  cluster::ActivityScope activity(
      collective_activity(ctx.op.name, g, fmt::format("from rank {}", src)));
  g.group->recv(ctx.outputs[0], static_cast<int>(src),
                static_cast<int>(ctx.attrs.get<int64_t>("sr_tag")));
}

}  // namespace

void register_collective_kernels(ir::Registry& r) {
  r.attach_cpu_kernel("AllReduce", kernel_all_reduce);
  r.attach_cpu_kernel("FusedAllReduce", kernel_all_reduce);
  r.attach_cpu_kernel("AllGather", kernel_all_gather);
  r.attach_cpu_kernel("ReduceScatter", kernel_reduce_scatter);
  r.attach_cpu_kernel("Broadcast", kernel_broadcast);
  r.attach_cpu_kernel("Reduce", kernel_reduce);
  r.attach_cpu_kernel("AlltoAll", kernel_all_to_all);
  r.attach_async_kernel("AllReduce", launch_all_reduce);
  r.attach_async_kernel("FusedAllReduce", launch_all_reduce);
  r.attach_async_kernel("AllGather", launch_all_gather);
  r.attach_async_kernel("ReduceScatter", launch_reduce_scatter);
  r.attach_async_kernel("Broadcast", launch_broadcast);
  r.attach_cpu_kernel("NeighborExchange", kernel_neighbor_exchange);
  r.attach_cpu_kernel("Send", kernel_send);
  r.attach_cpu_kernel("Recv", kernel_recv);
}

}  // namespace cleave::runtime

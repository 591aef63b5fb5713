// The collective primitives: registry entries (infer, CPU kernel on the group's backend, grad
// rule) for AllReduce, AllGather, ReduceScatter, Broadcast, AlltoAll, NeighborExchange, Send and
// Recv. The functional wrappers are in collective_ops.cc.
//
// Attributes (MindSpore's names): "group" (a registered group name; the world by default), "op"
// ("sum" | "max" | "min" | "prod" | "mean"), "root_rank", "split_count", "split_dim",
// "concat_dim", "send_rank_ids", "recv_rank_ids", "recv_shapes" (flattened: for each shape its
// rank, then its dims), "recv_type", "dest_rank", "src_rank", "sr_tag", "shape", "dtype".
#include "cleave/runtime/collectives.h"

#include <fmt/ranges.h>

#include <cstring>
#include <mutex>

#include "cleave/comm/group_registry.h"
#include "cleave/core/error.h"
#include "cleave/ir/dispatch.h"
#include "cleave/ops/elementwise.h"
#include "runtime/collective_attrs.h"

namespace cleave::runtime {
namespace {

using ir::GradContext;
using ir::InferContext;
using ir::KernelContext;
using ir::OpDef;
using ir::TensorMeta;

// ---- infer ----

void expect_float_or_int(const InferContext& ctx, int input) {
  ir::expect_dtype(ctx, input, {DType::kFloat32, DType::kFloat64, DType::kInt32, DType::kInt64});
}

std::vector<TensorMeta> infer_all_reduce(const InferContext& ctx) {
  expect_float_or_int(ctx, 0);
  const comm::ReduceOp op = reduce_op_attr(ctx.attrs, ctx.op.name);
  if (op == comm::ReduceOp::kMean) ir::expect_floating(ctx, 0);
  group_attr(ctx.attrs, ctx.op.name);
  return {ctx.inputs[0]};
}

std::vector<TensorMeta> infer_all_gather(const InferContext& ctx) {
  expect_float_or_int(ctx, 0);
  ir::expect_min_rank(ctx, 0, 1);
  const GroupRef g = group_attr(ctx.attrs, ctx.op.name);
  std::vector<int64_t> dims = ctx.inputs[0].shape.dims();
  dims[0] *= g.size();
  return {{Shape(std::move(dims)), ctx.inputs[0].dtype}};
}

std::vector<TensorMeta> infer_reduce_scatter(const InferContext& ctx) {
  expect_float_or_int(ctx, 0);
  ir::expect_min_rank(ctx, 0, 1);
  const comm::ReduceOp op = reduce_op_attr(ctx.attrs, ctx.op.name);
  if (op == comm::ReduceOp::kMean) ir::expect_floating(ctx, 0);
  const GroupRef g = group_attr(ctx.attrs, ctx.op.name);
  const Shape& in = ctx.inputs[0].shape;
  CLEAVE_CHECK_ARG(in[0] % g.size() == 0,
                   "{}: input 0 has shape {}; dim 0 ({}) must be divisible by the size of group "
                   "'{}' ({})",
                   ctx.op.name, in.to_string(), in[0], g.name, g.size());
  std::vector<int64_t> dims = in.dims();
  dims[0] /= g.size();
  return {{Shape(std::move(dims)), ctx.inputs[0].dtype}};
}

std::vector<TensorMeta> infer_broadcast(const InferContext& ctx) {
  expect_float_or_int(ctx, 0);
  const GroupRef g = group_attr(ctx.attrs, ctx.op.name);
  const int64_t root = ctx.attrs.get<int64_t>("root_rank", ctx.op.name);
  CLEAVE_CHECK_ARG(root >= 0 && root < g.size(),
                   "{}: root_rank {} is out of range for group '{}' of {} ranks; expected 0..{}",
                   ctx.op.name, root, g.name, g.size(), g.size() - 1);
  return {ctx.inputs[0]};
}

int64_t axis_attr(const InferContext& ctx, const char* name) {
  const int64_t rank = ctx.inputs[0].shape.rank();
  const int64_t a = ctx.attrs.get<int64_t>(name, ctx.op.name);
  CLEAVE_CHECK_ARG(a >= -rank && a < rank,
                   "{}: {} {} is out of range for input 0 of shape {} (rank {}); expected "
                   "[{}, {}]",
                   ctx.op.name, name, a, ctx.inputs[0].shape.to_string(), rank, -rank, rank - 1);
  return a < 0 ? a + rank : a;
}

std::vector<TensorMeta> infer_all_to_all(const InferContext& ctx) {
  expect_float_or_int(ctx, 0);
  ir::expect_min_rank(ctx, 0, 1);
  const GroupRef g = group_attr(ctx.attrs, ctx.op.name);
  const int64_t count = ctx.attrs.get<int64_t>("split_count", ctx.op.name);
  CLEAVE_CHECK_ARG(count == g.size(),
                   "{}: split_count {} must equal the size of group '{}' ({}); every rank gets "
                   "one block",
                   ctx.op.name, count, g.name, g.size());
  const int64_t split = axis_attr(ctx, "split_dim");
  const int64_t concat = axis_attr(ctx, "concat_dim");
  const Shape& in = ctx.inputs[0].shape;
  CLEAVE_CHECK_ARG(in[split] % count == 0,
                   "{}: input 0 has shape {}; dim {} (split_dim) of size {} must be divisible by "
                   "split_count {}",
                   ctx.op.name, in.to_string(), split, in[split], count);
  std::vector<int64_t> dims = in.dims();
  dims[static_cast<size_t>(split)] /= count;
  dims[static_cast<size_t>(concat)] *= count;
  return {{Shape(std::move(dims)), ctx.inputs[0].dtype}};
}

std::vector<TensorMeta> infer_neighbor_exchange(const InferContext& ctx) {
  const GroupRef g = group_attr(ctx.attrs, ctx.op.name);
  const auto& send_ids = ctx.attrs.get<std::vector<int64_t>>("send_rank_ids", ctx.op.name);
  const auto& recv_ids = ctx.attrs.get<std::vector<int64_t>>("recv_rank_ids", ctx.op.name);
  const std::vector<Shape> shapes =
      decode_shapes(ctx.attrs.get<std::vector<int64_t>>("recv_shapes", ctx.op.name), ctx.op.name);
  const DType type = ctx.attrs.get<DType>("recv_type", ctx.op.name);
  CLEAVE_CHECK_ARG(send_ids.size() == ctx.inputs.size(),
                   "{}: {} inputs but {} send_rank_ids ({}); expected one rank per input",
                   ctx.op.name, ctx.inputs.size(), send_ids.size(), fmt::join(send_ids, ", "));
  CLEAVE_CHECK_ARG(recv_ids.size() == shapes.size(),
                   "{}: {} recv_rank_ids but {} recv_shapes; expected one shape per rank",
                   ctx.op.name, recv_ids.size(), shapes.size());
  for (int64_t r : send_ids) check_rank(g, r, "send_rank_ids", ctx.op.name);
  for (int64_t r : recv_ids) check_rank(g, r, "recv_rank_ids", ctx.op.name);
  std::vector<TensorMeta> out;
  for (const Shape& s : shapes) out.push_back({s, type});
  CLEAVE_CHECK_ARG(!out.empty(), "{}: recv_rank_ids is empty; expected at least one receive",
                   ctx.op.name);
  return out;
}

std::vector<TensorMeta> infer_send(const InferContext& ctx) {
  const GroupRef g = group_attr(ctx.attrs, ctx.op.name);
  check_rank(g, ctx.attrs.get<int64_t>("dest_rank", ctx.op.name), "dest_rank", ctx.op.name);
  ctx.attrs.get<int64_t>("sr_tag", ctx.op.name);
  return {{Shape({0}), ctx.inputs[0].dtype}};
}

std::vector<TensorMeta> infer_recv(const InferContext& ctx) {
  const GroupRef g = group_attr(ctx.attrs, ctx.op.name);
  check_rank(g, ctx.attrs.get<int64_t>("src_rank", ctx.op.name), "src_rank", ctx.op.name);
  ctx.attrs.get<int64_t>("sr_tag", ctx.op.name);
  const Shape shape(ctx.attrs.get<std::vector<int64_t>>("shape", ctx.op.name));
  for (int64_t d : shape.dims()) {
    CLEAVE_CHECK_ARG(d >= 0, "{}: shape {} has a negative dim", ctx.op.name, shape.to_string());
  }
  return {{shape, ctx.attrs.get<DType>("dtype", ctx.op.name)}};
}

// ---- kernels ----

void kernel_all_reduce(const KernelContext& ctx) {
  ctx.outputs[0].copy_from(ctx.inputs[0]);
  const GroupRef g = group_attr(ctx.attrs, ctx.op.name);
  cluster::ActivityScope activity(collective_activity(ctx.op.name, g));
  g.group->all_reduce(ctx.outputs[0], reduce_op_attr(ctx.attrs, ctx.op.name));
}

void kernel_all_gather(const KernelContext& ctx) {
  const GroupRef g = group_attr(ctx.attrs, ctx.op.name);
  cluster::ActivityScope activity(collective_activity(ctx.op.name, g));
  g.group->all_gather(ctx.outputs[0], ctx.inputs[0]);
}

void kernel_reduce_scatter(const KernelContext& ctx) {
  const GroupRef g = group_attr(ctx.attrs, ctx.op.name);
  cluster::ActivityScope activity(collective_activity(ctx.op.name, g));
  g.group->reduce_scatter(ctx.outputs[0], ctx.inputs[0], reduce_op_attr(ctx.attrs, ctx.op.name));
}

void kernel_broadcast(const KernelContext& ctx) {
  ctx.outputs[0].copy_from(ctx.inputs[0]);
  const GroupRef g = group_attr(ctx.attrs, ctx.op.name);
  const int64_t root = ctx.attrs.get<int64_t>("root_rank", ctx.op.name);
  cluster::ActivityScope activity(
      collective_activity(ctx.op.name, g, fmt::format("from root rank {}", root)));
  g.group->broadcast(ctx.outputs[0], static_cast<int>(root));
}

// Copies block `j` of `count` along `axis` of `src` into block `j` along `axis` of `dst` (the
// layouts may differ: one of them may be a packed buffer of blocks). Shapes are seen as
// (outer, dim, inner) around the axis.
struct AxisView {
  int64_t outer = 1, dim = 1, inner = 1;
  AxisView(const Shape& s, int64_t axis) {
    for (int64_t d = 0; d < axis; ++d) outer *= s[d];
    dim = s[axis];
    for (int64_t d = axis + 1; d < s.rank(); ++d) inner *= s[d];
  }
};

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

// ---- gradients ----

// NOTE [Gradients of collectives]
// Rank r's input x_r reaches every rank's output, so dL/dx_r sums the contributions of every
// rank's output gradient dy_s:
//   AllReduce(sum): y_s = sum_r x_r         => dx_r = sum_s dy_s              = AllReduce(sum)(dy)
//   AllReduce(mean): y_s = mean_r x_r       => dx_r = mean_s dy_s             = AllReduce(mean)(dy)
//   AllReduce(max/min): y = max_r x_r       => dx_r = [x_r == y] sum_s dy_s   (ties: each argmax)
//   AllReduce(prod): y = prod_r x_r         => dx_r = (y / x_r) sum_s dy_s
//   AllGather: y_s = concat_r x_r           => dx_r = sum_s dy_s[block r]     = ReduceScatter(sum)
//   ReduceScatter(sum): y_s = sum_r x_r[s]  => dx_r = concat_s dy_s           = AllGather(dy)
//   Broadcast(root): y_s = x_root           => dx_root = sum_s dy_s, others 0 = AllReduce + mask
//   AlltoAll: a permutation of blocks       => its inverse, AlltoAll with split/concat swapped
//   NeighborExchange, Send, Recv: the same messages sent back the other way.
// Every rank must run the backward of a collective (it is itself a collective).
Tensor grad_or_zeros(const GradContext& ctx, size_t i) {
  const Tensor& dy = ctx.output_grads[i];
  return dy.defined() ? dy : ops::zeros_like(ctx.outputs[i]);
}

std::string group_name(const ir::Attrs& attrs) {
  return attrs.get_or<std::string>("group", ops::kWorldCommGroup);
}

std::vector<Tensor> grad_all_reduce(const GradContext& ctx) {
  const comm::ReduceOp op = reduce_op_attr(ctx.attrs, ctx.op.name);
  const Tensor dy = grad_or_zeros(ctx, 0);
  const std::string group = group_name(ctx.attrs);
  if (op == comm::ReduceOp::kMean) {
    return {ops::all_reduce(dy, {.op = comm::ReduceOp::kMean, .group = group})};
  }
  const Tensor total = ops::all_reduce(dy, {.op = comm::ReduceOp::kSum, .group = group});
  const Tensor& x = ctx.inputs[0];
  const Tensor& y = ctx.outputs[0];
  switch (op) {
    case comm::ReduceOp::kMax:
    case comm::ReduceOp::kMin:
      return {ops::mul(total, ops::cast(ops::equal(x, y), x.dtype()))};
    case comm::ReduceOp::kProd:
      return {ops::mul(total, ops::div(y, x))};
    default:
      return {total};
  }
}

std::vector<Tensor> grad_all_gather(const GradContext& ctx) {
  return {ops::reduce_scatter(grad_or_zeros(ctx, 0),
                              {.op = comm::ReduceOp::kSum, .group = group_name(ctx.attrs)})};
}

std::vector<Tensor> grad_reduce_scatter(const GradContext& ctx) {
  const comm::ReduceOp op = reduce_op_attr(ctx.attrs, ctx.op.name);
  CLEAVE_CHECK_ARG(op == comm::ReduceOp::kSum || op == comm::ReduceOp::kMean,
                   "{}: no gradient for op \"{}\"; only \"sum\" and \"mean\" are differentiable",
                   ctx.op.name, comm::reduce_op_name(op));
  const GroupRef g = group_attr(ctx.attrs, ctx.op.name);
  Tensor dx = ops::all_gather(grad_or_zeros(ctx, 0), {.group = group_name(ctx.attrs)});
  if (op == comm::ReduceOp::kMean) dx = ops::mul(dx, 1.0 / g.size());
  return {dx};
}

std::vector<Tensor> grad_broadcast(const GradContext& ctx) {
  const GroupRef g = group_attr(ctx.attrs, ctx.op.name);
  const Tensor total = ops::all_reduce(
      grad_or_zeros(ctx, 0), {.op = comm::ReduceOp::kSum, .group = group_name(ctx.attrs)});
  const bool is_root = g.rank() == ctx.attrs.get<int64_t>("root_rank");
  return {is_root ? total : ops::mul(total, 0.0)};
}

std::vector<Tensor> grad_all_to_all(const GradContext& ctx) {
  return {
      ops::all_to_all(grad_or_zeros(ctx, 0), {.split_count = ctx.attrs.get<int64_t>("split_count"),
                                              .split_dim = ctx.attrs.get<int64_t>("concat_dim"),
                                              .concat_dim = ctx.attrs.get<int64_t>("split_dim"),
                                              .group = group_name(ctx.attrs)})};
}

std::vector<Tensor> grad_neighbor_exchange(const GradContext& ctx) {
  std::vector<Tensor> dys;
  for (size_t k = 0; k < ctx.outputs.size(); ++k) dys.push_back(grad_or_zeros(ctx, k));
  std::vector<Shape> shapes;
  for (const Tensor& x : ctx.inputs) shapes.push_back(x.shape());
  return ops::neighbor_exchange(
      dys, {.send_rank_ids = ctx.attrs.get<std::vector<int64_t>>("recv_rank_ids"),
            .recv_rank_ids = ctx.attrs.get<std::vector<int64_t>>("send_rank_ids"),
            .recv_shapes = shapes,
            .recv_type = ctx.inputs[0].dtype(),
            .group = group_name(ctx.attrs)});
}

std::vector<Tensor> grad_send(const GradContext& ctx) {
  const Tensor& x = ctx.inputs[0];
  return {ops::recv(x, {.src_rank = ctx.attrs.get<int64_t>("dest_rank"),
                        .sr_tag = ctx.attrs.get<int64_t>("sr_tag"),
                        .shape = x.shape(),
                        .dtype = x.dtype(),
                        .group = group_name(ctx.attrs)})};
}

std::vector<Tensor> grad_recv(const GradContext& ctx) {
  ops::send(grad_or_zeros(ctx, 0), {.dest_rank = ctx.attrs.get<int64_t>("src_rank"),
                                    .sr_tag = ctx.attrs.get<int64_t>("sr_tag"),
                                    .group = group_name(ctx.attrs)});
  // The token gets a zero gradient rather than none, so backward still reaches what produced it
  // (typically a Send, whose gradient is the matching Recv the peer's backward waits for).
  return {ops::zeros_like(ctx.inputs[0])};
}

}  // namespace

void register_collective_ops(ir::Registry& r) {
  register_neighbor_exchange_v2(r);
  auto add = [&r](OpDef def) {
    if (r.find(def.name) == nullptr) r.add(std::move(def));
  };
  add(OpDef{.name = "AllReduce",
            .num_inputs = 1,
            .infer = infer_all_reduce,
            .cpu_kernel = kernel_all_reduce,
            .grad = grad_all_reduce});
  add(OpDef{.name = "AllGather",
            .num_inputs = 1,
            .infer = infer_all_gather,
            .cpu_kernel = kernel_all_gather,
            .grad = grad_all_gather});
  add(OpDef{.name = "ReduceScatter",
            .num_inputs = 1,
            .infer = infer_reduce_scatter,
            .cpu_kernel = kernel_reduce_scatter,
            .grad = grad_reduce_scatter});
  add(OpDef{.name = "Broadcast",
            .num_inputs = 1,
            .infer = infer_broadcast,
            .cpu_kernel = kernel_broadcast,
            .grad = grad_broadcast});
  add(OpDef{.name = "AlltoAll",
            .num_inputs = 1,
            .infer = infer_all_to_all,
            .cpu_kernel = kernel_all_to_all,
            .grad = grad_all_to_all});
  add(OpDef{.name = "NeighborExchange",
            .num_inputs = OpDef::kVariadic,
            .infer = infer_neighbor_exchange,
            .cpu_kernel = kernel_neighbor_exchange,
            .grad = grad_neighbor_exchange});
  add(OpDef{.name = "Send",
            .num_inputs = 1,
            .infer = infer_send,
            .cpu_kernel = kernel_send,
            .grad = grad_send});
  add(OpDef{.name = "Recv",
            .num_inputs = 1,
            .infer = infer_recv,
            .cpu_kernel = kernel_recv,
            .grad = grad_recv});
}

void ensure_collective_ops_registered() {
  static std::once_flag once;
  std::call_once(once, [] { register_collective_ops(ir::Registry::global()); });
}

}  // namespace cleave::runtime

// The communication primitives (cleave/ir/comm_ops.h): inference and gradient rules from the
// attributes alone. Their kernels are bound by the runtime.
#include <fmt/ranges.h>

#include "cleave/core/error.h"
#include "cleave/ir/comm_ops.h"
#include "cleave/ops/elementwise.h"
#include "op_helpers.h"

namespace cleave::ir {

int64_t group_size_attr(const Attrs& attrs, const std::string& op) {
  if (attrs.has("rank_list")) {
    const auto& ranks = attrs.get<std::vector<int64_t>>("rank_list", op);
    CLEAVE_CHECK_ARG(!ranks.empty(),
                     "{}: rank_list is empty; expected the world ranks of the group", op);
    for (size_t i = 0; i < ranks.size(); ++i) {
      CLEAVE_CHECK_ARG(ranks[i] >= 0 && (i == 0 || ranks[i] > ranks[i - 1]),
                       "{}: rank_list ({}) must hold distinct world ranks >= 0 in ascending order",
                       op, fmt::join(ranks, ", "));
    }
    return static_cast<int64_t>(ranks.size());
  }
  CLEAVE_CHECK_ARG(attrs.has("group_size"),
                   "{}: attribute 'group_size' (or 'rank_list') is missing; the functional "
                   "wrappers (ops::all_reduce, ...) set it from the group named by 'group'",
                   op);
  const int64_t size = attrs.get<int64_t>("group_size", op);
  CLEAVE_CHECK_ARG(size >= 1, "{}: group_size is {}; expected a positive number of ranks", op,
                   size);
  return size;
}

Attrs group_attrs_of(const Attrs& attrs) {
  Attrs out;
  for (const char* name : {"group", "group_size", "rank_list"}) {
    for (const auto& [key, value] : attrs.items()) {
      if (key == name) out.set(key, value);
    }
  }
  return out;
}

std::vector<Shape> decode_shapes(const std::vector<int64_t>& flat, const std::string& op) {
  std::vector<Shape> shapes;
  size_t i = 0;
  while (i < flat.size()) {
    const int64_t rank = flat[i++];
    CLEAVE_CHECK_ARG(rank >= 0 && i + static_cast<size_t>(rank) <= flat.size(),
                     "{}: recv_shapes [{}] is malformed at entry {}; expected each shape as its "
                     "rank followed by its dims",
                     op, fmt::join(flat, ", "), i - 1);
    shapes.emplace_back(std::vector<int64_t>(flat.begin() + static_cast<ptrdiff_t>(i),
                                             flat.begin() + static_cast<ptrdiff_t>(i + rank)));
    i += static_cast<size_t>(rank);
  }
  return shapes;
}

std::vector<int64_t> encode_shapes(const std::vector<Shape>& shapes) {
  std::vector<int64_t> flat;
  for (const Shape& s : shapes) {
    flat.push_back(s.rank());
    for (int64_t d : s.dims()) flat.push_back(d);
  }
  return flat;
}

namespace {

// ---- attributes ----

void check_reduce_op(const InferContext& ctx) {
  const std::string op = ctx.attrs.get_or<std::string>("op", "sum");
  CLEAVE_CHECK_ARG(op == "sum" || op == "max" || op == "min" || op == "prod" || op == "mean",
                   "{}: op \"{}\" is not a reduction; expected \"sum\", \"max\", \"min\", \"prod\" "
                   "or \"mean\"",
                   ctx.op.name, op);
  if (op == "mean") expect_floating(ctx, 0);
}

void expect_float_or_int(const InferContext& ctx, int input) {
  expect_dtype(ctx, input, {DType::kFloat32, DType::kFloat64, DType::kInt32, DType::kInt64});
}

void check_group_rank(const InferContext& ctx, int64_t rank, const char* attr, int64_t size) {
  CLEAVE_CHECK_ARG(rank >= 0 && rank < size,
                   "{}: {} holds rank {}, out of range for group '{}' of {} ranks; expected 0..{}",
                   ctx.op.name, attr, rank, ctx.attrs.get_or<std::string>("group", kWorldCommGroup),
                   size, size - 1);
}

int64_t axis_attr(const InferContext& ctx, const char* name, int64_t fallback) {
  const int64_t rank = ctx.inputs[0].shape.rank();
  const int64_t a = ctx.attrs.has(name) ? ctx.attrs.get<int64_t>(name, ctx.op.name) : fallback;
  CLEAVE_CHECK_ARG(a >= -rank && a < rank,
                   "{}: {} {} is out of range for input 0 of shape {} (rank {}); expected "
                   "[{}, {}]",
                   ctx.op.name, name, a, ctx.inputs[0].shape.to_string(), rank, -rank, rank - 1);
  return a < 0 ? a + rank : a;
}

// ---- infer ----

std::vector<TensorMeta> infer_all_reduce(const InferContext& ctx) {
  expect_float_or_int(ctx, 0);
  check_reduce_op(ctx);
  group_size_attr(ctx.attrs, ctx.op.name);
  return {ctx.inputs[0]};
}

// FusedAllReduce: AllReduce's checks on every input, all of one dtype; output k is input k.
std::vector<TensorMeta> infer_fused_all_reduce(const InferContext& ctx) {
  for (size_t k = 0; k < ctx.inputs.size(); ++k) {
    expect_float_or_int(ctx, static_cast<int>(k));
    CLEAVE_CHECK_ARG(ctx.inputs[k].dtype == ctx.inputs[0].dtype,
                     "{}: input {} has dtype {} but input 0 has {}; the buffers of one "
                     "FusedAllReduce share a dtype",
                     ctx.op.name, k, dtype_name(ctx.inputs[k].dtype),
                     dtype_name(ctx.inputs[0].dtype));
  }
  check_reduce_op(ctx);
  group_size_attr(ctx.attrs, ctx.op.name);
  return {ctx.inputs.begin(), ctx.inputs.end()};
}

std::vector<TensorMeta> infer_all_gather(const InferContext& ctx) {
  expect_float_or_int(ctx, 0);
  expect_min_rank(ctx, 0, 1);
  const int64_t size = group_size_attr(ctx.attrs, ctx.op.name);
  const int64_t axis = axis_attr(ctx, "axis", 0);
  std::vector<int64_t> dims = ctx.inputs[0].shape.dims();
  dims[static_cast<size_t>(axis)] *= size;
  return {{Shape(std::move(dims)), ctx.inputs[0].dtype}};
}

std::vector<TensorMeta> infer_reduce_scatter(const InferContext& ctx) {
  expect_float_or_int(ctx, 0);
  expect_min_rank(ctx, 0, 1);
  check_reduce_op(ctx);
  const int64_t size = group_size_attr(ctx.attrs, ctx.op.name);
  const int64_t axis = axis_attr(ctx, "axis", 0);
  const Shape& in = ctx.inputs[0].shape;
  CLEAVE_CHECK_ARG(in[axis] % size == 0,
                   "{}: input 0 has shape {}; dim {} ({}) must be divisible by the size of group "
                   "'{}' ({})",
                   ctx.op.name, in.to_string(), axis, in[axis],
                   ctx.attrs.get_or<std::string>("group", kWorldCommGroup), size);
  std::vector<int64_t> dims = in.dims();
  dims[static_cast<size_t>(axis)] /= size;
  return {{Shape(std::move(dims)), ctx.inputs[0].dtype}};
}

std::vector<TensorMeta> infer_rooted(const InferContext& ctx) {
  expect_float_or_int(ctx, 0);
  if (ctx.attrs.has("op")) check_reduce_op(ctx);
  const int64_t size = group_size_attr(ctx.attrs, ctx.op.name);
  const int64_t root = ctx.attrs.get<int64_t>("root_rank", ctx.op.name);
  CLEAVE_CHECK_ARG(root >= 0 && root < size,
                   "{}: root_rank {} is out of range for group '{}' of {} ranks; expected 0..{}",
                   ctx.op.name, root, ctx.attrs.get_or<std::string>("group", kWorldCommGroup), size,
                   size - 1);
  return {ctx.inputs[0]};
}

std::vector<TensorMeta> infer_all_to_all(const InferContext& ctx) {
  expect_float_or_int(ctx, 0);
  expect_min_rank(ctx, 0, 1);
  const int64_t size = group_size_attr(ctx.attrs, ctx.op.name);
  const int64_t count = ctx.attrs.get<int64_t>("split_count", ctx.op.name);
  CLEAVE_CHECK_ARG(count == size,
                   "{}: split_count {} must equal the size of group '{}' ({}); every rank gets "
                   "one block",
                   ctx.op.name, count, ctx.attrs.get_or<std::string>("group", kWorldCommGroup),
                   size);
  const int64_t split = axis_attr(ctx, "split_dim", 0);
  const int64_t concat = axis_attr(ctx, "concat_dim", 0);
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
  const int64_t size = group_size_attr(ctx.attrs, ctx.op.name);
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
  for (int64_t r : send_ids) check_group_rank(ctx, r, "send_rank_ids", size);
  for (int64_t r : recv_ids) check_group_rank(ctx, r, "recv_rank_ids", size);
  std::vector<TensorMeta> out;
  for (const Shape& s : shapes) out.push_back({s, type});
  CLEAVE_CHECK_ARG(!out.empty(), "{}: recv_rank_ids is empty; expected at least one receive",
                   ctx.op.name);
  return out;
}

std::vector<TensorMeta> infer_neighbor_exchange_v2(const InferContext& ctx) {
  expect_rank(ctx, 0, 4);
  expect_float_or_int(ctx, 0);
  const std::string format = ctx.attrs.get_or<std::string>("data_format", "NCHW");
  CLEAVE_CHECK_ARG(format == "NCHW", "{}: data_format \"{}\" is not supported; expected \"NCHW\"",
                   ctx.op.name, format);
  const HaloSpec h = halo_spec(ctx.attrs, ctx.op.name);
  const Shape& x = ctx.inputs[0].shape;
  CLEAVE_CHECK_ARG(h.st + h.sb <= x[2] && h.sl + h.sr <= x[3],
                   "{}: send_lens [{}, {}, {}, {}] do not fit input 0 of shape {}; top + bottom "
                   "must be <= H ({}) and left + right <= W ({})",
                   ctx.op.name, h.st, h.sb, h.sl, h.sr, x.to_string(), x[2], x[3]);
  return {{Shape({x[0], x[1], x[2] + h.rt + h.rb, x[3] + h.rl + h.rr}), ctx.inputs[0].dtype}};
}

std::vector<TensorMeta> infer_neighbor_exchange_v2_grad(const InferContext& ctx) {
  expect_rank(ctx, 0, 4);
  const HaloSpec h = halo_spec(ctx.attrs, ctx.op.name);
  const Shape& dy = ctx.inputs[0].shape;
  CLEAVE_CHECK_ARG(dy[2] >= h.rt + h.rb && dy[3] >= h.rl + h.rr,
                   "{}: input 0 of shape {} is smaller than the received halos", ctx.op.name,
                   dy.to_string());
  return {{Shape({dy[0], dy[1], dy[2] - h.rt - h.rb, dy[3] - h.rl - h.rr}), ctx.inputs[0].dtype}};
}

std::vector<TensorMeta> infer_send(const InferContext& ctx) {
  const int64_t size = group_size_attr(ctx.attrs, ctx.op.name);
  check_group_rank(ctx, ctx.attrs.get<int64_t>("dest_rank", ctx.op.name), "dest_rank", size);
  ctx.attrs.get<int64_t>("sr_tag", ctx.op.name);
  return {{Shape({0}), ctx.inputs[0].dtype}};
}

Shape shape_attr(const InferContext& ctx) {
  const Shape shape(ctx.attrs.get<std::vector<int64_t>>("shape", ctx.op.name));
  for (int64_t d : shape.dims()) {
    CLEAVE_CHECK_ARG(d >= 0, "{}: shape {} has a negative dim", ctx.op.name, shape.to_string());
  }
  return shape;
}

std::vector<TensorMeta> infer_recv(const InferContext& ctx) {
  const int64_t size = group_size_attr(ctx.attrs, ctx.op.name);
  check_group_rank(ctx, ctx.attrs.get<int64_t>("src_rank", ctx.op.name), "src_rank", size);
  ctx.attrs.get<int64_t>("sr_tag", ctx.op.name);
  return {{shape_attr(ctx), ctx.attrs.get<DType>("dtype", ctx.op.name)}};
}

void check_rpc_peer(const InferContext& ctx, const char* attr) {
  const int64_t peer = ctx.attrs.get<int64_t>(attr, ctx.op.name);
  const int64_t tag = ctx.attrs.get<int64_t>("tag", ctx.op.name);
  CLEAVE_CHECK_ARG(peer >= 0, "{}: {} is {}; expected a rank >= 0", ctx.op.name, attr, peer);
  CLEAVE_CHECK_ARG(tag >= 0 && tag < (1 << 15), "{}: tag is {}; expected 0 <= tag < 32768",
                   ctx.op.name, tag);
}

std::vector<TensorMeta> infer_rpc_send(const InferContext& ctx) {
  check_rpc_peer(ctx, "dst_rank");
  return {};
}

std::vector<TensorMeta> infer_rpc_recv(const InferContext& ctx) {
  check_rpc_peer(ctx, "src_rank");
  return {{shape_attr(ctx), ctx.attrs.get<DType>("dtype", ctx.op.name)}};
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
//   Broadcast(root): y_s = x_root           => dx_root = sum_s dy_s, others 0 = Reduce(sum, root)
//   Reduce(sum, root): y_root = sum_r x_r   => dx_r = dy_root                 = Broadcast(root)
//   AlltoAll: a permutation of blocks       => its inverse, AlltoAll with split/concat swapped
//   NeighborExchange, Send, Recv: the same messages sent back the other way.
// Every rank must run the backward of a collective (it is itself a collective), and the
// backward collective keeps the forward's group attributes (NOTE [Group attributes]).
Tensor grad_or_zeros(const GradContext& ctx, size_t i) {
  const Tensor& dy = ctx.output_grads[i];
  return dy.defined() ? dy : ops::zeros_like(ctx.outputs[i]);
}

Tensor call_on_group(const char* op, const Tensor& x, const GradContext& ctx, Attrs attrs) {
  const Attrs group = group_attrs_of(ctx.attrs);
  for (const auto& [key, value] : group.items()) attrs.set(key, value);
  return call1(op_def(op), {x}, attrs);
}

std::vector<Tensor> grad_all_reduce(const GradContext& ctx) {
  const std::string op = ctx.attrs.get_or<std::string>("op", "sum");
  const Tensor dy = grad_or_zeros(ctx, 0);
  if (op == "mean") return {call_on_group("AllReduce", dy, ctx, {{"op", std::string("mean")}})};
  const Tensor total = call_on_group("AllReduce", dy, ctx, {{"op", std::string("sum")}});
  const Tensor& x = ctx.inputs[0];
  const Tensor& y = ctx.outputs[0];
  if (op == "max" || op == "min") return {ops::mul(total, ops::cast(ops::equal(x, y), x.dtype()))};
  if (op == "prod") return {ops::mul(total, ops::div(y, x))};
  return {total};
}

std::vector<Tensor> grad_all_gather(const GradContext& ctx) {
  return {
      call_on_group("ReduceScatter", grad_or_zeros(ctx, 0), ctx,
                    {{"op", std::string("sum")}, {"axis", ctx.attrs.get_or<int64_t>("axis", 0)}})};
}

std::vector<Tensor> grad_reduce_scatter(const GradContext& ctx) {
  const std::string op = ctx.attrs.get_or<std::string>("op", "sum");
  CLEAVE_CHECK_ARG(op == "sum" || op == "mean",
                   "{}: no gradient for op \"{}\"; only \"sum\" and \"mean\" are differentiable",
                   ctx.op.name, op);
  Tensor dx = call_on_group("AllGather", grad_or_zeros(ctx, 0), ctx,
                            {{"axis", ctx.attrs.get_or<int64_t>("axis", 0)}});
  if (op == "mean") {
    dx = ops::mul(dx, 1.0 / static_cast<double>(group_size_attr(ctx.attrs, ctx.op.name)));
  }
  return {dx};
}

std::vector<Tensor> grad_broadcast(const GradContext& ctx) {
  return {call_on_group("Reduce", grad_or_zeros(ctx, 0), ctx,
                        {{"op", std::string("sum")},
                         {"root_rank", ctx.attrs.get<int64_t>("root_rank", ctx.op.name)}})};
}

std::vector<Tensor> grad_reduce(const GradContext& ctx) {
  const std::string op = ctx.attrs.get_or<std::string>("op", "sum");
  CLEAVE_CHECK_ARG(op == "sum", "{}: no gradient for op \"{}\"; only \"sum\" is differentiable",
                   ctx.op.name, op);
  return {call_on_group("Broadcast", grad_or_zeros(ctx, 0), ctx,
                        {{"root_rank", ctx.attrs.get<int64_t>("root_rank", ctx.op.name)}})};
}

std::vector<Tensor> grad_all_to_all(const GradContext& ctx) {
  return {call_on_group("AlltoAll", grad_or_zeros(ctx, 0), ctx,
                        {{"split_count", ctx.attrs.get<int64_t>("split_count")},
                         {"split_dim", ctx.attrs.get<int64_t>("concat_dim")},
                         {"concat_dim", ctx.attrs.get<int64_t>("split_dim")}})};
}

std::vector<Tensor> grad_neighbor_exchange(const GradContext& ctx) {
  std::vector<Tensor> dys;
  for (size_t k = 0; k < ctx.outputs.size(); ++k) dys.push_back(grad_or_zeros(ctx, k));
  std::vector<Shape> shapes;
  for (const Tensor& x : ctx.inputs) shapes.push_back(x.shape());
  Attrs attrs = group_attrs_of(ctx.attrs);
  attrs.set("send_rank_ids", ctx.attrs.get<std::vector<int64_t>>("recv_rank_ids"));
  attrs.set("recv_rank_ids", ctx.attrs.get<std::vector<int64_t>>("send_rank_ids"));
  attrs.set("recv_shapes", encode_shapes(shapes));
  attrs.set("recv_type", ctx.inputs[0].dtype());
  return call(op_def("NeighborExchange"), dys, attrs);
}

std::vector<Tensor> grad_neighbor_exchange_v2(const GradContext& ctx) {
  return {call1(op_def("NeighborExchangeV2Grad"), {grad_or_zeros(ctx, 0)}, ctx.attrs)};
}

std::vector<Tensor> grad_send(const GradContext& ctx) {
  const Tensor& x = ctx.inputs[0];
  Attrs attrs = group_attrs_of(ctx.attrs);
  attrs.set("src_rank", ctx.attrs.get<int64_t>("dest_rank"));
  attrs.set("sr_tag", ctx.attrs.get<int64_t>("sr_tag"));
  attrs.set("shape", x.shape().dims());
  attrs.set("dtype", x.dtype());
  return {call1(op_def("Recv"), {x}, attrs)};
}

std::vector<Tensor> grad_recv(const GradContext& ctx) {
  Attrs attrs = group_attrs_of(ctx.attrs);
  attrs.set("dest_rank", ctx.attrs.get<int64_t>("src_rank"));
  attrs.set("sr_tag", ctx.attrs.get<int64_t>("sr_tag"));
  call1(op_def("Send"), {grad_or_zeros(ctx, 0)}, attrs);
  // The token gets a zero gradient rather than none, so backward still reaches what produced it
  // (typically a Send, whose gradient is the matching Recv the peer's backward waits for).
  return {ops::zeros_like(ctx.inputs[0])};
}

}  // namespace

HaloSpec halo_spec(const Attrs& attrs, const std::string& op) {
  const int64_t size = group_size_attr(attrs, op);
  HaloSpec h;
  const auto& send_ids = attrs.get<std::vector<int64_t>>("send_rank_ids", op);
  const auto& recv_ids = attrs.get<std::vector<int64_t>>("recv_rank_ids", op);
  const auto& send_lens = attrs.get<std::vector<int64_t>>("send_lens", op);
  const auto& recv_lens = attrs.get<std::vector<int64_t>>("recv_lens", op);
  CLEAVE_CHECK_ARG(send_ids.size() == 8 && recv_ids.size() == 8,
                   "{}: send_rank_ids has {} entries and recv_rank_ids {}; expected 8 each (top, "
                   "top_right, right, bottom_right, bottom, bottom_left, left, top_left; -1 for "
                   "none)",
                   op, send_ids.size(), recv_ids.size());
  CLEAVE_CHECK_ARG(send_lens.size() == 4 && recv_lens.size() == 4,
                   "{}: send_lens has {} entries and recv_lens {}; expected 4 each ([top, bottom, "
                   "left, right])",
                   op, send_lens.size(), recv_lens.size());
  const std::string group = attrs.get_or<std::string>("group", kWorldCommGroup);
  for (size_t d = 0; d < 8; ++d) {
    for (const auto* ids : {&send_ids, &recv_ids}) {
      const int64_t r = (*ids)[d];
      CLEAVE_CHECK_ARG(r == -1 || (r >= 0 && r < size),
                       "{}: {} [{}] holds rank {} at direction {}; expected -1 or a rank of group "
                       "'{}' (0..{})",
                       op, ids == &send_ids ? "send_rank_ids" : "recv_rank_ids",
                       fmt::join(*ids, ", "), r, d, group, size - 1);
    }
    h.send_ids[d] = send_ids[d];
    h.recv_ids[d] = recv_ids[d];
  }
  for (const auto* lens : {&send_lens, &recv_lens}) {
    for (int64_t v : *lens) {
      CLEAVE_CHECK_ARG(v >= 0, "{}: {} [{}] has a negative length", op,
                       lens == &send_lens ? "send_lens" : "recv_lens", fmt::join(*lens, ", "));
    }
  }
  h.st = send_lens[0], h.sb = send_lens[1], h.sl = send_lens[2], h.sr = send_lens[3];
  h.rt = recv_lens[0], h.rb = recv_lens[1], h.rl = recv_lens[2], h.rr = recv_lens[3];
  return h;
}

void register_comm_ops(Registry& r) {
  auto add = [&r](OpDef def) {
    def.communicates = true;
    // The runtime attaches the kernels (src/runtime/collectives.cc); a program that does not
    // link it keeps this reason, which dispatch reports.
    def.no_cpu_kernel =
        "none in the ir layer: the runtime layer attaches the communication kernels while the "
        "program starts, and its registrations are not in this program (link cleave::cleave, or "
        "with the flags of pkg-config --libs cleave, which keep them)";
    r.add(std::move(def));
  };
  add({.name = "AllReduce", .infer = infer_all_reduce, .grad = grad_all_reduce});
  // NOTE [Gradient buckets] in cleave/parallel/data_parallel.h: one AllReduce of several
  // buffers, made after autodiff.
  add({.name = "FusedAllReduce",
       .num_inputs = OpDef::kVariadic,
       .infer = infer_fused_all_reduce,
       .no_grad = "none, because DATA_PARALLEL's gradient buckets make it after autodiff (an "
                  "AllReduce per buffer has one)"});
  add({.name = "AllGather", .infer = infer_all_gather, .grad = grad_all_gather});
  add({.name = "ReduceScatter", .infer = infer_reduce_scatter, .grad = grad_reduce_scatter});
  add({.name = "Broadcast", .infer = infer_rooted, .grad = grad_broadcast});
  add({.name = "Reduce", .infer = infer_rooted, .grad = grad_reduce});
  add({.name = "AlltoAll", .infer = infer_all_to_all, .grad = grad_all_to_all});
  add({.name = "NeighborExchange",
       .num_inputs = OpDef::kVariadic,
       .infer = infer_neighbor_exchange,
       .grad = grad_neighbor_exchange});
  add({.name = "NeighborExchangeV2",
       .infer = infer_neighbor_exchange_v2,
       .grad = grad_neighbor_exchange_v2});
  add({.name = "NeighborExchangeV2Grad",
       .infer = infer_neighbor_exchange_v2_grad,
       .no_grad = kNoGradBackward});
  add({.name = "Send", .infer = infer_send, .grad = grad_send});
  add({.name = "Recv", .infer = infer_recv, .grad = grad_recv});
  // A placed graph's cut edges are inserted after autodiff, on the differentiated step.
  const char* cut_edge =
      "none, because a cut edge is inserted by the partition after autodiff (the backward "
      "pass's own edges are cut edges too)";
  add({.name = "RpcSend", .infer = infer_rpc_send, .no_grad = cut_edge});
  add({.name = "RpcRecv", .num_inputs = 0, .infer = infer_rpc_recv, .no_grad = cut_edge});
}

}  // namespace cleave::ir

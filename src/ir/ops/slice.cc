// Primitives that cut tensors into pieces or join them: Concat, Split, Slice, StridedSlice, and
// the backward-only SliceGrad and StridedSliceGrad that scatter a gradient into zeros.
//
// Every one of them is a copy of a (strided) box between a dense tensor and a region of another
// (kernels::cpu::Box); NOTE [Coalesced copies] in kernels/cpu/copy.h says how such copies run.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <cstring>

#include "cleave/ops/shape.h"
#include "kernels/cpu/copy.h"
#include "op_helpers.h"
#include "shape_helpers.h"

namespace cleave::ir {
namespace {

using kernels::cpu::Box;

// Input 0's meta as a one-element span, for re-running an infer step inside a kernel or rule.
std::vector<TensorMeta> meta_of(const Tensor& t) { return {{t.shape(), t.dtype()}}; }

// ---- Concat ----

std::vector<TensorMeta> infer_concat(const InferContext& ctx) {
  expect_min_rank(ctx, 0, 1);
  const Shape& first = ctx.inputs[0].shape;
  const int64_t axis = checked_axis(ctx, ctx.attrs.get<int64_t>("axis", ctx.op.name), first.rank());
  std::vector<int64_t> out = first.dims();
  for (size_t i = 1; i < ctx.inputs.size(); ++i) {
    const Shape& s = ctx.inputs[i].shape;
    expect_same_dtype(ctx, 0, static_cast<int>(i));
    CLEAVE_CHECK_ARG(s.rank() == first.rank(),
                     "{}: input {} has shape {} (rank {}) but input 0 has shape {} (rank {}); all "
                     "inputs must have the same rank",
                     ctx.op.name, i, s.to_string(), s.rank(), first.to_string(), first.rank());
    for (int64_t d = 0; d < s.rank(); ++d) {
      if (d == axis) continue;
      CLEAVE_CHECK_ARG(s[d] == first[d],
                       "{}: input {} has shape {}; expected dim {} to be {} (as in input 0, shape "
                       "{}): only the concat axis {} may differ",
                       ctx.op.name, i, s.to_string(), d, first[d], first.to_string(), axis);
    }
    out[axis] += s[axis];
  }
  return {{Shape(out), ctx.inputs[0].dtype}};
}

int64_t concat_axis(const Attrs& attrs, int64_t rank) {
  const int64_t axis = attrs.get<int64_t>("axis");
  return axis < 0 ? axis + rank : axis;
}

void concat_kernel(const KernelContext& ctx) {
  const Tensor& out = ctx.outputs[0];
  const int64_t axis = concat_axis(ctx.attrs, out.rank());
  Box box{std::vector<int64_t>(out.rank(), 0), std::vector<int64_t>(out.rank(), 1), {}};
  for (const Tensor& x : ctx.inputs) {
    box.dims = x.shape().dims();
    kernels::cpu::scatter_box(x.raw_data(), box, out.raw_data(), out.shape(),
                              dtype_size(x.dtype()));
    box.begin[axis] += x.shape()[axis];
  }
}

// Each input's gradient is its piece of dy: one Split when the pieces are equal, else a Slice
// per input that needs one.
std::vector<Tensor> concat_grad(const GradContext& ctx) {
  const Tensor& dy = ctx.output_grads[0];
  const int64_t axis = concat_axis(ctx.attrs, dy.rank());
  const size_t n = ctx.inputs.size();
  bool equal = n > 1;
  for (size_t i = 0; i < n; ++i) {
    equal = equal && ctx.inputs[i].shape()[axis] == ctx.inputs[0].shape()[axis] &&
            ctx.needs_input_grad[i];
  }
  if (n == 1) return {dy};
  if (equal) return ops::split(dy, axis, static_cast<int64_t>(n));
  bool all = true;
  std::vector<int64_t> sizes;
  for (size_t i = 0; i < n; ++i) {
    all = all && ctx.needs_input_grad[i];
    sizes.push_back(ctx.inputs[i].shape()[axis]);
  }
  if (all) return ops::split(dy, axis, sizes);  // one pass over dy
  std::vector<Tensor> grads(n);
  std::vector<int64_t> begin(dy.rank(), 0);
  for (size_t i = 0; i < n; ++i) {
    const Shape& s = ctx.inputs[i].shape();
    if (ctx.needs_input_grad[i]) grads[i] = ops::slice(dy, begin, s.dims());
    begin[axis] += s[axis];
  }
  return grads;
}

// ---- Split ----

// The normalised axis and each output's size along it, checked against input 0: output_num equal
// parts, or the sizes `size_splits` gives (MindSpore's SplitV), output_num of them.
std::pair<int64_t, std::vector<int64_t>> checked_split(const InferContext& ctx) {
  expect_min_rank(ctx, 0, 1);
  const Shape& in = ctx.inputs[0].shape;
  const int64_t axis = checked_axis(ctx, ctx.attrs.get<int64_t>("axis", ctx.op.name), in.rank());
  const int64_t n = ctx.attrs.get<int64_t>("output_num", ctx.op.name);
  CLEAVE_CHECK_ARG(n >= 1, "{}: output_num is {}; expected output_num >= 1", ctx.op.name, n);
  if (ctx.attrs.has("size_splits")) {
    const auto& sizes = ctx.attrs.get<std::vector<int64_t>>("size_splits", ctx.op.name);
    int64_t sum = 0;
    bool non_negative = true;
    for (int64_t size : sizes) {
      non_negative = non_negative && size >= 0;
      sum += size;
    }
    CLEAVE_CHECK_ARG(static_cast<int64_t>(sizes.size()) == n && non_negative && sum == in[axis],
                     "{}: size_splits {} for input 0 of shape {} along axis {}; expected "
                     "output_num ({}) sizes >= 0 adding up to {}",
                     ctx.op.name, fmt::format("({})", fmt::join(sizes, ", ")), in.to_string(), axis,
                     n, in[axis]);
    return {axis, sizes};
  }
  CLEAVE_CHECK_ARG(in[axis] % n == 0,
                   "{}: input 0 of shape {} has size {} along axis {}, which output_num {} does "
                   "not divide; expected a size divisible by {}",
                   ctx.op.name, in.to_string(), in[axis], axis, n, n);
  return {axis, std::vector<int64_t>(static_cast<size_t>(n), in[axis] / n)};
}

std::vector<TensorMeta> infer_split(const InferContext& ctx) {
  const auto [axis, sizes] = checked_split(ctx);
  std::vector<TensorMeta> out;
  for (int64_t size : sizes) {
    Shape piece = ctx.inputs[0].shape;
    piece[axis] = size;
    out.push_back({piece, ctx.inputs[0].dtype});
  }
  return out;
}

void split_kernel(const KernelContext& ctx) {
  const Tensor& x = ctx.inputs[0];
  const int64_t axis = checked_split(InferContext{ctx.op, ctx.attrs, meta_of(x)}).first;
  Box box{std::vector<int64_t>(x.rank(), 0), std::vector<int64_t>(x.rank(), 1), {}};
  for (const Tensor& out : ctx.outputs) {
    box.dims = out.shape().dims();
    kernels::cpu::gather_box(x.raw_data(), x.shape(), box, out.raw_data(), dtype_size(x.dtype()));
    box.begin[axis] += out.shape()[axis];
  }
}

// dx is the output gradients joined again; an output that got no gradient contributes zeros.
std::vector<Tensor> split_grad(const GradContext& ctx) {
  const Tensor& x = ctx.inputs[0];
  const int64_t axis = checked_split(InferContext{ctx.op, ctx.attrs, meta_of(x)}).first;
  std::vector<Tensor> pieces;
  bool any = false;
  for (size_t i = 0; i < ctx.output_grads.size(); ++i) {
    const Tensor& g = ctx.output_grads[i];
    any = any || g.defined();
    pieces.push_back(g.defined() ? g : zeros_for_grad(ctx.outputs[i].shape(), x.dtype()));
  }
  if (!any) return {Tensor()};
  return {pieces.size() == 1 ? pieces[0] : ops::concat(pieces, axis)};
}

// ---- Slice ----

Box checked_slice(const InferContext& ctx) {
  const Shape& in = ctx.inputs[0].shape;
  const auto& begin = ctx.attrs.get<std::vector<int64_t>>("begin", ctx.op.name);
  const auto& size = ctx.attrs.get<std::vector<int64_t>>("size", ctx.op.name);
  CLEAVE_CHECK_ARG(static_cast<int64_t>(begin.size()) == in.rank() &&
                       static_cast<int64_t>(size.size()) == in.rank(),
                   "{}: begin {} and size {} must have one entry per dim of input 0 (shape {}, "
                   "rank {})",
                   ctx.op.name, dims_string(begin), dims_string(size), in.to_string(), in.rank());
  Box box{begin, std::vector<int64_t>(in.rank(), 1), size};
  for (int64_t d = 0; d < in.rank(); ++d) {
    CLEAVE_CHECK_ARG(begin[d] >= 0 && begin[d] <= in[d],
                     "{}: begin[{}] = {} is out of bounds for dim {} of input 0 (shape {}); "
                     "expected begin in [0, {}]",
                     ctx.op.name, d, begin[d], d, in.to_string(), in[d]);
    if (size[d] == -1) box.dims[d] = in[d] - begin[d];
    CLEAVE_CHECK_ARG(box.dims[d] >= 0 && begin[d] + box.dims[d] <= in[d],
                     "{}: size[{}] = {} with begin[{}] = {} is out of bounds for dim {} of input "
                     "0 (shape {}); expected size in [0, {}] or -1 (to the end)",
                     ctx.op.name, d, size[d], d, begin[d], d, in.to_string(), in[d] - begin[d]);
  }
  return box;
}

std::vector<TensorMeta> infer_slice(const InferContext& ctx) {
  return {{Shape(checked_slice(ctx).dims), ctx.inputs[0].dtype}};
}

void slice_kernel(const KernelContext& ctx) {
  const Tensor& x = ctx.inputs[0];
  const Box box = checked_slice(InferContext{ctx.op, ctx.attrs, meta_of(x)});
  kernels::cpu::gather_box(x.raw_data(), x.shape(), box, ctx.outputs[0].raw_data(),
                           dtype_size(x.dtype()));
}

// SliceGrad(dy; begin, shape): zeros of `shape` with dy written at `begin`.
Box checked_slice_grad(const InferContext& ctx) {
  const Shape& dy = ctx.inputs[0].shape;
  const Shape full(ctx.attrs.get<std::vector<int64_t>>("shape", ctx.op.name));
  const auto& begin = ctx.attrs.get<std::vector<int64_t>>("begin", ctx.op.name);
  CLEAVE_CHECK_ARG(dy.rank() == full.rank() && static_cast<int64_t>(begin.size()) == full.rank(),
                   "{}: input 0 has shape {} and begin is {}; expected rank {} (of shape {})",
                   ctx.op.name, dy.to_string(), dims_string(begin), full.rank(), full.to_string());
  for (int64_t d = 0; d < full.rank(); ++d) {
    CLEAVE_CHECK_ARG(begin[d] >= 0 && begin[d] + dy[d] <= full[d],
                     "{}: input 0 of shape {} placed at begin {} does not fit in shape {}",
                     ctx.op.name, dy.to_string(), dims_string(begin), full.to_string());
  }
  return Box{begin, std::vector<int64_t>(full.rank(), 1), dy.dims()};
}

// ---- StridedSlice ----

// NOTE [StridedSlice semantics]
// Per dim d < begin.size(), with n the dim's size and s = strides[d] != 0, as Python's
// x[begin:end:s]: a negative begin or end counts from the end (+n), and both are then clamped to
// the valid range for the direction of s ([0, n] for s > 0; [-1, n-1] for s < 0, where -1 means
// "before element 0"). begin_mask bit d ignores begin[d] (start from the first element in the
// direction of s), end_mask bit d ignores end[d] (run to the last). shrink_axis_mask bit d takes
// the single element begin[d] (which must exist, as x[i] in Python) and drops the axis. Dims past
// begin.size() are taken whole.
struct StridedPlan {
  Box box;    // over every input dim; shrunk dims have size 1
  Shape out;  // box.dims without the shrunk dims
};

StridedPlan checked_strided_slice(const std::string& op, const Shape& in, const Attrs& attrs) {
  const auto& begin = attrs.get<std::vector<int64_t>>("begin", op);
  const auto& end = attrs.get<std::vector<int64_t>>("end", op);
  const auto& strides = attrs.get<std::vector<int64_t>>("strides", op);
  const int64_t begin_mask = attrs.get_or<int64_t>("begin_mask", 0);
  const int64_t end_mask = attrs.get_or<int64_t>("end_mask", 0);
  const int64_t shrink_mask = attrs.get_or<int64_t>("shrink_axis_mask", 0);
  CLEAVE_CHECK_ARG(begin.size() == end.size() && begin.size() == strides.size(),
                   "{}: begin {}, end {} and strides {} have {}, {} and {} entries; expected the "
                   "same number",
                   op, dims_string(begin), dims_string(end), dims_string(strides), begin.size(),
                   end.size(), strides.size());
  const int64_t given = static_cast<int64_t>(begin.size());
  CLEAVE_CHECK_ARG(given <= in.rank(),
                   "{}: begin, end and strides have {} entries but input 0 has shape {} (rank "
                   "{}); expected at most {}",
                   op, given, in.to_string(), in.rank(), in.rank());
  StridedPlan plan;
  std::vector<int64_t> out;
  for (int64_t d = 0; d < in.rank(); ++d) {
    const int64_t n = in[d];
    if (d >= given) {
      plan.box.begin.push_back(0);
      plan.box.strides.push_back(1);
      plan.box.dims.push_back(n);
      out.push_back(n);
      continue;
    }
    const int64_t s = strides[d];
    CLEAVE_CHECK_ARG(s != 0, "{}: strides {} has 0 at position {}; expected non-zero strides", op,
                     dims_string(strides), d);
    if ((shrink_mask >> d) & 1) {
      const int64_t i = begin[d] < 0 ? begin[d] + n : begin[d];
      CLEAVE_CHECK_ARG(i >= 0 && i < n,
                       "{}: shrink_axis_mask takes element begin[{}] = {} of dim {}, which is out "
                       "of bounds for input 0 of shape {}; expected an index in [{}, {}]",
                       op, d, begin[d], d, in.to_string(), -n, n - 1);
      plan.box.begin.push_back(i);
      plan.box.strides.push_back(1);
      plan.box.dims.push_back(1);
      continue;
    }
    auto resolve = [&](int64_t v, int64_t lo, int64_t hi) {
      if (v < 0) v += n;
      return std::clamp(v, lo, hi);
    };
    int64_t start, stop, len;
    if (s > 0) {
      start = (begin_mask >> d) & 1 ? 0 : resolve(begin[d], 0, n);
      stop = (end_mask >> d) & 1 ? n : resolve(end[d], 0, n);
      len = stop > start ? (stop - start + s - 1) / s : 0;
    } else {
      start = (begin_mask >> d) & 1 ? n - 1 : resolve(begin[d], -1, n - 1);
      stop = (end_mask >> d) & 1 ? -1 : resolve(end[d], -1, n - 1);
      len = start > stop ? (start - stop - s - 1) / -s : 0;
    }
    plan.box.begin.push_back(start);
    plan.box.strides.push_back(s);
    plan.box.dims.push_back(len);
    out.push_back(len);
  }
  plan.out = Shape(out);
  return plan;
}

void strided_slice_kernel(const KernelContext& ctx) {
  const Tensor& x = ctx.inputs[0];
  const StridedPlan plan = checked_strided_slice(ctx.op.name, x.shape(), ctx.attrs);
  kernels::cpu::gather_box(x.raw_data(), x.shape(), plan.box, ctx.outputs[0].raw_data(),
                           dtype_size(x.dtype()));
}

// StridedSliceGrad(dy; StridedSlice's attributes, shape): zeros of `shape` with dy scattered to
// the elements the forward StridedSlice read.
StridedPlan checked_strided_slice_grad(const InferContext& ctx) {
  const Shape full(ctx.attrs.get<std::vector<int64_t>>("shape", ctx.op.name));
  StridedPlan plan = checked_strided_slice(ctx.op.name, full, ctx.attrs);
  const Shape& dy = ctx.inputs[0].shape;
  CLEAVE_CHECK_ARG(dy == plan.out,
                   "{}: input 0 has shape {}; expected {}, the shape StridedSlice gives for an "
                   "input of shape {}",
                   ctx.op.name, dy.to_string(), plan.out.to_string(), full.to_string());
  return plan;
}

// Zeros the output, then scatters input 0 into `box` of it.
void scatter_into_zeros(const KernelContext& ctx, const Box& box) {
  const Tensor& dy = ctx.inputs[0];
  const Tensor& out = ctx.outputs[0];
  std::memset(out.raw_data(), 0, out.nbytes());
  kernels::cpu::scatter_box(dy.raw_data(), box, out.raw_data(), out.shape(),
                            dtype_size(dy.dtype()));
}

}  // namespace

void register_slice_ops(Registry& r) {
  r.add(OpDef{
      .name = "Concat",
      .num_inputs = OpDef::kVariadic,
      .infer = infer_concat,
      .cpu_kernel = concat_kernel,
      .grad = concat_grad,
  });
  r.add(OpDef{
      .name = "Split",
      .num_inputs = 1,
      .infer = infer_split,
      .cpu_kernel = split_kernel,
      .grad = split_grad,
  });
  r.add(OpDef{
      .name = "Slice",
      .num_inputs = 1,
      .infer = infer_slice,
      .cpu_kernel = slice_kernel,
      .grad = [](const GradContext& ctx) -> std::vector<Tensor> {
        static const OpDef& slice_grad = op_def("SliceGrad");
        const Tensor& x = ctx.inputs[0];
        const Box box = checked_slice(InferContext{ctx.op, ctx.attrs, meta_of(x)});
        return {call1(slice_grad, {ctx.output_grads[0]},
                      {{"begin", box.begin}, {"shape", x.shape().dims()}})};
      },
  });
  r.add(OpDef{
      .name = "SliceGrad",
      .num_inputs = 1,
      .infer = [](const InferContext& ctx) -> std::vector<TensorMeta> {
        checked_slice_grad(ctx);
        return {{Shape(ctx.attrs.get<std::vector<int64_t>>("shape")), ctx.inputs[0].dtype}};
      },
      .cpu_kernel =
          [](const KernelContext& ctx) {
            scatter_into_zeros(
                ctx, checked_slice_grad(InferContext{ctx.op, ctx.attrs, meta_of(ctx.inputs[0])}));
          },
      .grad = [](const GradContext& ctx) -> std::vector<Tensor> {
        const Tensor& dy = ctx.inputs[0];
        return {ops::slice(ctx.output_grads[0], ctx.attrs.get<std::vector<int64_t>>("begin"),
                           dy.shape().dims())};
      },
  });
  r.add(OpDef{
      .name = "StridedSlice",
      .num_inputs = 1,
      .infer = [](const InferContext& ctx) -> std::vector<TensorMeta> {
        return {{checked_strided_slice(ctx.op.name, ctx.inputs[0].shape, ctx.attrs).out,
                 ctx.inputs[0].dtype}};
      },
      .cpu_kernel = strided_slice_kernel,
      .grad = [](const GradContext& ctx) -> std::vector<Tensor> {
        static const OpDef& strided_slice_grad = op_def("StridedSliceGrad");
        Attrs attrs = ctx.attrs;
        attrs.set("shape", ctx.inputs[0].shape().dims());
        return {call1(strided_slice_grad, {ctx.output_grads[0]}, attrs)};
      },
  });
  r.add(OpDef{
      .name = "StridedSliceGrad",
      .num_inputs = 1,
      .infer = [](const InferContext& ctx) -> std::vector<TensorMeta> {
        checked_strided_slice_grad(ctx);
        return {{Shape(ctx.attrs.get<std::vector<int64_t>>("shape")), ctx.inputs[0].dtype}};
      },
      .cpu_kernel =
          [](const KernelContext& ctx) {
            const StridedPlan plan =
                checked_strided_slice_grad(InferContext{ctx.op, ctx.attrs, meta_of(ctx.inputs[0])});
            scatter_into_zeros(ctx, plan.box);
          },
      .grad = [](const GradContext& ctx) -> std::vector<Tensor> {
        // The forward StridedSlice's attributes are ours minus `shape`, which it ignores.
        static const OpDef& strided_slice = op_def("StridedSlice");
        return {call1(strided_slice, {ctx.output_grads[0]}, ctx.attrs)};
      },
  });
}

}  // namespace cleave::ir

namespace cleave::ops {

Tensor concat(const std::vector<Tensor>& xs, int64_t axis) {
  static const ir::OpDef& op = ir::op_def("Concat");
  return ir::call1(op, xs, {{"axis", axis}});
}

std::vector<Tensor> split(const Tensor& x, int64_t axis, int64_t output_num) {
  static const ir::OpDef& op = ir::op_def("Split");
  return ir::call(op, {x}, {{"axis", axis}, {"output_num", output_num}});
}

std::vector<Tensor> split(const Tensor& x, int64_t axis, const std::vector<int64_t>& size_splits) {
  static const ir::OpDef& op = ir::op_def("Split");
  return ir::call(op, {x},
                  {{"axis", axis},
                   {"output_num", static_cast<int64_t>(size_splits.size())},
                   {"size_splits", size_splits}});
}

Tensor slice(const Tensor& x, const std::vector<int64_t>& begin, const std::vector<int64_t>& size) {
  static const ir::OpDef& op = ir::op_def("Slice");
  return ir::call1(op, {x}, {{"begin", begin}, {"size", size}});
}

Tensor strided_slice(const Tensor& x, const StridedSliceOptions& options) {
  static const ir::OpDef& op = ir::op_def("StridedSlice");
  return ir::call1(op, {x},
                   {{"begin", options.begin},
                    {"end", options.end},
                    {"strides", options.strides},
                    {"begin_mask", options.begin_mask},
                    {"end_mask", options.end_mask},
                    {"shrink_axis_mask", options.shrink_axis_mask}});
}

}  // namespace cleave::ops

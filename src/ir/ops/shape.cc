// Primitives that rearrange elements without selecting them: Reshape, ExpandDims, Squeeze,
// Flatten (views), BroadcastTo, Transpose, Tile. Selection lives in slice.cc (Concat, Split,
// Slice, StridedSlice) and index.cc (Gather, OneHot, UnsortedSegmentSum).
#include "cleave/ops/shape.h"

#include <algorithm>

#include "cleave/ops/reduce.h"
#include "kernels/cpu/copy.h"
#include "kernels/cpu/loops.h"
#include "op_helpers.h"
#include "shape_helpers.h"

namespace cleave::ir {
namespace {

Shape resolve_reshape(const InferContext& ctx) {
  const Shape& in = ctx.inputs[0].shape;
  std::vector<int64_t> dims = ctx.attrs.get<std::vector<int64_t>>("shape", ctx.op.name);
  int64_t known = 1;
  int infer_at = -1;
  for (size_t i = 0; i < dims.size(); ++i) {
    if (dims[i] == -1) {
      CLEAVE_CHECK_ARG(infer_at < 0,
                       "{}: shape {} has more than one -1; at most one dim can be "
                       "inferred",
                       ctx.op.name, Shape(dims).to_string());
      infer_at = static_cast<int>(i);
    } else {
      CLEAVE_CHECK_ARG(dims[i] >= 0,
                       "{}: shape {} has a negative dim {}; expected sizes >= 0 "
                       "or a single -1",
                       ctx.op.name, Shape(dims).to_string(), dims[i]);
      known *= dims[i];
    }
  }
  if (infer_at >= 0) {
    CLEAVE_CHECK_ARG(known > 0 && in.numel() % known == 0,
                     "{}: cannot reshape input 0 of shape {} ({} elements) to {}", ctx.op.name,
                     in.to_string(), in.numel(), Shape(dims).to_string());
    dims[infer_at] = in.numel() / known;
  }
  CLEAVE_CHECK_ARG(Shape(dims).numel() == in.numel(),
                   "{}: cannot reshape input 0 of shape {} ({} elements) to {} ({} elements)",
                   ctx.op.name, in.to_string(), in.numel(), Shape(dims).to_string(),
                   Shape(dims).numel());
  return Shape(dims);
}

void broadcast_to_kernel(const KernelContext& ctx) {
  const Tensor& x = ctx.inputs[0];
  const Tensor& out = ctx.outputs[0];
  CLEAVE_DISPATCH_ALL(x.dtype(), [&] {
    // A broadcast copy is a binary loop whose second operand is ignored.
    const T dummy{};
    kernels::cpu::binary_loop(x.data<T>(), x.shape(), &dummy, Shape{}, out.data<T>(), out.shape(),
                              [](T v, T) { return v; });
  });
}

// perm resolved to [0, rank), checked to be a permutation of input 0's dims.
std::vector<int64_t> checked_perm(const InferContext& ctx) {
  const auto& perm = ctx.attrs.get<std::vector<int64_t>>("perm", ctx.op.name);
  const Shape& in = ctx.inputs[0].shape;
  const int64_t rank = in.rank();
  CLEAVE_CHECK_ARG(static_cast<int64_t>(perm.size()) == rank,
                   "{}: perm {} has {} entries but input 0 has shape {} (rank {}); expected one "
                   "entry per dim",
                   ctx.op.name, dims_string(perm), perm.size(), in.to_string(), rank);
  std::vector<int64_t> out;
  std::vector<bool> seen(static_cast<size_t>(rank), false);
  for (int64_t p : perm) {
    CLEAVE_CHECK_ARG(p >= -rank && p < rank,
                     "{}: perm {} has entry {}, out of range for input 0 of shape {}; expected "
                     "entries in [{}, {}]",
                     ctx.op.name, dims_string(perm), p, in.to_string(), -rank, rank - 1);
    const int64_t d = p < 0 ? p + rank : p;
    CLEAVE_CHECK_ARG(!seen[d], "{}: perm {} names dim {} twice; expected a permutation of 0..{}",
                     ctx.op.name, dims_string(perm), d, rank - 1);
    seen[d] = true;
    out.push_back(d);
  }
  return out;
}

// The tile multiples and input dims padded with leading 1s to a common rank (NumPy tile).
struct TileDims {
  std::vector<int64_t> in, multiples;
};

TileDims checked_tile(const InferContext& ctx) {
  std::vector<int64_t> m = ctx.attrs.get<std::vector<int64_t>>("multiples", ctx.op.name);
  for (size_t i = 0; i < m.size(); ++i) {
    CLEAVE_CHECK_ARG(m[i] >= 0,
                     "{}: multiples {} has a negative entry {} at position {}; expected "
                     "multiples >= 0",
                     ctx.op.name, dims_string(m), m[i], i);
  }
  std::vector<int64_t> in = ctx.inputs[0].shape.dims();
  const size_t rank = std::max(in.size(), m.size());
  in.insert(in.begin(), rank - in.size(), 1);
  m.insert(m.begin(), rank - m.size(), 1);
  return {in, m};
}

std::vector<TensorMeta> infer_tile(const InferContext& ctx) {
  const TileDims t = checked_tile(ctx);
  std::vector<int64_t> out(t.in.size());
  for (size_t d = 0; d < out.size(); ++d) out[d] = t.in[d] * t.multiples[d];
  return {{Shape(out), ctx.inputs[0].dtype}};
}

void tile_kernel(const KernelContext& ctx) {
  const Tensor& x = ctx.inputs[0];
  const TileDims t = checked_tile(
      InferContext{ctx.op, ctx.attrs, std::vector<TensorMeta>{{x.shape(), x.dtype()}}});
  kernels::cpu::tile(x.raw_data(), Shape(t.in), t.multiples, ctx.outputs[0].raw_data(),
                     dtype_size(x.dtype()));
}

// NOTE [Tile gradient]
// Tiling (d0, d1, ...) by (m0, m1, ...) equals broadcasting the input, viewed as
// (1, d0, 1, d1, ...), to (m0, d0, m1, d1, ...) and merging each (m, d) pair. The gradient
// undoes that: view dy as (m0, d0, m1, d1, ...) and sum over the m axes.
std::vector<Tensor> tile_grad(const GradContext& ctx) {
  const Tensor& x = ctx.inputs[0];
  const TileDims t = checked_tile(
      InferContext{ctx.op, ctx.attrs, std::vector<TensorMeta>{{x.shape(), x.dtype()}}});
  std::vector<int64_t> split_dims, axes;
  for (size_t d = 0; d < t.in.size(); ++d) {
    if (t.multiples[d] != 1) axes.push_back(static_cast<int64_t>(split_dims.size()));
    split_dims.push_back(t.multiples[d]);
    split_dims.push_back(t.in[d]);
  }
  Tensor dy = ctx.output_grads[0];
  if (!axes.empty()) dy = ops::reduce_sum(ops::reshape(dy, Shape(split_dims)), {.axes = axes});
  return {ops::reshape(dy, x.shape())};
}

// Squeeze: the output dims after removing the requested (or all) size-1 axes.
std::vector<TensorMeta> infer_squeeze(const InferContext& ctx) {
  const Shape& in = ctx.inputs[0].shape;
  const auto& axes = ctx.attrs.get<std::vector<int64_t>>("axis", ctx.op.name);
  std::vector<bool> drop(static_cast<size_t>(in.rank()), false);
  if (axes.empty()) {
    for (int64_t d = 0; d < in.rank(); ++d) drop[d] = in[d] == 1;
  }
  for (int64_t a : axes) {
    const int64_t d = checked_axis(ctx, a, in.rank());
    CLEAVE_CHECK_ARG(in[d] == 1,
                     "{}: axis {} of input 0 (shape {}) has size {}; only axes of size 1 can be "
                     "squeezed",
                     ctx.op.name, a, in.to_string(), in[d]);
    drop[d] = true;
  }
  std::vector<int64_t> out;
  for (int64_t d = 0; d < in.rank(); ++d) {
    if (!drop[d]) out.push_back(in[d]);
  }
  return {{Shape(out), ctx.inputs[0].dtype}};
}

// Gradient of the view ops: dy back to input 0's shape.
std::vector<Tensor> reshape_grad(const GradContext& ctx) {
  return {ops::reshape(ctx.output_grads[0], ctx.inputs[0].shape())};
}

}  // namespace

void register_shape_ops(Registry& r) {
  r.add(OpDef{
      .name = "Reshape",
      .num_inputs = 1,
      .infer = [](const InferContext& ctx) -> std::vector<TensorMeta> {
        return {{resolve_reshape(ctx), ctx.inputs[0].dtype}};
      },
      .grad = reshape_grad,
      .output_is_view = true,
  });
  r.add(OpDef{
      .name = "ExpandDims",
      .num_inputs = 1,
      .infer = [](const InferContext& ctx) -> std::vector<TensorMeta> {
        std::vector<int64_t> dims = ctx.inputs[0].shape.dims();
        const int64_t rank = static_cast<int64_t>(dims.size());
        const int64_t axis =
            checked_axis(ctx, ctx.attrs.get<int64_t>("axis", ctx.op.name), rank + 1);
        dims.insert(dims.begin() + axis, 1);
        return {{Shape(dims), ctx.inputs[0].dtype}};
      },
      .grad = reshape_grad,
      .output_is_view = true,
  });
  r.add(OpDef{
      .name = "Squeeze",
      .num_inputs = 1,
      .infer = infer_squeeze,
      .grad = reshape_grad,
      .output_is_view = true,
  });
  r.add(OpDef{
      .name = "Flatten",
      .num_inputs = 1,
      .infer = [](const InferContext& ctx) -> std::vector<TensorMeta> {
        expect_min_rank(ctx, 0, 1);
        const Shape& in = ctx.inputs[0].shape;
        int64_t rest = 1;
        for (int64_t d = 1; d < in.rank(); ++d) rest *= in[d];
        return {{Shape{in[0], rest}, ctx.inputs[0].dtype}};
      },
      .grad = reshape_grad,
      .output_is_view = true,
  });
  r.add(OpDef{
      .name = "Transpose",
      .num_inputs = 1,
      .infer = [](const InferContext& ctx) -> std::vector<TensorMeta> {
        const std::vector<int64_t> perm = checked_perm(ctx);
        const Shape& in = ctx.inputs[0].shape;
        std::vector<int64_t> out(perm.size());
        for (size_t i = 0; i < perm.size(); ++i) out[i] = in[perm[i]];
        return {{Shape(out), ctx.inputs[0].dtype}};
      },
      .cpu_kernel =
          [](const KernelContext& ctx) {
            const Tensor& x = ctx.inputs[0];
            const std::vector<int64_t> perm = checked_perm(
                InferContext{ctx.op, ctx.attrs, std::vector<TensorMeta>{{x.shape(), x.dtype()}}});
            kernels::cpu::transpose(x.raw_data(), x.shape(), perm, ctx.outputs[0].raw_data(),
                                    dtype_size(x.dtype()));
          },
      .grad = [](const GradContext& ctx) -> std::vector<Tensor> {
        const Tensor& x = ctx.inputs[0];
        const std::vector<int64_t> perm = checked_perm(
            InferContext{ctx.op, ctx.attrs, std::vector<TensorMeta>{{x.shape(), x.dtype()}}});
        std::vector<int64_t> inverse(perm.size());
        for (size_t i = 0; i < perm.size(); ++i) inverse[perm[i]] = static_cast<int64_t>(i);
        return {ops::transpose(ctx.output_grads[0], inverse)};
      },
  });
  r.add(OpDef{
      .name = "Tile",
      .num_inputs = 1,
      .infer = infer_tile,
      .cpu_kernel = tile_kernel,
      .grad = tile_grad,
  });
  r.add(OpDef{
      .name = "BroadcastTo",
      .num_inputs = 1,
      .infer = [](const InferContext& ctx) -> std::vector<TensorMeta> {
        const Shape target(ctx.attrs.get<std::vector<int64_t>>("shape", ctx.op.name));
        const Shape& in = ctx.inputs[0].shape;
        CLEAVE_CHECK_ARG(broadcast_shapes(in, target, ctx.op.name.c_str()) == target,
                         "{}: input 0 of shape {} cannot be broadcast to {}", ctx.op.name,
                         in.to_string(), target.to_string());
        return {{target, ctx.inputs[0].dtype}};
      },
      .cpu_kernel = broadcast_to_kernel,
      .grad = [](const GradContext& ctx) -> std::vector<Tensor> {
        return {ops::sum_to(ctx.output_grads[0], ctx.inputs[0].shape())};
      },
  });
}

}  // namespace cleave::ir

namespace cleave::ops {

Tensor reshape(const Tensor& x, const Shape& shape) {
  static const ir::OpDef& op = ir::op_def("Reshape");
  return ir::call1(op, {x}, {{"shape", shape.dims()}});
}

Tensor transpose(const Tensor& x, const std::vector<int64_t>& perm) {
  static const ir::OpDef& op = ir::op_def("Transpose");
  return ir::call1(op, {x}, {{"perm", perm}});
}

Tensor expand_dims(const Tensor& x, int64_t axis) {
  static const ir::OpDef& op = ir::op_def("ExpandDims");
  return ir::call1(op, {x}, {{"axis", axis}});
}

Tensor squeeze(const Tensor& x, const std::vector<int64_t>& axes) {
  static const ir::OpDef& op = ir::op_def("Squeeze");
  return ir::call1(op, {x}, {{"axis", axes}});
}

Tensor flatten(const Tensor& x) {
  static const ir::OpDef& op = ir::op_def("Flatten");
  return ir::call1(op, {x});
}

Tensor tile(const Tensor& x, const std::vector<int64_t>& multiples) {
  static const ir::OpDef& op = ir::op_def("Tile");
  return ir::call1(op, {x}, {{"multiples", multiples}});
}

Tensor broadcast_to(const Tensor& x, const Shape& shape) {
  static const ir::OpDef& op = ir::op_def("BroadcastTo");
  return ir::call1(op, {x}, {{"shape", shape.dims()}});
}

}  // namespace cleave::ops

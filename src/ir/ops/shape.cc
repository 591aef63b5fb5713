// Primitives that move, copy or select elements: Reshape, Transpose, Concat, Split, Slice,
// StridedSlice, Tile, BroadcastTo, OneHot, Gather, ...
#include "cleave/ops/shape.h"

#include <cstring>

#include "cleave/ops/reduce.h"
#include "kernels/cpu/loops.h"
#include "op_helpers.h"

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

}  // namespace

void register_shape_ops(Registry& r) {
  r.add(OpDef{
      .name = "Reshape",
      .num_inputs = 1,
      .infer = [](const InferContext& ctx) -> std::vector<TensorMeta> {
        return {{resolve_reshape(ctx), ctx.inputs[0].dtype}};
      },
      .grad = [](const GradContext& ctx) -> std::vector<Tensor> {
        return {ops::reshape(ctx.output_grads[0], ctx.inputs[0].shape())};
      },
      .output_is_view = true,
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

Tensor broadcast_to(const Tensor& x, const Shape& shape) {
  static const ir::OpDef& op = ir::op_def("BroadcastTo");
  return ir::call1(op, {x}, {{"shape", shape.dims()}});
}

}  // namespace cleave::ops

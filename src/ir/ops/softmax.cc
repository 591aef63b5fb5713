// Softmax and LogSoftmax along one axis, with their backward primitives SoftmaxGrad and
// LogSoftmaxGrad.
#include "kernels/cpu/softmax.h"

#include "cleave/ops/nn.h"
#include "op_helpers.h"

namespace cleave::ir {
namespace {

kernels::cpu::SoftmaxShape softmax_shape(const Shape& shape, int64_t axis) {
  const int64_t a = axis < 0 ? axis + shape.rank() : axis;
  kernels::cpu::SoftmaxShape s{.outer = 1, .axis = shape[a], .inner = 1};
  for (int64_t d = 0; d < a; ++d) s.outer *= shape[d];
  for (int64_t d = a + 1; d < shape.rank(); ++d) s.inner *= shape[d];
  return s;
}

void check_softmax_axis(const InferContext& ctx) {
  const Shape& x = ctx.inputs[0].shape;
  const int64_t axis = ctx.attrs.get<int64_t>("axis", ctx.op.name);
  CLEAVE_CHECK_ARG(axis >= -x.rank() && axis < x.rank(),
                   "{}: axis {} is out of range for input 0 of shape {}; expected an axis in "
                   "[{}, {}]",
                   ctx.op.name, axis, x.to_string(), -x.rank(), x.rank() - 1);
}

std::vector<TensorMeta> infer_softmax(const InferContext& ctx) {
  expect_floating(ctx, 0);
  check_softmax_axis(ctx);
  return {ctx.inputs[0]};
}

// SoftmaxGrad / LogSoftmaxGrad: inputs (y, dy) of one shape and dtype.
std::vector<TensorMeta> infer_softmax_grad(const InferContext& ctx) {
  expect_float_pair(ctx);
  CLEAVE_CHECK_ARG(ctx.inputs[0].shape == ctx.inputs[1].shape,
                   "{}: input 0 (y) has shape {} but input 1 (dy) has shape {}; they must match",
                   ctx.op.name, ctx.inputs[0].shape.to_string(), ctx.inputs[1].shape.to_string());
  check_softmax_axis(ctx);
  return {ctx.inputs[0]};
}

KernelFn softmax_kernel(kernels::cpu::SoftmaxKind kind) {
  return [kind](const KernelContext& ctx) {
    const Tensor &x = ctx.inputs[0], &y = ctx.outputs[0];
    const auto s = softmax_shape(x.shape(), ctx.attrs.get<int64_t>("axis"));
    CLEAVE_DISPATCH_FLOAT(
        x.dtype(), [&] { kernels::cpu::softmax_forward(x.data<T>(), y.data<T>(), s, kind); });
  };
}

KernelFn softmax_grad_kernel(kernels::cpu::SoftmaxKind kind) {
  return [kind](const KernelContext& ctx) {
    const Tensor &y = ctx.inputs[0], &dy = ctx.inputs[1], &dx = ctx.outputs[0];
    const auto s = softmax_shape(y.shape(), ctx.attrs.get<int64_t>("axis"));
    CLEAVE_DISPATCH_FLOAT(y.dtype(), [&] {
      kernels::cpu::softmax_backward(y.data<T>(), dy.data<T>(), dx.data<T>(), s, kind);
    });
  };
}

GradFn softmax_grad_rule(const char* backward_op) {
  return [backward_op](const GradContext& ctx) -> std::vector<Tensor> {
    const OpDef& op = op_def(backward_op);
    return {call1(op, {ctx.outputs[0], ctx.output_grads[0]},
                  {{"axis", ctx.attrs.get<int64_t>("axis")}})};
  };
}

}  // namespace

void register_softmax_ops(Registry& r) {
  r.add(OpDef{
      .name = "Softmax",
      .num_inputs = 1,
      .infer = infer_softmax,
      .cpu_kernel = softmax_kernel(kernels::cpu::SoftmaxKind::kSoftmax),
      .grad = softmax_grad_rule("SoftmaxGrad"),
  });
  r.add(OpDef{
      .name = "LogSoftmax",
      .num_inputs = 1,
      .infer = infer_softmax,
      .cpu_kernel = softmax_kernel(kernels::cpu::SoftmaxKind::kLogSoftmax),
      .grad = softmax_grad_rule("LogSoftmaxGrad"),
  });
  // Backward-only: (y, dy) -> dx, with y the forward output.
  r.add(OpDef{
      .name = "SoftmaxGrad",
      .num_inputs = 2,
      .infer = infer_softmax_grad,
      .cpu_kernel = softmax_grad_kernel(kernels::cpu::SoftmaxKind::kSoftmax),
      .no_grad = kNoGradBackward,
  });
  r.add(OpDef{
      .name = "LogSoftmaxGrad",
      .num_inputs = 2,
      .infer = infer_softmax_grad,
      .cpu_kernel = softmax_grad_kernel(kernels::cpu::SoftmaxKind::kLogSoftmax),
      .no_grad = kNoGradBackward,
  });
}

}  // namespace cleave::ir

namespace cleave::ops {

using ir::call1;
using ir::op_def;

Tensor softmax(const Tensor& x, int64_t axis) {
  static const ir::OpDef& op = op_def("Softmax");
  return call1(op, {x}, {{"axis", axis}});
}

Tensor log_softmax(const Tensor& x, int64_t axis) {
  static const ir::OpDef& op = op_def("LogSoftmax");
  return call1(op, {x}, {{"axis", axis}});
}

}  // namespace cleave::ops

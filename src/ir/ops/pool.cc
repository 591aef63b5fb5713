// MaxPool2D and AvgPool2D and their backward primitives MaxPoolGrad and AvgPoolGrad. Their pad
// modes are NOTE [Conv and pool pad modes] (window_helpers.h).
#include "kernels/cpu/pool.h"

#include "cleave/ops/nn.h"
#include "op_helpers.h"
#include "window_helpers.h"

namespace cleave::ir {
namespace {

using kernels::cpu::Pool2DGeometry;

Pool2DGeometry pool_geometry(const std::string& op, const Attrs& attrs, const Shape& x,
                             const char* x_name) {
  CLEAVE_CHECK_ARG(x.rank() == 4, "{}: {} has shape {} (rank {}); expected rank 4 (N, C, H, W)", op,
                   x_name, x.to_string(), x.rank());
  const auto [kh, kw] = positive_pair(attrs, "kernel_size", op);
  const auto [stride_h, stride_w] = positive_pair(attrs, "stride", op);
  const PadMode mode = pad_mode(attrs, op, /*allow_pad=*/false);
  if (mode == PadMode::kValid) {
    CLEAVE_CHECK_ARG(kh <= x[2] && kw <= x[3],
                     "{}: kernel_size ({}, {}) is larger than the input height and width ({}, "
                     "{}) of {} (shape {}) with pad_mode 'valid'; use a smaller kernel or "
                     "pad_mode \"same\"",
                     op, kh, kw, x[2], x[3], x_name, x.to_string());
  }
  const DimPlan ph = plan_dim(mode, x[2], kh, stride_h, 0, 0);
  const DimPlan pw = plan_dim(mode, x[3], kw, stride_w, 0, 0);
  Pool2DGeometry g;
  g.n = x[0], g.c = x[1], g.h = x[2], g.w = x[3];
  g.kh = kh, g.kw = kw, g.stride_h = stride_h, g.stride_w = stride_w;
  g.pad_top = ph.before, g.pad_bottom = ph.after, g.oh = ph.out;
  g.pad_left = pw.before, g.pad_right = pw.after, g.ow = pw.out;
  return g;
}

Shape pool_output_shape(const Pool2DGeometry& g) { return Shape{g.n, g.c, g.oh, g.ow}; }

}  // namespace

void register_pool_ops(Registry& r) {
  auto infer_pool = [](const InferContext& ctx) -> std::vector<TensorMeta> {
    expect_floating(ctx, 0);
    const Pool2DGeometry g = pool_geometry(ctx.op.name, ctx.attrs, ctx.inputs[0].shape, "input 0");
    return {{pool_output_shape(g), ctx.inputs[0].dtype}};
  };
  r.add(OpDef{
      .name = "MaxPool2D",
      .num_inputs = 1,
      .infer = infer_pool,
      .cpu_kernel =
          [](const KernelContext& ctx) {
            const Tensor& x = ctx.inputs[0];
            kernels::cpu::max_pool2d_forward(
                pool_geometry(ctx.op.name, ctx.attrs, x.shape(), "input 0"), x, ctx.outputs[0]);
          },
      .grad = [](const GradContext& ctx) -> std::vector<Tensor> {
        static const OpDef& grad = op_def("MaxPoolGrad");
        return {call1(grad, {ctx.inputs[0], ctx.output_grads[0]}, ctx.attrs)};
      },
  });
  // MaxPoolGrad(x, dy), attrs of MaxPool2D -> dx (NOTE [Max pooling ties]).
  r.add(OpDef{
      .name = "MaxPoolGrad",
      .num_inputs = 2,
      .infer = [](const InferContext& ctx) -> std::vector<TensorMeta> {
        expect_floating(ctx, 0);
        expect_same_dtype(ctx, 0, 1);
        const Pool2DGeometry g =
            pool_geometry(ctx.op.name, ctx.attrs, ctx.inputs[0].shape, "input 0 (x)");
        expect_grad_shape(ctx, 1, pool_output_shape(g), "the pooling's output shape");
        return {ctx.inputs[0]};
      },
      .cpu_kernel =
          [](const KernelContext& ctx) {
            const Tensor &x = ctx.inputs[0], &dy = ctx.inputs[1];
            kernels::cpu::max_pool2d_backward(
                pool_geometry(ctx.op.name, ctx.attrs, x.shape(), "input 0 (x)"), x, dy,
                ctx.outputs[0]);
          },
      .no_grad = kNoGradBackward,
  });
  r.add(OpDef{
      .name = "AvgPool2D",
      .num_inputs = 1,
      .infer = infer_pool,
      .cpu_kernel =
          [](const KernelContext& ctx) {
            const Tensor& x = ctx.inputs[0];
            kernels::cpu::avg_pool2d_forward(
                pool_geometry(ctx.op.name, ctx.attrs, x.shape(), "input 0"), x, ctx.outputs[0]);
          },
      .grad = [](const GradContext& ctx) -> std::vector<Tensor> {
        static const OpDef& grad = op_def("AvgPoolGrad");
        return {call1(grad, {ctx.output_grads[0]},
                      with_shape(ctx.attrs, "input_shape", ctx.inputs[0].shape()))};
      },
  });
  // AvgPoolGrad(dy), attrs of AvgPool2D plus input_shape -> dx.
  r.add(OpDef{
      .name = "AvgPoolGrad",
      .num_inputs = 1,
      .infer = [](const InferContext& ctx) -> std::vector<TensorMeta> {
        expect_floating(ctx, 0);
        const Shape x = shape_attr(ctx.attrs, "input_shape", ctx.op.name);
        const Pool2DGeometry g = pool_geometry(ctx.op.name, ctx.attrs, x, "attribute input_shape");
        expect_grad_shape(ctx, 0, pool_output_shape(g), "the pooling's output shape");
        return {{x, ctx.inputs[0].dtype}};
      },
      .cpu_kernel =
          [](const KernelContext& ctx) {
            const Tensor& dx = ctx.outputs[0];
            kernels::cpu::avg_pool2d_backward(
                pool_geometry(ctx.op.name, ctx.attrs, dx.shape(), "attribute input_shape"),
                ctx.inputs[0], dx);
          },
      .no_grad = kNoGradBackward,
  });
}

}  // namespace cleave::ir

namespace cleave::ops {

namespace {

ir::Attrs pool_attrs(const Pool2DOptions& options) {
  return {{"kernel_size", options.kernel_size},
          {"stride", options.stride},
          {"pad_mode", options.pad_mode}};
}

}  // namespace

Tensor max_pool2d(const Tensor& x, const Pool2DOptions& options) {
  static const ir::OpDef& op = ir::op_def("MaxPool2D");
  return ir::call1(op, {x}, pool_attrs(options));
}

Tensor avg_pool2d(const Tensor& x, const Pool2DOptions& options) {
  static const ir::OpDef& op = ir::op_def("AvgPool2D");
  return ir::call1(op, {x}, pool_attrs(options));
}

}  // namespace cleave::ops

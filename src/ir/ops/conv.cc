// Conv2D and its backward primitives Conv2DBackpropInput and Conv2DBackpropFilter. Their pad
// modes are NOTE [Conv and pool pad modes] (window_helpers.h).
#include "kernels/cpu/conv.h"

#include <algorithm>

#include "cleave/ops/nn.h"
#include "op_helpers.h"
#include "window_helpers.h"

namespace cleave::ir {
namespace {

using kernels::cpu::Conv2DGeometry;

// Names of the operands in messages: for Conv2D "input 0 (x)", for its backward primitives the
// attribute that stands for a tensor.
struct ConvOperands {
  const char* x;
  const char* weight;
};

Conv2DGeometry conv_geometry(const std::string& op, const Attrs& attrs, const Shape& x,
                             const Shape& w, const ConvOperands& names) {
  CLEAVE_CHECK_ARG(x.rank() == 4, "{}: {} has shape {} (rank {}); expected rank 4 (N, C, H, W)", op,
                   names.x, x.to_string(), x.rank());
  CLEAVE_CHECK_ARG(w.rank() == 4,
                   "{}: {} has shape {} (rank {}); expected rank 4 (O, C/group, kH, kW)", op,
                   names.weight, w.to_string(), w.rank());
  const auto [stride_h, stride_w] = positive_pair(attrs, "stride", op);
  const auto [dilation_h, dilation_w] = positive_pair(attrs, "dilation", op);
  const int64_t group = attr_or<int64_t>(attrs, "group", 1, op);
  CLEAVE_CHECK_ARG(group >= 1, "{}: attribute group is {}; expected >= 1", op, group);
  CLEAVE_CHECK_ARG(x[1] % group == 0,
                   "{}: group {} does not divide the {} input channels of {} (shape {})", op, group,
                   x[1], names.x, x.to_string());
  CLEAVE_CHECK_ARG(w[0] % group == 0,
                   "{}: group {} does not divide the {} output channels of {} (shape {})", op,
                   group, w[0], names.weight, w.to_string());
  CLEAVE_CHECK_ARG(w[1] == x[1] / group,
                   "{}: {} has shape {} with {} input channels per group, but {} has shape {}: "
                   "{} channels / group {} = {} expected",
                   op, names.weight, w.to_string(), w[1], names.x, x.to_string(), x[1], group,
                   x[1] / group);
  const PadMode mode = pad_mode(attrs, op, /*allow_pad=*/true);
  const auto pad = attr_or<std::vector<int64_t>>(attrs, "pad", {0, 0, 0, 0}, op);
  CLEAVE_CHECK_ARG(
      pad.size() == 4 && std::all_of(pad.begin(), pad.end(), [](int64_t p) { return p >= 0; }),
      "{}: attribute pad is ({}); expected 4 values (top, bottom, left, right), "
      "each >= 0",
      op, fmt::join(pad, ", "));
  CLEAVE_CHECK_ARG(mode == PadMode::kPad ||
                       std::all_of(pad.begin(), pad.end(), [](int64_t p) { return p == 0; }),
                   "{}: attribute pad is ({}) but pad_mode is '{}'; explicit padding needs "
                   "pad_mode \"pad\"",
                   op, fmt::join(pad, ", "), pad_mode_name(attrs, op));

  Conv2DGeometry g;
  g.n = x[0], g.c = x[1], g.h = x[2], g.w = x[3];
  g.o = w[0], g.kh = w[2], g.kw = w[3], g.group = group;
  g.stride_h = stride_h, g.stride_w = stride_w;
  g.dilation_h = dilation_h, g.dilation_w = dilation_w;
  const int64_t dkh = (g.kh - 1) * dilation_h + 1, dkw = (g.kw - 1) * dilation_w + 1;
  const char* dim_names[2] = {"height", "width"};
  const int64_t in[2] = {g.h, g.w}, dk[2] = {dkh, dkw}, k[2] = {g.kh, g.kw};
  const int64_t dil[2] = {dilation_h, dilation_w};
  const int64_t before[2] = {pad[0], pad[2]}, after[2] = {pad[1], pad[3]};
  for (int d = 0; d < 2; ++d) {
    CLEAVE_CHECK_ARG(k[d] >= 1, "{}: {} has shape {}: kernel {} {} must be >= 1", op, names.weight,
                     w.to_string(), dim_names[d], k[d]);
    if (mode == PadMode::kSame) continue;
    CLEAVE_CHECK_ARG(dk[d] <= in[d] + before[d] + after[d],
                     "{}: the kernel {} {} (dilated to {} by dilation {}) is larger than the "
                     "padded input {} {} ({} of {} (shape {}) + padding {} + {}) with pad_mode "
                     "'{}'; use a smaller kernel or dilation, more padding, or pad_mode \"same\"",
                     op, dim_names[d], k[d], dk[d], dil[d], dim_names[d],
                     in[d] + before[d] + after[d], in[d], names.x, x.to_string(), before[d],
                     after[d], mode == PadMode::kPad ? "pad" : "valid");
  }
  const DimPlan ph = plan_dim(mode, g.h, dkh, stride_h, before[0], after[0]);
  const DimPlan pw = plan_dim(mode, g.w, dkw, stride_w, before[1], after[1]);
  g.pad_top = ph.before, g.pad_bottom = ph.after, g.oh = ph.out;
  g.pad_left = pw.before, g.pad_right = pw.after, g.ow = pw.out;
  return g;
}

Shape conv_output_shape(const Conv2DGeometry& g) { return Shape{g.n, g.o, g.oh, g.ow}; }

constexpr ConvOperands kConvOperands{"input 0 (x)", "input 1 (weight)"};
constexpr ConvOperands kBackpropInputOperands{"attribute input_shape", "input 1 (weight)"};
constexpr ConvOperands kBackpropFilterOperands{"input 1 (x)", "attribute filter_shape"};

}  // namespace

void register_conv_ops(Registry& r) {
  r.add(OpDef{
      .name = "Conv2D",
      .num_inputs = 2,
      .infer = [](const InferContext& ctx) -> std::vector<TensorMeta> {
        expect_floating(ctx, 0);
        expect_same_dtype(ctx, 0, 1);
        const Conv2DGeometry g = conv_geometry(ctx.op.name, ctx.attrs, ctx.inputs[0].shape,
                                               ctx.inputs[1].shape, kConvOperands);
        return {{conv_output_shape(g), ctx.inputs[0].dtype}};
      },
      .cpu_kernel =
          [](const KernelContext& ctx) {
            const Tensor &x = ctx.inputs[0], &w = ctx.inputs[1];
            kernels::cpu::conv2d_forward(
                conv_geometry(ctx.op.name, ctx.attrs, x.shape(), w.shape(), kConvOperands), x, w,
                ctx.outputs[0]);
          },
      .grad = [](const GradContext& ctx) -> std::vector<Tensor> {
        static const OpDef& backprop_input = op_def("Conv2DBackpropInput");
        static const OpDef& backprop_filter = op_def("Conv2DBackpropFilter");
        const Tensor &x = ctx.inputs[0], &w = ctx.inputs[1], &dy = ctx.output_grads[0];
        Tensor dx, dw;
        if (ctx.needs_input_grad[0]) {
          dx = call1(backprop_input, {dy, w}, with_shape(ctx.attrs, "input_shape", x.shape()));
        }
        if (ctx.needs_input_grad[1]) {
          dw = call1(backprop_filter, {dy, x}, with_shape(ctx.attrs, "filter_shape", w.shape()));
        }
        return {dx, dw};
      },
  });
  // Conv2DBackpropInput(dy, weight), attrs of Conv2D plus input_shape -> dx.
  r.add(OpDef{
      .name = "Conv2DBackpropInput",
      .num_inputs = 2,
      .infer = [](const InferContext& ctx) -> std::vector<TensorMeta> {
        expect_floating(ctx, 0);
        expect_same_dtype(ctx, 0, 1);
        const Shape x = shape_attr(ctx.attrs, "input_shape", ctx.op.name);
        const Conv2DGeometry g =
            conv_geometry(ctx.op.name, ctx.attrs, x, ctx.inputs[1].shape, kBackpropInputOperands);
        expect_grad_shape(ctx, 0, conv_output_shape(g), "the convolution's output shape");
        return {{x, ctx.inputs[0].dtype}};
      },
      .cpu_kernel =
          [](const KernelContext& ctx) {
            const Tensor &dy = ctx.inputs[0], &w = ctx.inputs[1], &dx = ctx.outputs[0];
            kernels::cpu::conv2d_backward_input(conv_geometry(ctx.op.name, ctx.attrs, dx.shape(),
                                                              w.shape(), kBackpropInputOperands),
                                                dy, w, dx);
          },
      .no_grad = kNoGradBackward,
  });
  // Conv2DBackpropFilter(dy, x), attrs of Conv2D plus filter_shape -> dweight.
  r.add(OpDef{
      .name = "Conv2DBackpropFilter",
      .num_inputs = 2,
      .infer = [](const InferContext& ctx) -> std::vector<TensorMeta> {
        expect_floating(ctx, 0);
        expect_same_dtype(ctx, 0, 1);
        const Shape w = shape_attr(ctx.attrs, "filter_shape", ctx.op.name);
        const Conv2DGeometry g =
            conv_geometry(ctx.op.name, ctx.attrs, ctx.inputs[1].shape, w, kBackpropFilterOperands);
        expect_grad_shape(ctx, 0, conv_output_shape(g), "the convolution's output shape");
        return {{w, ctx.inputs[0].dtype}};
      },
      .cpu_kernel =
          [](const KernelContext& ctx) {
            const Tensor &dy = ctx.inputs[0], &x = ctx.inputs[1], &dw = ctx.outputs[0];
            kernels::cpu::conv2d_backward_filter(conv_geometry(ctx.op.name, ctx.attrs, x.shape(),
                                                               dw.shape(), kBackpropFilterOperands),
                                                 dy, x, dw);
          },
      .no_grad = kNoGradBackward,
  });
}

}  // namespace cleave::ir

namespace cleave::ops {

Tensor conv2d(const Tensor& x, const Tensor& weight, const Conv2DOptions& options) {
  static const ir::OpDef& op = ir::op_def("Conv2D");
  return ir::call1(op, {x, weight},
                   {{"stride", options.stride},
                    {"dilation", options.dilation},
                    {"pad_mode", options.pad_mode},
                    {"pad", options.pad},
                    {"group", options.group}});
}

}  // namespace cleave::ops

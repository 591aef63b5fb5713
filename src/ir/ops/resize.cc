// ResizeBilinear and ResizeNearest and their backward primitives. The coordinate mapping (half
// pixel centres or align_corners) is NOTE [Resize coordinate mapping] in kernels/cpu/resize.h.
#include "kernels/cpu/resize.h"

#include "cleave/ops/nn.h"
#include "op_helpers.h"

namespace cleave::ir {
namespace {

using kernels::cpu::ResizeCorners;

ResizeCorners corners_attr(const Attrs& attrs, const std::string& op) {
  const bool align = attrs.has("align_corners") && attrs.get<bool>("align_corners", op);
  return align ? ResizeCorners::kAlignCorners : ResizeCorners::kHalfPixel;
}

// Checks an image shape (N, C, H, W) with H, W >= 1, named `what` in messages.
void expect_image(const std::string& op, const Shape& s, const std::string& what) {
  CLEAVE_CHECK_ARG(s.rank() == 4, "{}: {} has shape {} (rank {}); expected rank 4 (N, C, H, W)", op,
                   what, s.to_string(), s.rank());
  CLEAVE_CHECK_ARG(s[2] >= 1 && s[3] >= 1,
                   "{}: {} has shape {}; expected height and width >= 1 (an empty image has "
                   "nothing to interpolate from)",
                   op, what, s.to_string());
}

// Output shape of the forward op: x (N, C, H, W) -> (N, C, size[0], size[1]).
Shape resized_shape(const InferContext& ctx) {
  const std::string& op = ctx.op.name;
  expect_floating(ctx, 0);
  const Shape& x = ctx.inputs[0].shape;
  expect_image(op, x, "input 0");
  const auto& size = ctx.attrs.get<std::vector<int64_t>>("size", op);
  CLEAVE_CHECK_ARG(size.size() == 2 && size[0] >= 1 && size[1] >= 1,
                   "{}: attribute size is ({}); expected 2 values (height, width), each >= 1", op,
                   fmt::join(size, ", "));
  return Shape{x[0], x[1], size[0], size[1]};
}

// Backward primitives: (dy) with attrs align_corners and input_shape -> dx of input_shape.
std::vector<TensorMeta> infer_resize_grad(const InferContext& ctx) {
  const std::string& op = ctx.op.name;
  expect_floating(ctx, 0);
  const Shape& dy = ctx.inputs[0].shape;
  const Shape x(ctx.attrs.get<std::vector<int64_t>>("input_shape", op));
  expect_image(op, x, "attribute input_shape");
  expect_image(op, dy, "input 0 (dy)");
  CLEAVE_CHECK_ARG(dy[0] == x[0] && dy[1] == x[1],
                   "{}: input 0 (dy) has shape {}; expected N and C of attribute input_shape {}",
                   op, dy.to_string(), x.to_string());
  return {{x, ctx.inputs[0].dtype}};
}

Attrs grad_attrs(const GradContext& ctx) {
  Attrs a = ctx.attrs;
  a.set("input_shape", ctx.inputs[0].shape().dims());
  return a;
}

using ResizeKernel = void (*)(const Tensor& in, kernels::cpu::ResizeCorners corners,
                              const Tensor& out);

// One resize primitive and its backward primitive "<name>Grad".
void add_resize(Registry& r, const std::string& name, ResizeKernel forward, ResizeKernel backward) {
  const std::string grad_name = name + "Grad";
  r.add(OpDef{
      .name = name,
      .num_inputs = 1,
      .infer = [](const InferContext& ctx) -> std::vector<TensorMeta> {
        return {{resized_shape(ctx), ctx.inputs[0].dtype}};
      },
      .cpu_kernel =
          [forward](const KernelContext& ctx) {
            forward(ctx.inputs[0], corners_attr(ctx.attrs, ctx.op.name), ctx.outputs[0]);
          },
      .grad = [grad_name](const GradContext& ctx) -> std::vector<Tensor> {
        return {call1(op_def(grad_name), {ctx.output_grads[0]}, grad_attrs(ctx))};
      },
  });
  r.add(OpDef{
      .name = grad_name,
      .num_inputs = 1,
      .infer = infer_resize_grad,
      .cpu_kernel =
          [backward](const KernelContext& ctx) {
            backward(ctx.inputs[0], corners_attr(ctx.attrs, ctx.op.name), ctx.outputs[0]);
          },
      .no_grad = kNoGradBackward,
  });
}

}  // namespace

void register_resize_ops(Registry& r) {
  add_resize(r, "ResizeBilinear", kernels::cpu::resize_bilinear_forward,
             kernels::cpu::resize_bilinear_backward);
  add_resize(r, "ResizeNearest", kernels::cpu::resize_nearest_forward,
             kernels::cpu::resize_nearest_backward);
}

}  // namespace cleave::ir

namespace cleave::ops {

Tensor resize_bilinear(const Tensor& x, const std::vector<int64_t>& size, bool align_corners) {
  static const ir::OpDef& op = ir::op_def("ResizeBilinear");
  return ir::call1(op, {x}, {{"size", size}, {"align_corners", align_corners}});
}

Tensor resize_nearest(const Tensor& x, const std::vector<int64_t>& size, bool align_corners) {
  static const ir::OpDef& op = ir::op_def("ResizeNearest");
  return ir::call1(op, {x}, {{"size", size}, {"align_corners", align_corners}});
}

}  // namespace cleave::ops

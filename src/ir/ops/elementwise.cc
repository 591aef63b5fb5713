// Elementwise primitives: unary math (and its backward-only primitives), broadcasting binary
// arithmetic, Cast and fills. Comparisons, logic and Select live in compare.cc.
#include "cleave/ops/elementwise.h"

#include <cmath>

#include "cleave/ops/reduce.h"
#include "kernels/cpu/elementwise.h"
#include "kernels/cpu/loops.h"
#include "op_helpers.h"

namespace cleave::ir {
namespace {

using kernels::cpu::BinaryOp;
using kernels::cpu::UnaryGradOp;
using kernels::cpu::UnaryOp;

constexpr std::initializer_list<DType> kNumeric = {DType::kFloat32, DType::kFloat64, DType::kInt32,
                                                   DType::kInt64};

Tensor call_backward(std::string_view name, const Tensor& dy, const Tensor& saved) {
  return call1(op_def(name), {dy, saved});
}

// ---- unary ----

struct UnaryDef {
  const char* name;
  UnaryOp op;
  bool takes_integers;  // Neg, Abs, Square
  GradFn grad;
};

// The gradient rules, in primitives. `x` is the forward input, `y` the forward output.
std::vector<UnaryDef> unary_defs() {
  auto dy = [](const GradContext& ctx) -> const Tensor& { return ctx.output_grads[0]; };
  auto x = [](const GradContext& ctx) -> const Tensor& { return ctx.inputs[0]; };
  auto y = [](const GradContext& ctx) -> const Tensor& { return ctx.outputs[0]; };
  using G = std::vector<Tensor>;
  return {
      {"Neg", UnaryOp::kNeg, true, [=](const GradContext& c) -> G { return {ops::neg(dy(c))}; }},
      {"Exp", UnaryOp::kExp, false,
       [=](const GradContext& c) -> G { return {ops::mul(dy(c), y(c))}; }},
      {"Log", UnaryOp::kLog, false,
       [=](const GradContext& c) -> G { return {ops::div(dy(c), x(c))}; }},
      {"Sqrt", UnaryOp::kSqrt, false,
       [=](const GradContext& c) -> G { return {call_backward("SqrtGrad", dy(c), y(c))}; }},
      {"Rsqrt", UnaryOp::kRsqrt, false,
       [=](const GradContext& c) -> G { return {call_backward("RsqrtGrad", dy(c), y(c))}; }},
      // sign(x) with sign(0) = 0: the subgradient 0 at the kink.
      {"Abs", UnaryOp::kAbs, true,
       [=](const GradContext& c) -> G { return {call_backward("AbsGrad", dy(c), x(c))}; }},
      {"Square", UnaryOp::kSquare, true,
       [=](const GradContext& c) -> G { return {ops::mul(dy(c), ops::mul(x(c), 2.0))}; }},
      // 0 at x == 0, like MindSpore and PyTorch.
      {"ReLU", UnaryOp::kRelu, false,
       [=](const GradContext& c) -> G { return {call_backward("ReluGrad", dy(c), x(c))}; }},
      {"GeLU", UnaryOp::kGelu, false,
       [=](const GradContext& c) -> G { return {call_backward("GeLUGrad", dy(c), x(c))}; }},
      {"Sigmoid", UnaryOp::kSigmoid, false,
       [=](const GradContext& c) -> G { return {call_backward("SigmoidGrad", dy(c), y(c))}; }},
      {"Tanh", UnaryOp::kTanh, false,
       [=](const GradContext& c) -> G { return {call_backward("TanhGrad", dy(c), y(c))}; }},
      {"Erf", UnaryOp::kErf, false,
       [=](const GradContext& c) -> G { return {call_backward("ErfGrad", dy(c), x(c))}; }},
  };
}

void add_unary(Registry& r, UnaryDef def) {
  const bool takes_integers = def.takes_integers;
  const UnaryOp op = def.op;
  r.add(OpDef{
      .name = def.name,
      .num_inputs = 1,
      .infer =
          [takes_integers](const InferContext& ctx) {
            if (takes_integers) {
              expect_dtype(ctx, 0, kNumeric);
            } else {
              expect_floating(ctx, 0);
            }
            return infer_same_as_input0(ctx);
          },
      .cpu_kernel =
          [op](const KernelContext& ctx) {
            kernels::cpu::unary(op, ctx.inputs[0], ctx.outputs[0]);
          },
      .grad = std::move(def.grad),
  });
}

// NOTE [Unary backward primitives]
// Backward-only primitives of the unary ops take (dy, saved), where saved is the forward input x
// (ReluGrad, AbsGrad, GeLUGrad, ErfGrad) or the forward output y (SigmoidGrad, TanhGrad, SqrtGrad,
// RsqrtGrad), both of one floating dtype and shape, and return dx. Each is one fused pass where
// the composed rule would be several.
void add_unary_backward(Registry& r, const char* name, UnaryGradOp op) {
  r.add(OpDef{
      .name = name,
      .num_inputs = 2,
      .infer = [](const InferContext& ctx) -> std::vector<TensorMeta> {
        expect_floating(ctx, 0);
        expect_same_dtype(ctx, 0, 1);
        CLEAVE_CHECK_ARG(ctx.inputs[0].shape == ctx.inputs[1].shape,
                         "{}: input 0 (dy) has shape {} but input 1 has shape {}; they must match",
                         ctx.op.name, ctx.inputs[0].shape.to_string(),
                         ctx.inputs[1].shape.to_string());
        return {ctx.inputs[0]};
      },
      .cpu_kernel =
          [op](const KernelContext& ctx) {
            kernels::cpu::unary_grad(op, ctx.inputs[0], ctx.inputs[1], ctx.outputs[0]);
          },
      .no_grad = kNoGradBackward,
  });
}

// ---- binary ----

std::vector<TensorMeta> infer_numeric_binary(const InferContext& ctx) {
  expect_same_dtype(ctx, 0, 1);
  expect_dtype(ctx, 0, kNumeric);
  return infer_broadcast_binary(ctx);
}

KernelFn binary_kernel(BinaryOp op) {
  return [op](const KernelContext& ctx) {
    kernels::cpu::binary(op, ctx.inputs[0], ctx.inputs[1], ctx.outputs[0]);
  };
}

// d(a op b) for Maximum/Minimum through the fused MaximumGrad/MinimumGrad (NOTE [Extremum ties]).
GradFn extremum_grad(const char* backward_name) {
  return [backward_name](const GradContext& ctx) -> std::vector<Tensor> {
    const Tensor &a = ctx.inputs[0], &b = ctx.inputs[1];
    const std::vector<Tensor> g = call(op_def(backward_name), {a, b, ctx.output_grads[0]});
    return {ctx.needs_input_grad[0] ? ops::sum_to(g[0], a.shape()) : Tensor(),
            ctx.needs_input_grad[1] ? ops::sum_to(g[1], b.shape()) : Tensor()};
  };
}

// NOTE [Extremum ties]
// Maximum(a, b) routes dy to the larger input; where a == b, each gets dy / 2, so the two
// gradients still sum to dy (PyTorch does the same; MindSpore gives all of it to a). Minimum
// likewise with the smaller. MaximumGrad(a, b, dy) returns (da, db) at dy's (the broadcast)
// shape; the rule then sums each to its input's shape.
void add_extremum_backward(Registry& r, const char* name, BinaryOp op) {
  r.add(OpDef{
      .name = name,
      .num_inputs = 3,
      .infer = [](const InferContext& ctx) -> std::vector<TensorMeta> {
        expect_floating(ctx, 0);
        expect_same_dtype(ctx, 0, 1);
        expect_same_dtype(ctx, 0, 2);
        const Shape out =
            broadcast_shapes(ctx.inputs[0].shape, ctx.inputs[1].shape, ctx.op.name.c_str());
        CLEAVE_CHECK_ARG(out == ctx.inputs[2].shape,
                         "{}: input 2 (dy) has shape {}; expected {}, the broadcast of inputs 0 "
                         "and 1",
                         ctx.op.name, ctx.inputs[2].shape.to_string(), out.to_string());
        return {ctx.inputs[2], ctx.inputs[2]};
      },
      .cpu_kernel =
          [op](const KernelContext& ctx) {
            kernels::cpu::extremum_grad(op, ctx.inputs[0], ctx.inputs[1], ctx.inputs[2],
                                        ctx.outputs[0], ctx.outputs[1]);
          },
      .no_grad = kNoGradBackward,
  });
}

std::vector<Tensor> pow_grad(const GradContext& ctx) {
  // y = a^b: dy/da = b * a^(b-1) (not b * y / a, which fails at a == 0);
  // dy/db = y * log(a), taken as 0 where a == 0 (its limit for b > 0) and NaN where a < 0.
  const Tensor &a = ctx.inputs[0], &b = ctx.inputs[1], &y = ctx.outputs[0];
  const Tensor& dy = ctx.output_grads[0];
  Tensor da, db;
  if (ctx.needs_input_grad[0]) {
    da = ops::sum_to(ops::mul(dy, ops::mul(b, ops::pow(a, ops::sub(b, 1.0)))), a.shape());
  }
  if (ctx.needs_input_grad[1]) {
    const Tensor zero = Tensor::scalar(0.0, a.dtype());
    const Tensor y_log_a = ops::select(ops::equal(a, zero), zero, ops::mul(y, ops::log(a)));
    db = ops::sum_to(ops::mul(dy, y_log_a), b.shape());
  }
  return {da, db};
}

void register_binary_ops(Registry& r) {
  r.add(OpDef{
      .name = "Add",
      .num_inputs = 2,
      .infer = infer_numeric_binary,
      .cpu_kernel = binary_kernel(BinaryOp::kAdd),
      .grad = [](const GradContext& ctx) -> std::vector<Tensor> {
        const Tensor& dy = ctx.output_grads[0];
        return {ctx.needs_input_grad[0] ? ops::sum_to(dy, ctx.inputs[0].shape()) : Tensor(),
                ctx.needs_input_grad[1] ? ops::sum_to(dy, ctx.inputs[1].shape()) : Tensor()};
      },
  });
  r.add(OpDef{
      .name = "Sub",
      .num_inputs = 2,
      .infer = infer_numeric_binary,
      .cpu_kernel = binary_kernel(BinaryOp::kSub),
      .grad = [](const GradContext& ctx) -> std::vector<Tensor> {
        const Tensor& dy = ctx.output_grads[0];
        return {
            ctx.needs_input_grad[0] ? ops::sum_to(dy, ctx.inputs[0].shape()) : Tensor(),
            ctx.needs_input_grad[1] ? ops::neg(ops::sum_to(dy, ctx.inputs[1].shape())) : Tensor()};
      },
  });
  r.add(OpDef{
      .name = "Mul",
      .num_inputs = 2,
      .infer = infer_numeric_binary,
      .cpu_kernel = binary_kernel(BinaryOp::kMul),
      .grad = [](const GradContext& ctx) -> std::vector<Tensor> {
        const Tensor& dy = ctx.output_grads[0];
        const Tensor &a = ctx.inputs[0], &b = ctx.inputs[1];
        return {ctx.needs_input_grad[0] ? ops::sum_to(ops::mul(dy, b), a.shape()) : Tensor(),
                ctx.needs_input_grad[1] ? ops::sum_to(ops::mul(dy, a), b.shape()) : Tensor()};
      },
  });
  r.add(OpDef{
      .name = "Div",
      .num_inputs = 2,
      .infer = infer_numeric_binary,
      .cpu_kernel = binary_kernel(BinaryOp::kDiv),
      .grad = [](const GradContext& ctx) -> std::vector<Tensor> {
        // y = a / b: da = dy / b, db = -dy * a / b^2 = -(dy / b) * y.
        const Tensor dy_over_b = ops::div(ctx.output_grads[0], ctx.inputs[1]);
        return {ctx.needs_input_grad[0] ? ops::sum_to(dy_over_b, ctx.inputs[0].shape()) : Tensor(),
                ctx.needs_input_grad[1] ? ops::neg(ops::sum_to(ops::mul(dy_over_b, ctx.outputs[0]),
                                                               ctx.inputs[1].shape()))
                                        : Tensor()};
      },
  });
  r.add(OpDef{
      .name = "Pow",
      .num_inputs = 2,
      .infer = infer_numeric_binary,
      .cpu_kernel = binary_kernel(BinaryOp::kPow),
      .grad = pow_grad,
  });
  r.add(OpDef{
      .name = "Maximum",
      .num_inputs = 2,
      .infer = infer_numeric_binary,
      .cpu_kernel = binary_kernel(BinaryOp::kMaximum),
      .grad = extremum_grad("MaximumGrad"),
  });
  r.add(OpDef{
      .name = "Minimum",
      .num_inputs = 2,
      .infer = infer_numeric_binary,
      .cpu_kernel = binary_kernel(BinaryOp::kMinimum),
      .grad = extremum_grad("MinimumGrad"),
  });
  add_extremum_backward(r, "MaximumGrad", BinaryOp::kMaximum);
  add_extremum_backward(r, "MinimumGrad", BinaryOp::kMinimum);
}

// ---- Cast and fills ----

void fill_kernel(const KernelContext& ctx, double value) {
  kernels::cpu::fill(ctx.outputs[0], value);
}

void register_cast_and_fill_ops(Registry& r) {
  r.add(OpDef{
      .name = "Cast",
      .num_inputs = 1,
      .infer = [](const InferContext& ctx) -> std::vector<TensorMeta> {
        return {{ctx.inputs[0].shape, ctx.attrs.get<DType>("dtype", ctx.op.name)}};
      },
      .cpu_kernel =
          [](const KernelContext& ctx) {
            const Tensor &x = ctx.inputs[0], &out = ctx.outputs[0];
            CLEAVE_DISPATCH_ALL(x.dtype(), [&] {
              using In = T;
              CLEAVE_DISPATCH_ALL(out.dtype(), [&] {
                kernels::cpu::unary_loop(x.data<In>(), out.data<T>(), x.numel(),
                                         [](In v) { return static_cast<T>(v); });
              });
            });
          },
      .grad = [](const GradContext& ctx) -> std::vector<Tensor> {
        const Tensor& x = ctx.inputs[0];
        if (!is_floating(x.dtype())) return {Tensor()};
        return {ops::cast(ctx.output_grads[0], x.dtype())};
      },
  });
  // The outputs do not depend on the input's values: the gradient is zero (none flows back).
  const GradFn no_flow = [](const GradContext&) -> std::vector<Tensor> { return {Tensor()}; };
  r.add(OpDef{
      .name = "ZerosLike",
      .num_inputs = 1,
      .infer = infer_same_as_input0,
      .cpu_kernel = [](const KernelContext& ctx) { fill_kernel(ctx, 0.0); },
      .grad = no_flow,
  });
  r.add(OpDef{
      .name = "OnesLike",
      .num_inputs = 1,
      .infer = infer_same_as_input0,
      .cpu_kernel = [](const KernelContext& ctx) { fill_kernel(ctx, 1.0); },
      .grad = no_flow,
  });
  r.add(OpDef{
      .name = "Fill",
      .num_inputs = 0,
      .infer = [](const InferContext& ctx) -> std::vector<TensorMeta> {
        const Shape shape(ctx.attrs.get<std::vector<int64_t>>("shape", ctx.op.name));
        for (int64_t d = 0; d < shape.rank(); ++d) {
          CLEAVE_CHECK_ARG(shape[d] >= 0, "{}: shape {} has a negative dim {}; expected sizes >= 0",
                           ctx.op.name, shape.to_string(), shape[d]);
        }
        return {{shape, ctx.attrs.get<DType>("dtype", ctx.op.name)}};
      },
      .cpu_kernel =
          [](const KernelContext& ctx) {
            fill_kernel(ctx, ctx.attrs.get<double>("value", ctx.op.name));
          },
      .no_grad = "none, because it has no inputs: its output is made from attributes alone",
  });
}

}  // namespace

void register_elementwise_ops(Registry& r) {
  for (UnaryDef& def : unary_defs()) add_unary(r, std::move(def));
  add_unary_backward(r, "ReluGrad", UnaryGradOp::kReluFromX);
  add_unary_backward(r, "AbsGrad", UnaryGradOp::kAbsFromX);
  add_unary_backward(r, "GeLUGrad", UnaryGradOp::kGeluFromX);
  add_unary_backward(r, "ErfGrad", UnaryGradOp::kErfFromX);
  add_unary_backward(r, "SigmoidGrad", UnaryGradOp::kSigmoidFromY);
  add_unary_backward(r, "TanhGrad", UnaryGradOp::kTanhFromY);
  add_unary_backward(r, "SqrtGrad", UnaryGradOp::kSqrtFromY);
  add_unary_backward(r, "RsqrtGrad", UnaryGradOp::kRsqrtFromY);
  register_binary_ops(r);
  register_cast_and_fill_ops(r);
}

}  // namespace cleave::ir

namespace cleave::ops {

using ir::call1;
using ir::op_def;

// ---- unary ----

Tensor neg(const Tensor& x) {
  static const ir::OpDef& op = op_def("Neg");
  return call1(op, {x});
}
Tensor exp(const Tensor& x) {
  static const ir::OpDef& op = op_def("Exp");
  return call1(op, {x});
}
Tensor log(const Tensor& x) {
  static const ir::OpDef& op = op_def("Log");
  return call1(op, {x});
}
Tensor sqrt(const Tensor& x) {
  static const ir::OpDef& op = op_def("Sqrt");
  return call1(op, {x});
}
Tensor rsqrt(const Tensor& x) {
  static const ir::OpDef& op = op_def("Rsqrt");
  return call1(op, {x});
}
Tensor abs(const Tensor& x) {
  static const ir::OpDef& op = op_def("Abs");
  return call1(op, {x});
}
Tensor square(const Tensor& x) {
  static const ir::OpDef& op = op_def("Square");
  return call1(op, {x});
}
Tensor relu(const Tensor& x) {
  static const ir::OpDef& op = op_def("ReLU");
  return call1(op, {x});
}
Tensor gelu(const Tensor& x) {
  static const ir::OpDef& op = op_def("GeLU");
  return call1(op, {x});
}
Tensor sigmoid(const Tensor& x) {
  static const ir::OpDef& op = op_def("Sigmoid");
  return call1(op, {x});
}
Tensor tanh(const Tensor& x) {
  static const ir::OpDef& op = op_def("Tanh");
  return call1(op, {x});
}
Tensor erf(const Tensor& x) {
  static const ir::OpDef& op = op_def("Erf");
  return call1(op, {x});
}

// ---- binary ----

Tensor add(const Tensor& a, const Tensor& b) {
  static const ir::OpDef& op = op_def("Add");
  return call1(op, {a, b});
}
Tensor sub(const Tensor& a, const Tensor& b) {
  static const ir::OpDef& op = op_def("Sub");
  return call1(op, {a, b});
}
Tensor mul(const Tensor& a, const Tensor& b) {
  static const ir::OpDef& op = op_def("Mul");
  return call1(op, {a, b});
}
Tensor div(const Tensor& a, const Tensor& b) {
  static const ir::OpDef& op = op_def("Div");
  return call1(op, {a, b});
}
Tensor pow(const Tensor& a, const Tensor& b) {
  static const ir::OpDef& op = op_def("Pow");
  return call1(op, {a, b});
}
Tensor maximum(const Tensor& a, const Tensor& b) {
  static const ir::OpDef& op = op_def("Maximum");
  return call1(op, {a, b});
}
Tensor minimum(const Tensor& a, const Tensor& b) {
  static const ir::OpDef& op = op_def("Minimum");
  return call1(op, {a, b});
}

Tensor add(const Tensor& a, double b) { return add(a, Tensor::scalar(b, a.dtype())); }
Tensor sub(const Tensor& a, double b) { return sub(a, Tensor::scalar(b, a.dtype())); }
Tensor mul(const Tensor& a, double b) { return mul(a, Tensor::scalar(b, a.dtype())); }
Tensor div(const Tensor& a, double b) { return div(a, Tensor::scalar(b, a.dtype())); }
Tensor pow(const Tensor& a, double b) { return pow(a, Tensor::scalar(b, a.dtype())); }

// ---- Cast and fills ----

Tensor cast(const Tensor& x, DType dtype) {
  static const ir::OpDef& op = op_def("Cast");
  return call1(op, {x}, {{"dtype", dtype}});
}
Tensor zeros_like(const Tensor& x) {
  static const ir::OpDef& op = op_def("ZerosLike");
  return call1(op, {x});
}
Tensor ones_like(const Tensor& x) {
  static const ir::OpDef& op = op_def("OnesLike");
  return call1(op, {x});
}
Tensor fill(DType dtype, const Shape& shape, double value) {
  static const ir::OpDef& op = op_def("Fill");
  return call1(op, {}, {{"dtype", dtype}, {"shape", shape.dims()}, {"value", value}});
}

}  // namespace cleave::ops

namespace cleave {

Tensor operator+(const Tensor& a, const Tensor& b) { return ops::add(a, b); }
Tensor operator-(const Tensor& a, const Tensor& b) { return ops::sub(a, b); }
Tensor operator*(const Tensor& a, const Tensor& b) { return ops::mul(a, b); }
Tensor operator/(const Tensor& a, const Tensor& b) { return ops::div(a, b); }
Tensor operator-(const Tensor& a) { return ops::neg(a); }
Tensor operator+(const Tensor& a, double b) { return ops::add(a, b); }
Tensor operator-(const Tensor& a, double b) { return ops::sub(a, b); }
Tensor operator*(const Tensor& a, double b) { return ops::mul(a, b); }
Tensor operator/(const Tensor& a, double b) { return ops::div(a, b); }
Tensor operator*(double a, const Tensor& b) { return ops::mul(b, a); }
Tensor operator+(double a, const Tensor& b) { return ops::add(b, a); }
Tensor operator-(double a, const Tensor& b) { return ops::sub(Tensor::scalar(a, b.dtype()), b); }
Tensor operator/(double a, const Tensor& b) { return ops::div(Tensor::scalar(a, b.dtype()), b); }

}  // namespace cleave

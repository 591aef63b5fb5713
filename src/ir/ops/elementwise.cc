// Elementwise primitives: unary math, broadcasting binary arithmetic, comparisons, logic,
// Select, Cast and fills.
#include "cleave/ops/elementwise.h"

#include <cmath>

#include "cleave/ops/reduce.h"
#include "kernels/cpu/loops.h"
#include "op_helpers.h"

namespace cleave::ir {
namespace {

using kernels::cpu::binary_loop;
using kernels::cpu::unary_loop;

// Kernel for a binary arithmetic op applying `f` to numeric dtypes.
template <typename F>
KernelFn numeric_binary_kernel(F f) {
  return [f](const KernelContext& ctx) {
    const Tensor &a = ctx.inputs[0], &b = ctx.inputs[1], &out = ctx.outputs[0];
    CLEAVE_DISPATCH_NUMERIC(a.dtype(), [&] {
      binary_loop(a.data<T>(), a.shape(), b.data<T>(), b.shape(), out.data<T>(), out.shape(),
                  [f](T x, T y) { return static_cast<T>(f(x, y)); });
    });
  };
}

std::vector<TensorMeta> infer_numeric_binary(const InferContext& ctx) {
  expect_dtype(ctx, 0, {DType::kFloat32, DType::kFloat64, DType::kInt32, DType::kInt64});
  return infer_broadcast_binary(ctx);
}

}  // namespace

void register_elementwise_ops(Registry& r) {
  r.add(OpDef{
      .name = "Add",
      .num_inputs = 2,
      .infer = infer_numeric_binary,
      .cpu_kernel = numeric_binary_kernel([](auto x, auto y) { return x + y; }),
      .grad = [](const GradContext& ctx) -> std::vector<Tensor> {
        const Tensor& dy = ctx.output_grads[0];
        return {ops::sum_to(dy, ctx.inputs[0].shape()), ops::sum_to(dy, ctx.inputs[1].shape())};
      },
  });
  r.add(OpDef{
      .name = "Mul",
      .num_inputs = 2,
      .infer = infer_numeric_binary,
      .cpu_kernel = numeric_binary_kernel([](auto x, auto y) { return x * y; }),
      .grad = [](const GradContext& ctx) -> std::vector<Tensor> {
        const Tensor& dy = ctx.output_grads[0];
        const Tensor &a = ctx.inputs[0], &b = ctx.inputs[1];
        return {ctx.needs_input_grad[0] ? ops::sum_to(ops::mul(dy, b), a.shape()) : Tensor(),
                ctx.needs_input_grad[1] ? ops::sum_to(ops::mul(dy, a), b.shape()) : Tensor()};
      },
  });
  r.add(OpDef{
      .name = "Neg",
      .num_inputs = 1,
      .infer =
          [](const InferContext& ctx) {
            expect_dtype(ctx, 0, {DType::kFloat32, DType::kFloat64, DType::kInt32, DType::kInt64});
            return infer_same_as_input0(ctx);
          },
      .cpu_kernel =
          [](const KernelContext& ctx) {
            const Tensor &x = ctx.inputs[0], &out = ctx.outputs[0];
            CLEAVE_DISPATCH_NUMERIC(x.dtype(), [&] {
              unary_loop(x.data<T>(), out.data<T>(), x.numel(), [](T v) { return -v; });
            });
          },
      .grad = [](const GradContext& ctx) -> std::vector<Tensor> {
        return {ops::neg(ctx.output_grads[0])};
      },
  });
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
                unary_loop(x.data<In>(), out.data<T>(), x.numel(),
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
}

}  // namespace cleave::ir

namespace cleave::ops {

using ir::call1;
using ir::op_def;

Tensor cast(const Tensor& x, DType dtype) {
  static const ir::OpDef& op = op_def("Cast");
  return call1(op, {x}, {{"dtype", dtype}});
}

Tensor add(const Tensor& a, const Tensor& b) {
  static const ir::OpDef& op = op_def("Add");
  return call1(op, {a, b});
}
Tensor mul(const Tensor& a, const Tensor& b) {
  static const ir::OpDef& op = op_def("Mul");
  return call1(op, {a, b});
}
Tensor neg(const Tensor& x) {
  static const ir::OpDef& op = op_def("Neg");
  return call1(op, {x});
}
Tensor add(const Tensor& a, double b) { return add(a, Tensor::scalar(b, a.dtype())); }
Tensor mul(const Tensor& a, double b) { return mul(a, Tensor::scalar(b, a.dtype())); }

}  // namespace cleave::ops

namespace cleave {

Tensor operator+(const Tensor& a, const Tensor& b) { return ops::add(a, b); }
Tensor operator*(const Tensor& a, const Tensor& b) { return ops::mul(a, b); }
Tensor operator-(const Tensor& a) { return ops::neg(a); }
Tensor operator+(const Tensor& a, double b) { return ops::add(a, b); }
Tensor operator*(const Tensor& a, double b) { return ops::mul(a, b); }
Tensor operator*(double a, const Tensor& b) { return ops::mul(b, a); }

}  // namespace cleave

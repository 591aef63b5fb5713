// Comparison, logic and selection primitives: Equal, NotEqual, Greater, GreaterEqual, Less,
// LessEqual (Bool outputs), LogicalAnd, LogicalOr, LogicalNot (Bool in and out) and Select.
//
// Comparisons and logic have Bool outputs, which autograd never records (only floating outputs
// carry a gradient), so they need no gradient rule.
#include "kernels/cpu/compare.h"

#include "cleave/ops/elementwise.h"
#include "cleave/ops/reduce.h"
#include "op_helpers.h"

namespace cleave::ir {
namespace {

using kernels::cpu::CompareOp;
using kernels::cpu::LogicOp;

void expect_bool(const InferContext& ctx, int input) {
  const DType d = ctx.inputs[input].dtype;
  CLEAVE_CHECK_ARG(d == DType::kBool,
                   "{}: input {} has dtype {}; expected Bool (compare first, or use "
                   "ops::cast(x, DType::kBool))",
                   ctx.op.name, input, dtype_name(d));
}

std::vector<TensorMeta> infer_bool_broadcast(const InferContext& ctx) {
  return {{broadcast_shapes(ctx.inputs[0].shape, ctx.inputs[1].shape, ctx.op.name.c_str()),
           DType::kBool}};
}

void add_compare(Registry& r, const char* name, CompareOp op, bool ordering) {
  r.add(OpDef{
      .name = name,
      .num_inputs = 2,
      .infer = [ordering](const InferContext& ctx) -> std::vector<TensorMeta> {
        expect_same_dtype(ctx, 0, 1);
        if (ordering) {
          expect_dtype(ctx, 0, {DType::kFloat32, DType::kFloat64, DType::kInt32, DType::kInt64});
        }
        return infer_bool_broadcast(ctx);
      },
      .cpu_kernel =
          [op](const KernelContext& ctx) {
            kernels::cpu::compare(op, ctx.inputs[0], ctx.inputs[1], ctx.outputs[0]);
          },
      .no_grad = kNoGradBoolean,
  });
}

void add_logical(Registry& r, const char* name, LogicOp op) {
  r.add(OpDef{
      .name = name,
      .num_inputs = 2,
      .infer = [](const InferContext& ctx) -> std::vector<TensorMeta> {
        expect_bool(ctx, 0);
        expect_bool(ctx, 1);
        return infer_bool_broadcast(ctx);
      },
      .cpu_kernel =
          [op](const KernelContext& ctx) {
            kernels::cpu::logical(op, ctx.inputs[0], ctx.inputs[1], ctx.outputs[0]);
          },
      .no_grad = kNoGradBoolean,
  });
}

std::vector<TensorMeta> infer_select(const InferContext& ctx) {
  expect_bool(ctx, 0);
  expect_same_dtype(ctx, 1, 2);
  const Shape& c = ctx.inputs[0].shape;
  const Shape& a = ctx.inputs[1].shape;
  const Shape& b = ctx.inputs[2].shape;
  // Broadcast pairwise; report all three shapes when they do not fit together.
  const auto fits = [](const Shape& x, const Shape& y) {
    for (int64_t i = 1; i <= std::min(x.rank(), y.rank()); ++i) {
      const int64_t dx = x[x.rank() - i], dy = y[y.rank() - i];
      if (dx != dy && dx != 1 && dy != 1) return false;
    }
    return true;
  };
  CLEAVE_CHECK_ARG(fits(a, b) && fits(c, broadcast_shapes(a, b, "Select")),
                   "{}: shapes {} (condition), {} (input 1) and {} (input 2) cannot be broadcast "
                   "together; each dim (from the right) must be equal or 1",
                   ctx.op.name, c.to_string(), a.to_string(), b.to_string());
  return {{broadcast_shapes(c, broadcast_shapes(a, b, "Select"), "Select"), ctx.inputs[1].dtype}};
}

std::vector<Tensor> select_grad(const GradContext& ctx) {
  const Tensor &c = ctx.inputs[0], &a = ctx.inputs[1], &b = ctx.inputs[2];
  const Tensor& dy = ctx.output_grads[0];
  const Tensor zero = Tensor::scalar(0.0, dy.dtype());
  return {Tensor(),
          ctx.needs_input_grad[1] ? ops::sum_to(ops::select(c, dy, zero), a.shape()) : Tensor(),
          ctx.needs_input_grad[2] ? ops::sum_to(ops::select(c, zero, dy), b.shape()) : Tensor()};
}

}  // namespace

void register_compare_ops(Registry& r) {
  add_compare(r, "Equal", CompareOp::kEqual, /*ordering=*/false);
  add_compare(r, "NotEqual", CompareOp::kNotEqual, /*ordering=*/false);
  add_compare(r, "Greater", CompareOp::kGreater, /*ordering=*/true);
  add_compare(r, "GreaterEqual", CompareOp::kGreaterEqual, /*ordering=*/true);
  add_compare(r, "Less", CompareOp::kLess, /*ordering=*/true);
  add_compare(r, "LessEqual", CompareOp::kLessEqual, /*ordering=*/true);
  add_logical(r, "LogicalAnd", LogicOp::kAnd);
  add_logical(r, "LogicalOr", LogicOp::kOr);
  r.add(OpDef{
      .name = "LogicalNot",
      .num_inputs = 1,
      .infer = [](const InferContext& ctx) -> std::vector<TensorMeta> {
        expect_bool(ctx, 0);
        return {ctx.inputs[0]};
      },
      .cpu_kernel =
          [](const KernelContext& ctx) {
            kernels::cpu::logical_not(ctx.inputs[0], ctx.outputs[0]);
          },
      .no_grad = kNoGradBoolean,
  });
  r.add(OpDef{
      .name = "Select",
      .num_inputs = 3,
      .infer = infer_select,
      .cpu_kernel =
          [](const KernelContext& ctx) {
            kernels::cpu::select(ctx.inputs[0], ctx.inputs[1], ctx.inputs[2], ctx.outputs[0]);
          },
      .grad = select_grad,
  });
}

}  // namespace cleave::ir

namespace cleave::ops {

using ir::call1;
using ir::op_def;

Tensor equal(const Tensor& a, const Tensor& b) {
  static const ir::OpDef& op = op_def("Equal");
  return call1(op, {a, b});
}
Tensor not_equal(const Tensor& a, const Tensor& b) {
  static const ir::OpDef& op = op_def("NotEqual");
  return call1(op, {a, b});
}
Tensor greater(const Tensor& a, const Tensor& b) {
  static const ir::OpDef& op = op_def("Greater");
  return call1(op, {a, b});
}
Tensor greater_equal(const Tensor& a, const Tensor& b) {
  static const ir::OpDef& op = op_def("GreaterEqual");
  return call1(op, {a, b});
}
Tensor less(const Tensor& a, const Tensor& b) {
  static const ir::OpDef& op = op_def("Less");
  return call1(op, {a, b});
}
Tensor less_equal(const Tensor& a, const Tensor& b) {
  static const ir::OpDef& op = op_def("LessEqual");
  return call1(op, {a, b});
}
Tensor logical_and(const Tensor& a, const Tensor& b) {
  static const ir::OpDef& op = op_def("LogicalAnd");
  return call1(op, {a, b});
}
Tensor logical_or(const Tensor& a, const Tensor& b) {
  static const ir::OpDef& op = op_def("LogicalOr");
  return call1(op, {a, b});
}
Tensor logical_not(const Tensor& a) {
  static const ir::OpDef& op = op_def("LogicalNot");
  return call1(op, {a});
}
Tensor select(const Tensor& condition, const Tensor& a, const Tensor& b) {
  static const ir::OpDef& op = op_def("Select");
  return call1(op, {condition, a, b});
}

}  // namespace cleave::ops

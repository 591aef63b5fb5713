// Reductions over axes (ReduceSum, ReduceMean, ReduceMax, ReduceMin, ReduceProd), ArgMax and
// ArgMin, and sum_to (the broadcasting gradient helper).
//
// Attributes of the Reduce* primitives: "axis" (a list; negative counts from the end; empty
// reduces every axis, MindSpore's default) and "keep_dims" (reduced axes stay as size 1).
#include "cleave/ops/reduce.h"

#include <algorithm>
#include <limits>

#include "cleave/ops/elementwise.h"
#include "cleave/ops/shape.h"
#include "kernels/cpu/loops.h"
#include "kernels/cpu/reduce.h"
#include "op_helpers.h"

namespace cleave::ir {
namespace {

using kernels::cpu::ArgReduceOp;
using kernels::cpu::ReduceOp;

// The "axis" attribute resolved against `in`: ascending, non-negative, distinct; every axis
// when empty.
std::vector<int64_t> resolve_axes(const Shape& in, const Attrs& attrs, const std::string& op) {
  const int64_t rank = in.rank();
  const auto& given = attrs.get<std::vector<int64_t>>("axis", op);
  std::vector<int64_t> axes;
  if (given.empty()) {
    for (int64_t i = 0; i < rank; ++i) axes.push_back(i);
    return axes;
  }
  for (int64_t a : given) {
    CLEAVE_CHECK_ARG(a >= -rank && a < rank,
                     "{}: axis {} is out of range for input 0 of shape {} (rank {}); expected "
                     "axes in [{}, {}]",
                     op, a, in.to_string(), rank, -rank, rank - 1);
    const int64_t n = a < 0 ? a + rank : a;
    CLEAVE_CHECK_ARG(std::find(axes.begin(), axes.end(), n) == axes.end(),
                     "{}: axis {} is given twice in axis {} (input 0 has rank {}); each axis may "
                     "be reduced once",
                     op, n, Shape(given).to_string(), rank);
    axes.push_back(n);
  }
  std::sort(axes.begin(), axes.end());
  return axes;
}

bool contains(const std::vector<int64_t>& axes, int64_t d) {
  return std::find(axes.begin(), axes.end(), d) != axes.end();
}

// `in` with the reduced axes set to 1: the output shape under keep_dims.
Shape kept_shape(const Shape& in, const std::vector<int64_t>& axes) {
  std::vector<int64_t> dims = in.dims();
  for (int64_t a : axes) dims[static_cast<size_t>(a)] = 1;
  return Shape(std::move(dims));
}

int64_t reduced_count(const Shape& in, const std::vector<int64_t>& axes) {
  int64_t n = 1;
  for (int64_t a : axes) n *= in[a];
  return n;
}

enum class Domain { kNumeric, kFloating };

InferFn infer_reduce(Domain domain, bool needs_elements) {
  return [domain, needs_elements](const InferContext& ctx) -> std::vector<TensorMeta> {
    if (domain == Domain::kFloating) {
      expect_floating(ctx, 0);
    } else {
      expect_dtype(ctx, 0, {DType::kFloat32, DType::kFloat64, DType::kInt32, DType::kInt64});
    }
    const Shape& in = ctx.inputs[0].shape;
    const std::vector<int64_t> axes = resolve_axes(in, ctx.attrs, ctx.op.name);
    if (needs_elements) {
      for (int64_t a : axes) {
        CLEAVE_CHECK_ARG(in[a] > 0,
                         "{}: axis {} of input 0 (shape {}) is empty; the {} of no elements is "
                         "undefined",
                         ctx.op.name, a, in.to_string(),
                         ctx.op.name == "ReduceMax" ? "maximum" : "minimum");
      }
    }
    std::vector<int64_t> out;
    const bool keep = ctx.attrs.get_or("keep_dims", false);
    for (int64_t d = 0; d < in.rank(); ++d) {
      if (!contains(axes, d)) {
        out.push_back(in[d]);
      } else if (keep) {
        out.push_back(1);
      }
    }
    return {{Shape(std::move(out)), ctx.inputs[0].dtype}};
  };
}

KernelFn reduce_kernel(ReduceOp op) {
  return [op](const KernelContext& ctx) {
    const Tensor& x = ctx.inputs[0];
    kernels::cpu::reduce(op, x, resolve_axes(x.shape(), ctx.attrs, ctx.op.name), ctx.outputs[0]);
  };
}

void reduce_mean_kernel(const KernelContext& ctx) {
  const Tensor& x = ctx.inputs[0];
  const Tensor& out = ctx.outputs[0];
  const std::vector<int64_t> axes = resolve_axes(x.shape(), ctx.attrs, ctx.op.name);
  kernels::cpu::reduce(ReduceOp::kSum, x, axes, out);
  // The mean of no elements is 0 / 0 = NaN, as in NumPy and PyTorch.
  const double count = static_cast<double>(reduced_count(x.shape(), axes));
  CLEAVE_DISPATCH_FLOAT(out.dtype(), [&] {
    const T scale = count > 0 ? static_cast<T>(1.0 / count) : std::numeric_limits<T>::quiet_NaN();
    kernels::cpu::unary_loop(out.data<T>(), out.data<T>(), out.numel(),
                             [scale](T v) { return v * scale; });
  });
}

// The output gradient of a reduction with its reduced axes put back as size 1, so that it
// broadcasts against the input.
struct ReduceGradParts {
  std::vector<int64_t> axes;
  Shape kept;
  Tensor dy;  // reshaped to `kept`
};

ReduceGradParts reduce_grad_parts(const GradContext& ctx) {
  const Shape& in = ctx.inputs[0].shape();
  ReduceGradParts p;
  p.axes = resolve_axes(in, ctx.attrs, ctx.op.name);
  p.kept = kept_shape(in, p.axes);
  p.dy = ops::reshape(ctx.output_grads[0], p.kept);
  return p;
}

std::vector<Tensor> reduce_sum_grad(const GradContext& ctx) {
  const ReduceGradParts p = reduce_grad_parts(ctx);
  return {ops::broadcast_to(p.dy, ctx.inputs[0].shape())};
}

std::vector<Tensor> reduce_mean_grad(const GradContext& ctx) {
  const Shape& in = ctx.inputs[0].shape();
  const ReduceGradParts p = reduce_grad_parts(ctx);
  const double count = static_cast<double>(reduced_count(in, p.axes));
  return {ops::broadcast_to(ops::mul(p.dy, 1.0 / count), in)};
}

// NOTE [Gradient of ReduceMax and ReduceMin]
// The gradient goes to every position equal to the result, split evenly among them (so ties
// share it, and the shares sum to dy), like PyTorch's amax/amin: mask / count * dy.
std::vector<Tensor> reduce_extremum_grad(const GradContext& ctx) {
  const Tensor& x = ctx.inputs[0];
  const ReduceGradParts p = reduce_grad_parts(ctx);
  const Tensor y = ops::reshape(ctx.outputs[0], p.kept);
  const Tensor mask = ops::cast(ops::equal(x, y), x.dtype());
  const Tensor count = ops::reduce_sum(mask, {.axes = p.axes, .keep_dims = true});
  return {ops::mul(mask, ops::div(p.dy, count))};
}

// NOTE [Gradient of ReduceProd]
// d(prod)/dx_i is the product of the other elements of x_i's group. With no zero in the group
// that is y / x_i; dividing fails when the group holds zeros, so per group, with P the product
// of its nonzero elements and Z its number of zeros:
//   Z == 0: P / x_i;   Z == 1: P at the zero, 0 elsewhere;   Z >= 2: 0 everywhere.
std::vector<Tensor> reduce_prod_grad(const GradContext& ctx) {
  const Tensor& x = ctx.inputs[0];
  const ReduceGradParts p = reduce_grad_parts(ctx);
  const Tensor zero = Tensor::scalar(0.0, x.dtype());
  const Tensor one = Tensor::scalar(1.0, x.dtype());
  const ops::ReduceOptions keep{.axes = p.axes, .keep_dims = true};
  const Tensor is_zero = ops::equal(x, zero);
  const Tensor nonzero_x = ops::select(is_zero, one, x);
  const Tensor product = ops::reduce_prod(nonzero_x, keep);                   // P
  const Tensor zeros = ops::reduce_sum(ops::cast(is_zero, x.dtype()), keep);  // Z
  const Tensor one_zero_here = ops::logical_and(is_zero, ops::equal(zeros, one));
  const Tensor others = ops::select(ops::equal(zeros, zero), ops::div(product, nonzero_x),
                                    ops::select(one_zero_here, product, zero));
  return {ops::mul(others, p.dy)};
}

void register_arg_reduce(Registry& r, const char* name, ArgReduceOp op) {
  r.add(OpDef{
      .name = name,
      .num_inputs = 1,
      .infer = [](const InferContext& ctx) -> std::vector<TensorMeta> {
        expect_dtype(ctx, 0, {DType::kFloat32, DType::kFloat64, DType::kInt32, DType::kInt64});
        const Shape& in = ctx.inputs[0].shape;
        const int64_t rank = in.rank();
        const int64_t axis = ctx.attrs.get<int64_t>("axis", ctx.op.name);
        CLEAVE_CHECK_ARG(axis >= -rank && axis < rank,
                         "{}: axis {} is out of range for input 0 of shape {} (rank {}); expected "
                         "an axis in [{}, {}]",
                         ctx.op.name, axis, in.to_string(), rank, -rank, rank - 1);
        const int64_t a = axis < 0 ? axis + rank : axis;
        CLEAVE_CHECK_ARG(in[a] > 0,
                         "{}: axis {} of input 0 (shape {}) is empty; there is no element to "
                         "take the index of",
                         ctx.op.name, a, in.to_string());
        std::vector<int64_t> out = in.dims();
        out.erase(out.begin() + a);
        return {{Shape(std::move(out)), DType::kInt32}};
      },
      .cpu_kernel =
          [op](const KernelContext& ctx) {
            const Tensor& x = ctx.inputs[0];
            const int64_t axis = ctx.attrs.get<int64_t>("axis");
            kernels::cpu::arg_reduce(op, x, axis < 0 ? axis + x.rank() : axis, ctx.outputs[0]);
          },
      .no_grad = kNoGradIndex,
  });
}

}  // namespace

void register_reduce_ops(Registry& r) {
  r.add(OpDef{
      .name = "ReduceSum",
      .num_inputs = 1,
      .infer = infer_reduce(Domain::kNumeric, /*needs_elements=*/false),
      .cpu_kernel = reduce_kernel(ReduceOp::kSum),
      .grad = reduce_sum_grad,
  });
  r.add(OpDef{
      .name = "ReduceMean",
      .num_inputs = 1,
      .infer = infer_reduce(Domain::kFloating, /*needs_elements=*/false),
      .cpu_kernel = reduce_mean_kernel,
      .grad = reduce_mean_grad,
  });
  r.add(OpDef{
      .name = "ReduceMax",
      .num_inputs = 1,
      .infer = infer_reduce(Domain::kNumeric, /*needs_elements=*/true),
      .cpu_kernel = reduce_kernel(ReduceOp::kMax),
      .grad = reduce_extremum_grad,
  });
  r.add(OpDef{
      .name = "ReduceMin",
      .num_inputs = 1,
      .infer = infer_reduce(Domain::kNumeric, /*needs_elements=*/true),
      .cpu_kernel = reduce_kernel(ReduceOp::kMin),
      .grad = reduce_extremum_grad,
  });
  r.add(OpDef{
      .name = "ReduceProd",
      .num_inputs = 1,
      .infer = infer_reduce(Domain::kNumeric, /*needs_elements=*/false),
      .cpu_kernel = reduce_kernel(ReduceOp::kProd),
      .grad = reduce_prod_grad,
  });
  register_arg_reduce(r, "ArgMax", ArgReduceOp::kArgMax);
  register_arg_reduce(r, "ArgMin", ArgReduceOp::kArgMin);
}

}  // namespace cleave::ir

namespace cleave::ops {

namespace {

Tensor call_reduce(const ir::OpDef& op, const Tensor& x, const ReduceOptions& options) {
  return ir::call1(op, {x}, {{"axis", options.axes}, {"keep_dims", options.keep_dims}});
}

}  // namespace

Tensor reduce_sum(const Tensor& x, const ReduceOptions& options) {
  static const ir::OpDef& op = ir::op_def("ReduceSum");
  return call_reduce(op, x, options);
}
Tensor reduce_mean(const Tensor& x, const ReduceOptions& options) {
  static const ir::OpDef& op = ir::op_def("ReduceMean");
  return call_reduce(op, x, options);
}
Tensor reduce_max(const Tensor& x, const ReduceOptions& options) {
  static const ir::OpDef& op = ir::op_def("ReduceMax");
  return call_reduce(op, x, options);
}
Tensor reduce_min(const Tensor& x, const ReduceOptions& options) {
  static const ir::OpDef& op = ir::op_def("ReduceMin");
  return call_reduce(op, x, options);
}
Tensor reduce_prod(const Tensor& x, const ReduceOptions& options) {
  static const ir::OpDef& op = ir::op_def("ReduceProd");
  return call_reduce(op, x, options);
}

Tensor argmax(const Tensor& x, int64_t axis) {
  static const ir::OpDef& op = ir::op_def("ArgMax");
  return ir::call1(op, {x}, {{"axis", axis}});
}
Tensor argmin(const Tensor& x, int64_t axis) {
  static const ir::OpDef& op = ir::op_def("ArgMin");
  return ir::call1(op, {x}, {{"axis", axis}});
}

Tensor sum_to(const Tensor& x, const Shape& shape) {
  if (x.shape() == shape) return x;
  const int64_t lead = x.rank() - shape.rank();
  CLEAVE_CHECK_ARG(lead >= 0, "sum_to: cannot sum shape {} to the larger rank of {}",
                   x.shape().to_string(), shape.to_string());
  std::vector<int64_t> axes;
  for (int64_t d = 0; d < x.rank(); ++d) {
    const bool broadcast = d < lead || (shape[d - lead] == 1 && x.shape()[d] != 1);
    if (!broadcast) {
      CLEAVE_CHECK_ARG(shape[d - lead] == x.shape()[d],
                       "sum_to: cannot sum shape {} to {}: target dim {} is {} but the source "
                       "has {}; it must be equal or 1",
                       x.shape().to_string(), shape.to_string(), d - lead, shape[d - lead],
                       x.shape()[d]);
    }
    if (broadcast) axes.push_back(d);
  }
  // Summing without keep_dims then reshaping is one kernel pass plus a view.
  Tensor summed = axes.empty() ? x : reduce_sum(x, {.axes = axes, .keep_dims = false});
  return reshape(summed, shape);
}

}  // namespace cleave::ops

// Reductions over axes, ArgMax/ArgMin, and sum_to (the broadcasting gradient helper).
#include "cleave/ops/reduce.h"

#include <algorithm>

#include "cleave/ops/shape.h"
#include "op_helpers.h"

namespace cleave::ir {
namespace {

// NOTE [Reduction as outer x reduced x inner]
// Reducing a contiguous tensor over a set of axes is done as a sequence of single-axis
// reductions; each views the tensor as (outer, r, inner) with r the reduced axis, which every
// kernel below walks with the inner dim contiguous (vectorised).

std::vector<int64_t> normalized_axes(const InferContext& ctx) {
  const int64_t rank = ctx.inputs[0].shape.rank();
  const auto& given = ctx.attrs.get<std::vector<int64_t>>("axis", ctx.op.name);
  std::vector<int64_t> axes;
  if (given.empty()) {
    for (int64_t i = 0; i < rank; ++i) axes.push_back(i);
    return axes;
  }
  for (int64_t a : given) {
    CLEAVE_CHECK_ARG(a >= -rank && a < rank,
                     "{}: axis {} is out of range for input 0 of shape {}; expected axes in "
                     "[{}, {}]",
                     ctx.op.name, a, ctx.inputs[0].shape.to_string(), -rank, rank - 1);
    const int64_t n = a < 0 ? a + rank : a;
    CLEAVE_CHECK_ARG(std::find(axes.begin(), axes.end(), n) == axes.end(),
                     "{}: axis {} is given twice", ctx.op.name, n);
    axes.push_back(n);
  }
  std::sort(axes.begin(), axes.end());
  return axes;
}

std::vector<TensorMeta> infer_reduce(const InferContext& ctx) {
  expect_dtype(ctx, 0, {DType::kFloat32, DType::kFloat64, DType::kInt32, DType::kInt64});
  const std::vector<int64_t> axes = normalized_axes(ctx);
  const bool keep = ctx.attrs.get_or("keep_dims", false);
  const Shape& in = ctx.inputs[0].shape;
  std::vector<int64_t> out;
  for (int64_t d = 0; d < in.rank(); ++d) {
    const bool reduced = std::find(axes.begin(), axes.end(), d) != axes.end();
    if (!reduced) {
      out.push_back(in[d]);
    } else if (keep) {
      out.push_back(1);
    }
  }
  return {{Shape(out), ctx.inputs[0].dtype}};
}

template <typename T>
void sum_axis(const T* in, T* out, int64_t outer, int64_t r, int64_t inner) {
#pragma omp parallel for if (outer * r * inner > (1 << 15))
  for (int64_t o = 0; o < outer; ++o) {
    T* po = out + o * inner;
    std::fill(po, po + inner, T(0));
    for (int64_t k = 0; k < r; ++k) {
      const T* pi = in + (o * r + k) * inner;
#pragma omp simd
      for (int64_t i = 0; i < inner; ++i) po[i] += pi[i];
    }
  }
}

void reduce_sum_kernel(const KernelContext& ctx) {
  const Tensor& x = ctx.inputs[0];
  const Tensor& out = ctx.outputs[0];
  std::vector<int64_t> axes = normalized_axes(
      InferContext{ctx.op, ctx.attrs, std::vector<TensorMeta>{{x.shape(), x.dtype()}}});
  CLEAVE_DISPATCH_NUMERIC(x.dtype(), [&] {
    // Reduce the axes from last to first so earlier axis indices stay valid.
    Tensor cur = x;
    std::vector<int64_t> dims = x.shape().dims();
    for (auto it = axes.rbegin(); it != axes.rend(); ++it) {
      const int64_t a = *it;
      int64_t outer = 1, inner = 1;
      for (int64_t d = 0; d < a; ++d) outer *= dims[d];
      for (size_t d = a + 1; d < dims.size(); ++d) inner *= dims[d];
      const int64_t r = dims[a];
      dims.erase(dims.begin() + a);
      Tensor next = Tensor::empty(Shape(dims), x.dtype());
      sum_axis(cur.data<T>(), next.data<T>(), outer, r, inner);
      cur = next;
    }
    std::copy(cur.data<T>(), cur.data<T>() + cur.numel(), out.data<T>());
  });
}

}  // namespace

void register_reduce_ops(Registry& r) {
  r.add(OpDef{
      .name = "ReduceSum",
      .num_inputs = 1,
      .infer = infer_reduce,
      .cpu_kernel = reduce_sum_kernel,
      .grad = [](const GradContext& ctx) -> std::vector<Tensor> {
        // Put the reduced axes back as size 1, then broadcast.
        const Shape& in = ctx.inputs[0].shape();
        std::vector<int64_t> kept = in.dims();
        const auto& axes = ctx.attrs.get<std::vector<int64_t>>("axis");
        for (int64_t d = 0; d < in.rank(); ++d) {
          bool reduced = axes.empty();
          for (int64_t a : axes) reduced = reduced || (a < 0 ? a + in.rank() : a) == d;
          if (reduced) kept[d] = 1;
        }
        return {ops::broadcast_to(ops::reshape(ctx.output_grads[0], Shape(kept)), in)};
      },
  });
}

}  // namespace cleave::ir

namespace cleave::ops {

Tensor reduce_sum(const Tensor& x, const ReduceOptions& options) {
  static const ir::OpDef& op = ir::op_def("ReduceSum");
  return ir::call1(op, {x}, {{"axis", options.axes}, {"keep_dims", options.keep_dims}});
}

Tensor sum_to(const Tensor& x, const Shape& shape) {
  if (x.shape() == shape) return x;
  const int64_t lead = x.rank() - shape.rank();
  CLEAVE_CHECK_ARG(lead >= 0, "sum_to: cannot sum shape {} to the larger rank of {}",
                   x.shape().to_string(), shape.to_string());
  std::vector<int64_t> axes;
  for (int64_t d = 0; d < x.rank(); ++d) {
    if (d < lead || (shape[d - lead] == 1 && x.shape()[d] != 1)) axes.push_back(d);
  }
  Tensor summed = axes.empty() ? x : reduce_sum(x, {.axes = axes, .keep_dims = true});
  return reshape(summed, shape);
}

}  // namespace cleave::ops

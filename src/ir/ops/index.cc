// Primitives driven by integer index tensors: Gather, UnsortedSegmentSum (its gradient, and a
// scatter-add in its own right) and OneHot.
#include "kernels/cpu/index.h"

#include <algorithm>
#include <cstring>

#include "cleave/ops/shape.h"
#include "op_helpers.h"
#include "shape_helpers.h"

namespace cleave::ir {
namespace {

constexpr std::initializer_list<DType> kIndexDTypes = {DType::kInt32, DType::kInt64};

// Product of dims [from, to) of `s`.
int64_t span_numel(const Shape& s, int64_t from, int64_t to) {
  int64_t n = 1;
  for (int64_t d = from; d < to; ++d) n *= s[d];
  return n;
}

// Throws Error naming the first index of `indices` outside [0, limit). `what` describes what
// the indices address, for the message.
template <typename Index>
void check_indices(const OpDef& op, const Index* indices, int64_t count, int64_t limit,
                   const std::string& what) {
  const auto bad = std::find_if(indices, indices + count, [limit](Index v) {
    return v < 0 || static_cast<int64_t>(v) >= limit;
  });
  if (bad == indices + count) return;
  CLEAVE_FAIL(
      "{}: index {} at flat position {} of input 1 is out of range for {}; expected "
      "indices in [0, {})",
      op.name, static_cast<int64_t>(*bad), bad - indices, what, limit);
}

// ---- Gather ----

std::vector<TensorMeta> infer_gather(const InferContext& ctx) {
  expect_min_rank(ctx, 0, 1);
  expect_dtype(ctx, 1, kIndexDTypes);
  const Shape& params = ctx.inputs[0].shape;
  const Shape& indices = ctx.inputs[1].shape;
  const int64_t axis =
      checked_axis(ctx, ctx.attrs.get<int64_t>("axis", ctx.op.name), params.rank());
  std::vector<int64_t> out(params.dims().begin(), params.dims().begin() + axis);
  out.insert(out.end(), indices.dims().begin(), indices.dims().end());
  out.insert(out.end(), params.dims().begin() + axis + 1, params.dims().end());
  return {{Shape(out), ctx.inputs[0].dtype}};
}

void gather_kernel(const KernelContext& ctx) {
  const Tensor &params = ctx.inputs[0], &indices = ctx.inputs[1];
  const Shape& ps = params.shape();
  const int64_t axis = normalize_axis(ctx.attrs.get<int64_t>("axis"), ps.rank(), "Gather");
  const int64_t outer = span_numel(ps, 0, axis);
  const int64_t rows = ps[axis];
  const size_t row_bytes =
      static_cast<size_t>(span_numel(ps, axis + 1, ps.rank())) * dtype_size(params.dtype());
  auto run = [&]<typename Index>() {
    const Index* idx = indices.data<Index>();
    check_indices(ctx.op, idx, indices.numel(), rows,
                  fmt::format("axis {} of input 0 (shape {})", axis, ps.to_string()));
    kernels::cpu::gather_rows(params.raw_data(), outer, rows, row_bytes, idx, indices.numel(),
                              ctx.outputs[0].raw_data());
  };
  if (indices.dtype() == DType::kInt32) {
    run.template operator()<int32_t>();
  } else {
    run.template operator()<int64_t>();
  }
}

// NOTE [Gather gradient]
// dy has shape params[:axis] + indices.shape + params[axis+1:]. Row k of the gathered axis came
// from params row indices[k], so dparams is a scatter-add of dy's rows into zeros, which is
// UnsortedSegmentSum with the indices as segment ids; repeated indices accumulate. That op works
// on leading dims, so for axis > 0 dy's index dims are first moved to the front and the result's
// first dim moved back to `axis`.
std::vector<Tensor> gather_grad(const GradContext& ctx) {
  if (!ctx.needs_input_grad[0]) return {Tensor(), Tensor()};
  const Tensor &params = ctx.inputs[0], &indices = ctx.inputs[1];
  const int64_t rank = params.rank();
  const int64_t axis = normalize_axis(ctx.attrs.get<int64_t>("axis"), rank, "Gather");
  const int64_t k = indices.rank();
  Tensor dy = ctx.output_grads[0];
  if (axis == 0) return {ops::unsorted_segment_sum(dy, indices, params.shape()[0]), Tensor()};
  // dy dims: [0, axis) params-front, [axis, axis + k) index dims, [axis + k, ...) params-back.
  std::vector<int64_t> to_front;
  for (int64_t d = axis; d < axis + k; ++d) to_front.push_back(d);
  for (int64_t d = 0; d < axis; ++d) to_front.push_back(d);
  for (int64_t d = axis + k; d < dy.rank(); ++d) to_front.push_back(d);
  if (k > 0) dy = ops::transpose(dy, to_front);
  // Summed: (params[axis],) + params[:axis] + params[axis+1:]; move dim 0 back to `axis`.
  const Tensor summed = ops::unsorted_segment_sum(dy, indices, params.shape()[axis]);
  std::vector<int64_t> back;
  for (int64_t d = 1; d <= axis; ++d) back.push_back(d);
  back.push_back(0);
  for (int64_t d = axis + 1; d < rank; ++d) back.push_back(d);
  return {ops::transpose(summed, back), Tensor()};
}

// ---- UnsortedSegmentSum ----

std::vector<TensorMeta> infer_segment_sum(const InferContext& ctx) {
  expect_dtype(ctx, 0, {DType::kFloat32, DType::kFloat64, DType::kInt32, DType::kInt64});
  expect_dtype(ctx, 1, kIndexDTypes);
  const Shape& x = ctx.inputs[0].shape;
  const Shape& ids = ctx.inputs[1].shape;
  const bool leading =
      ids.rank() <= x.rank() && std::equal(ids.dims().begin(), ids.dims().end(), x.dims().begin());
  CLEAVE_CHECK_ARG(leading,
                   "{}: input 1 (segment ids) has shape {} but input 0 has shape {}; expected "
                   "input 0's leading dims to equal {}",
                   ctx.op.name, ids.to_string(), x.to_string(), ids.to_string());
  const int64_t num = ctx.attrs.get<int64_t>("num_segments", ctx.op.name);
  CLEAVE_CHECK_ARG(num >= 0, "{}: num_segments is {}; expected num_segments >= 0", ctx.op.name,
                   num);
  std::vector<int64_t> out{num};
  out.insert(out.end(), x.dims().begin() + ids.rank(), x.dims().end());
  return {{Shape(out), ctx.inputs[0].dtype}};
}

void segment_sum_kernel(const KernelContext& ctx) {
  const Tensor &x = ctx.inputs[0], &ids = ctx.inputs[1], &out = ctx.outputs[0];
  const int64_t n = ids.numel();
  const int64_t inner = span_numel(x.shape(), ids.rank(), x.rank());
  const int64_t num = out.shape()[0];
  std::memset(out.raw_data(), 0, out.nbytes());
  CLEAVE_DISPATCH_NUMERIC(x.dtype(), [&] {
    auto run = [&]<typename Index>() {
      const Index* p = ids.data<Index>();
      check_indices(ctx.op, p, n, num, fmt::format("num_segments {}", num));
      kernels::cpu::segment_sum(x.data<T>(), n, inner, p, out.data<T>());
    };
    if (ids.dtype() == DType::kInt32) {
      run.template operator()<int32_t>();
    } else {
      run.template operator()<int64_t>();
    }
  });
}

// ---- OneHot ----

int64_t one_hot_axis(const InferContext& ctx) {
  const int64_t rank = ctx.inputs[0].shape.rank();
  const int64_t axis = ctx.attrs.get<int64_t>("axis", ctx.op.name);
  CLEAVE_CHECK_ARG(axis >= -1 && axis <= rank,
                   "{}: axis {} is out of range for input 0 of shape {}; expected -1 (last) or "
                   "an axis in [0, {}]",
                   ctx.op.name, axis, ctx.inputs[0].shape.to_string(), rank);
  return axis == -1 ? rank : axis;
}

std::vector<TensorMeta> infer_one_hot(const InferContext& ctx) {
  expect_dtype(ctx, 0, kIndexDTypes);
  const int64_t depth = ctx.attrs.get<int64_t>("depth", ctx.op.name);
  CLEAVE_CHECK_ARG(depth > 0, "{}: depth is {}; expected depth > 0", ctx.op.name, depth);
  std::vector<int64_t> out = ctx.inputs[0].shape.dims();
  out.insert(out.begin() + one_hot_axis(ctx), depth);
  return {{Shape(out), ctx.attrs.get<DType>("dtype", ctx.op.name)}};
}

void one_hot_kernel(const KernelContext& ctx) {
  const Tensor &indices = ctx.inputs[0], &out = ctx.outputs[0];
  const Shape& s = indices.shape();
  const int64_t axis =
      one_hot_axis(InferContext{ctx.op, ctx.attrs, std::vector<TensorMeta>{{s, indices.dtype()}}});
  const int64_t outer = span_numel(s, 0, axis);
  const int64_t inner = span_numel(s, axis, s.rank());
  const int64_t depth = ctx.attrs.get<int64_t>("depth");
  const double on = ctx.attrs.get<double>("on_value");
  const double off = ctx.attrs.get<double>("off_value");
  CLEAVE_DISPATCH_ALL(out.dtype(), [&] {
    if (indices.dtype() == DType::kInt32) {
      kernels::cpu::one_hot(indices.data<int32_t>(), outer, inner, depth, static_cast<T>(on),
                            static_cast<T>(off), out.data<T>());
    } else {
      kernels::cpu::one_hot(indices.data<int64_t>(), outer, inner, depth, static_cast<T>(on),
                            static_cast<T>(off), out.data<T>());
    }
  });
}

}  // namespace

void register_index_ops(Registry& r) {
  r.add(OpDef{
      .name = "Gather",
      .num_inputs = 2,
      .infer = infer_gather,
      .cpu_kernel = gather_kernel,
      .grad = gather_grad,
  });
  r.add(OpDef{
      .name = "UnsortedSegmentSum",
      .num_inputs = 2,
      .infer = infer_segment_sum,
      .cpu_kernel = segment_sum_kernel,
      .grad = [](const GradContext& ctx) -> std::vector<Tensor> {
        // Output row s is the sum of the x rows with id s, so each x row's gradient is dy[id].
        return {ops::gather(ctx.output_grads[0], ctx.inputs[1], 0), Tensor()};
      },
  });
  r.add(OpDef{
      .name = "OneHot",
      .num_inputs = 1,
      .infer = infer_one_hot,
      .cpu_kernel = one_hot_kernel,
      // The output is piecewise constant in the (integer) indices: no gradient flows.
      .grad = [](const GradContext&) -> std::vector<Tensor> { return {Tensor()}; },
  });
}

}  // namespace cleave::ir

namespace cleave::ops {

Tensor gather(const Tensor& params, const Tensor& indices, int64_t axis) {
  static const ir::OpDef& op = ir::op_def("Gather");
  return ir::call1(op, {params, indices}, {{"axis", axis}});
}

Tensor unsorted_segment_sum(const Tensor& x, const Tensor& segment_ids, int64_t num_segments) {
  static const ir::OpDef& op = ir::op_def("UnsortedSegmentSum");
  return ir::call1(op, {x, segment_ids}, {{"num_segments", num_segments}});
}

Tensor one_hot(const Tensor& indices, const OneHotOptions& options) {
  static const ir::OpDef& op = ir::op_def("OneHot");
  return ir::call1(op, {indices},
                   {{"depth", options.depth},
                    {"on_value", options.on_value},
                    {"off_value", options.off_value},
                    {"axis", options.axis},
                    {"dtype", options.dtype}});
}

}  // namespace cleave::ops

// Matrix products: MatMul, BatchMatMul (with transposes and broadcast batch dimensions) and
// BiasAdd.
#include "kernels/cpu/matmul.h"

#include "cleave/ops/nn.h"
#include "cleave/ops/reduce.h"
#include "kernels/cpu/loops.h"
#include "op_helpers.h"

namespace cleave::ir {
namespace {

// ---- MatMul, BatchMatMul ----

struct Transposes {
  bool a = false;
  bool b = false;
};

Transposes transposes(const Attrs& attrs) {
  return {attrs.get_or("transpose_a", false), attrs.get_or("transpose_b", false)};
}

// The reduction dim of each operand, as an index into its last two dims (0 or 1).
int64_t reduction_dim_a(const Transposes& t) { return t.a ? 0 : 1; }
int64_t reduction_dim_b(const Transposes& t) { return t.b ? 1 : 0; }

// The (M, K, N) of the last two dims of a and b, checking that the K's agree.
struct MatrixDims {
  int64_t m, k, n;
};

MatrixDims matrix_dims(const InferContext& ctx) {
  const Shape& a = ctx.inputs[0].shape;
  const Shape& b = ctx.inputs[1].shape;
  const Transposes t = transposes(ctx.attrs);
  const int64_t ra = a.rank() - 2, rb = b.rank() - 2;  // first matrix dim
  const int64_t ka_dim = ra + reduction_dim_a(t), kb_dim = rb + reduction_dim_b(t);
  const int64_t k = a[ka_dim];
  CLEAVE_CHECK_ARG(b[kb_dim] == k,
                   "{}: input 1 has shape {}; expected dim {} to be {} (input 0 dim {}, the "
                   "reduction dim; input 0 has shape {}, transpose_a={}, transpose_b={})",
                   ctx.op.name, b.to_string(), kb_dim, k, ka_dim, a.to_string(), t.a, t.b);
  return {.m = a[ra + 1 - reduction_dim_a(t)], .k = k, .n = b[rb + 1 - reduction_dim_b(t)]};
}

std::vector<TensorMeta> infer_matmul(const InferContext& ctx) {
  expect_rank(ctx, 0, 2);
  expect_rank(ctx, 1, 2);
  expect_float_pair(ctx);
  const MatrixDims d = matrix_dims(ctx);
  return {{Shape{d.m, d.n}, ctx.inputs[0].dtype}};
}

// Batch dims of a shape, left-padded with 1 to `rank` dims.
std::vector<int64_t> padded_batch(const Shape& s, int64_t rank) {
  std::vector<int64_t> batch(static_cast<size_t>(rank - (s.rank() - 2)), 1);
  batch.insert(batch.end(), s.dims().begin(), s.dims().end() - 2);
  return batch;
}

std::vector<TensorMeta> infer_batch_matmul(const InferContext& ctx) {
  expect_min_rank(ctx, 0, 2);
  expect_min_rank(ctx, 1, 2);
  expect_float_pair(ctx);
  const Shape& a = ctx.inputs[0].shape;
  const Shape& b = ctx.inputs[1].shape;
  const MatrixDims d = matrix_dims(ctx);
  const int64_t rank = std::max(a.rank(), b.rank()) - 2;
  const std::vector<int64_t> ba = padded_batch(a, rank), bb = padded_batch(b, rank);
  std::vector<int64_t> out;
  for (size_t i = 0; i < ba.size(); ++i) {
    CLEAVE_CHECK_ARG(ba[i] == bb[i] || ba[i] == 1 || bb[i] == 1,
                     "{}: the batch dims of input 0 (shape {}) and input 1 (shape {}) cannot be "
                     "broadcast: batch dim {} (from the left of the broadcast batch) is {} and {}; "
                     "they must be equal or one of them 1",
                     ctx.op.name, a.to_string(), b.to_string(), i, ba[i], bb[i]);
    out.push_back(ba[i] == 1 ? bb[i] : ba[i]);
  }
  out.push_back(d.m);
  out.push_back(d.n);
  return {{Shape(out), ctx.inputs[0].dtype}};
}

void matmul_kernel(const KernelContext& ctx) {
  const Tensor &a = ctx.inputs[0], &b = ctx.inputs[1], &c = ctx.outputs[0];
  const Transposes t = transposes(ctx.attrs);
  const int64_t rank = c.rank() - 2;
  kernels::cpu::MatMulShape s{
      .m = c.dim(-2),
      .n = c.dim(-1),
      .k = a.dim(t.a ? -2 : -1),
      .transpose_a = t.a,
      .transpose_b = t.b,
      .batch_a = padded_batch(a.shape(), rank),
      .batch_b = padded_batch(b.shape(), rank),
      .batch_c = std::vector<int64_t>(c.shape().dims().begin(), c.shape().dims().end() - 2)};
  CLEAVE_DISPATCH_FLOAT(a.dtype(),
                        [&] { kernels::cpu::matmul(a.data<T>(), b.data<T>(), c.data<T>(), s); });
}

// NOTE [MatMul gradients]
// With op(X) = X or Xᵀ and y = op(A)·op(B), the gradients of the stored A and B are themselves
// products of dy with the other operand, only the transposes differ:
//   ta tb | dA                 | dB
//   0  0  | dy · Bᵀ            | Aᵀ · dy
//   1  0  | B · dyᵀ            | A · dy
//   0  1  | dy · B             | dyᵀ · A
//   1  1  | Bᵀ · dyᵀ           | dyᵀ · Aᵀ
// Batched products give gradients with the output's batch dims; sum_to folds broadcast ones back.
template <typename Product>
std::vector<Tensor> matmul_grads(const GradContext& ctx, Product product) {
  const Tensor &a = ctx.inputs[0], &b = ctx.inputs[1], &dy = ctx.output_grads[0];
  const Transposes t = transposes(ctx.attrs);
  Tensor da, db;
  if (ctx.needs_input_grad[0]) {
    da = t.a ? product(b, dy, ops::MatMulOptions{.transpose_a = t.b, .transpose_b = true})
             : product(dy, b, ops::MatMulOptions{.transpose_a = false, .transpose_b = !t.b});
    da = ops::sum_to(da, a.shape());
  }
  if (ctx.needs_input_grad[1]) {
    db = t.b ? product(dy, a, ops::MatMulOptions{.transpose_a = true, .transpose_b = t.a})
             : product(a, dy, ops::MatMulOptions{.transpose_a = !t.a, .transpose_b = false});
    db = ops::sum_to(db, b.shape());
  }
  return {da, db};
}

// ---- BiasAdd ----

std::vector<TensorMeta> infer_bias_add(const InferContext& ctx) {
  expect_min_rank(ctx, 0, 2);
  expect_rank(ctx, 1, 1);
  expect_float_pair(ctx);
  const Shape& x = ctx.inputs[0].shape;
  const Shape& bias = ctx.inputs[1].shape;
  CLEAVE_CHECK_ARG(bias[0] == x[1],
                   "{}: input 1 (bias) has shape {}; expected ({}), the size of input 0 dim 1 (the "
                   "channel dim) of shape {}",
                   ctx.op.name, bias.to_string(), x[1], x.to_string());
  return {ctx.inputs[0]};
}

void bias_add_kernel(const KernelContext& ctx) {
  const Tensor &x = ctx.inputs[0], &bias = ctx.inputs[1], &y = ctx.outputs[0];
  // The bias as (C, 1, ..., 1) broadcasts along dim 1 of x.
  std::vector<int64_t> bias_dims(static_cast<size_t>(x.rank() - 1), 1);
  bias_dims[0] = bias.numel();
  CLEAVE_DISPATCH_FLOAT(x.dtype(), [&] {
    kernels::cpu::binary_loop(x.data<T>(), x.shape(), bias.data<T>(), Shape(bias_dims), y.data<T>(),
                              y.shape(), [](T a, T b) { return a + b; });
  });
}

}  // namespace

void register_matmul_ops(Registry& r) {
  r.add(OpDef{
      .name = "MatMul",
      .num_inputs = 2,
      .infer = infer_matmul,
      .cpu_kernel = matmul_kernel,
      .grad =
          [](const GradContext& ctx) {
            return matmul_grads(ctx,
                                [](const Tensor& x, const Tensor& y, const ops::MatMulOptions& o) {
                                  return ops::matmul(x, y, o);
                                });
          },
  });
  r.add(OpDef{
      .name = "BatchMatMul",
      .num_inputs = 2,
      .infer = infer_batch_matmul,
      .cpu_kernel = matmul_kernel,
      .grad =
          [](const GradContext& ctx) {
            return matmul_grads(ctx,
                                [](const Tensor& x, const Tensor& y, const ops::MatMulOptions& o) {
                                  return ops::batch_matmul(x, y, o);
                                });
          },
  });
  r.add(OpDef{
      .name = "BiasAdd",
      .num_inputs = 2,
      .infer = infer_bias_add,
      .cpu_kernel = bias_add_kernel,
      .grad = [](const GradContext& ctx) -> std::vector<Tensor> {
        const Tensor& dy = ctx.output_grads[0];
        Tensor dbias;
        if (ctx.needs_input_grad[1]) {
          std::vector<int64_t> axes{0};
          for (int64_t d = 2; d < dy.rank(); ++d) axes.push_back(d);
          dbias = ops::reduce_sum(dy, {.axes = axes});
        }
        return {dy, dbias};
      },
  });
}

}  // namespace cleave::ir

namespace cleave::ops {

using ir::call1;
using ir::op_def;

Tensor matmul(const Tensor& a, const Tensor& b, const MatMulOptions& options) {
  static const ir::OpDef& op = op_def("MatMul");
  return call1(op, {a, b},
               {{"transpose_a", options.transpose_a}, {"transpose_b", options.transpose_b}});
}

Tensor batch_matmul(const Tensor& a, const Tensor& b, const MatMulOptions& options) {
  static const ir::OpDef& op = op_def("BatchMatMul");
  return call1(op, {a, b},
               {{"transpose_a", options.transpose_a}, {"transpose_b", options.transpose_b}});
}

Tensor bias_add(const Tensor& x, const Tensor& bias) {
  static const ir::OpDef& op = op_def("BiasAdd");
  return call1(op, {x, bias});
}

}  // namespace cleave::ops

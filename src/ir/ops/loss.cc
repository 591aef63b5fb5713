// Loss primitives: SoftmaxCrossEntropyWithLogits, SparseSoftmaxCrossEntropyWithLogits (with their
// backward primitives) and MSE.
#include "kernels/cpu/loss.h"

#include "cleave/ops/elementwise.h"
#include "cleave/ops/nn.h"
#include "cleave/ops/reduce.h"
#include "cleave/ops/shape.h"
#include "kernels/cpu/loops.h"
#include "op_helpers.h"

namespace cleave::ir {
namespace {

// logits (N, C) floating.
void expect_logits(const InferContext& ctx) {
  expect_rank(ctx, 0, 2);
  expect_floating(ctx, 0);
}

// Dense labels: the shape and dtype of the logits.
void expect_dense_labels(const InferContext& ctx) {
  expect_rank(ctx, 1, 2);
  expect_floating(ctx, 1);
  expect_same_dtype(ctx, 0, 1);
  const Shape& logits = ctx.inputs[0].shape;
  const Shape& labels = ctx.inputs[1].shape;
  CLEAVE_CHECK_ARG(labels == logits,
                   "{}: input 1 (labels) has shape {}; expected {}, the shape of input 0 (logits)",
                   ctx.op.name, labels.to_string(), logits.to_string());
}

// Sparse labels: N class ids of an integer dtype.
void expect_sparse_labels(const InferContext& ctx) {
  expect_rank(ctx, 1, 1);
  expect_dtype(ctx, 1, {DType::kInt32, DType::kInt64});
  const Shape& logits = ctx.inputs[0].shape;
  const Shape& labels = ctx.inputs[1].shape;
  CLEAVE_CHECK_ARG(labels[0] == logits[0],
                   "{}: input 1 (labels) has shape {}; expected ({}), one class id per row of "
                   "input 0 (logits) of shape {}",
                   ctx.op.name, labels.to_string(), logits[0], logits.to_string());
}

// The gradient input of a backward primitive: (N) of the logits' dtype.
void expect_loss_grad(const InferContext& ctx, int input) {
  expect_rank(ctx, input, 1);
  expect_same_dtype(ctx, 0, input);
  CLEAVE_CHECK_ARG(ctx.inputs[input].shape[0] == ctx.inputs[0].shape[0],
                   "{}: input {} (dloss) has shape {}; expected ({}), one value per row of input "
                   "0 (logits)",
                   ctx.op.name, input, ctx.inputs[input].shape.to_string(), ctx.inputs[0].shape[0]);
}

// Labels are data, not metadata: their range is checked when the kernel runs.
template <typename Label>
void check_class_ids(const OpDef& op, const Label* labels, int64_t n, int64_t c) {
  for (int64_t i = 0; i < n; ++i) {
    CLEAVE_CHECK_ARG(labels[i] >= 0 && labels[i] < c,
                     "{}: input 1 (labels) holds {} for sample {}; expected a class id in [0, {}) "
                     "(C = {}, the size of input 0 (logits) dim 1)",
                     op.name, labels[i], i, c, c);
  }
}

// Runs fn.template operator()<T, Label>() for the logits' float type and the labels' int type.
template <typename F>
void dispatch_sparse(const Tensor& logits, const Tensor& labels, F fn) {
  CLEAVE_DISPATCH_FLOAT(logits.dtype(), [&] {
    using Float = T;
    if (labels.dtype() == DType::kInt32) {
      fn.template operator()<Float, int32_t>();
    } else {
      fn.template operator()<Float, int64_t>();
    }
  });
}

Tensor per_row(const Tensor& dloss) { return ops::reshape(dloss, Shape{dloss.numel(), 1}); }

}  // namespace

void register_loss_ops(Registry& r) {
  r.add(OpDef{
      .name = "SoftmaxCrossEntropyWithLogits",
      .num_inputs = 2,
      .infer = [](const InferContext& ctx) -> std::vector<TensorMeta> {
        expect_logits(ctx);
        expect_dense_labels(ctx);
        return {{Shape{ctx.inputs[0].shape[0]}, ctx.inputs[0].dtype}};
      },
      .cpu_kernel =
          [](const KernelContext& ctx) {
            const Tensor &logits = ctx.inputs[0], &labels = ctx.inputs[1];
            CLEAVE_DISPATCH_FLOAT(logits.dtype(), [&] {
              kernels::cpu::softmax_cross_entropy(logits.data<T>(), labels.data<T>(),
                                                  ctx.outputs[0].data<T>(), logits.dim(0),
                                                  logits.dim(1));
            });
          },
      .grad = [](const GradContext& ctx) -> std::vector<Tensor> {
        const Tensor &logits = ctx.inputs[0], &labels = ctx.inputs[1];
        const Tensor& dloss = ctx.output_grads[0];
        Tensor dlogits, dlabels;
        if (ctx.needs_input_grad[0]) {
          static const OpDef& backward = op_def("SoftmaxCrossEntropyWithLogitsGrad");
          dlogits = call1(backward, {logits, labels, dloss});
        }
        if (ctx.needs_input_grad[1]) {
          // d loss_i / d labels[i, c] = -log_softmax(logits)[i, c].
          dlabels = ops::mul(ops::neg(ops::log_softmax(logits, 1)), per_row(dloss));
        }
        return {dlogits, dlabels};
      },
  });
  // Backward-only: (logits, labels, dloss) -> (softmax(logits) - labels) · dloss[:, None].
  r.add(OpDef{
      .name = "SoftmaxCrossEntropyWithLogitsGrad",
      .num_inputs = 3,
      .infer = [](const InferContext& ctx) -> std::vector<TensorMeta> {
        expect_logits(ctx);
        expect_dense_labels(ctx);
        expect_loss_grad(ctx, 2);
        return {ctx.inputs[0]};
      },
      .cpu_kernel =
          [](const KernelContext& ctx) {
            const Tensor &logits = ctx.inputs[0], &labels = ctx.inputs[1], &dloss = ctx.inputs[2];
            CLEAVE_DISPATCH_FLOAT(logits.dtype(), [&] {
              kernels::cpu::softmax_cross_entropy_backward(
                  logits.data<T>(), labels.data<T>(), dloss.data<T>(), ctx.outputs[0].data<T>(),
                  logits.dim(0), logits.dim(1));
            });
          },
      .no_grad = kNoGradBackward,
  });
  r.add(OpDef{
      .name = "SparseSoftmaxCrossEntropyWithLogits",
      .num_inputs = 2,
      .infer = [](const InferContext& ctx) -> std::vector<TensorMeta> {
        expect_logits(ctx);
        expect_sparse_labels(ctx);
        return {{Shape{ctx.inputs[0].shape[0]}, ctx.inputs[0].dtype}};
      },
      .cpu_kernel =
          [](const KernelContext& ctx) {
            const Tensor &logits = ctx.inputs[0], &labels = ctx.inputs[1];
            const int64_t n = logits.dim(0), c = logits.dim(1);
            dispatch_sparse(logits, labels, [&]<typename T, typename Label>() {
              check_class_ids(ctx.op, labels.data<Label>(), n, c);
              kernels::cpu::sparse_softmax_cross_entropy(logits.data<T>(), labels.data<Label>(),
                                                         ctx.outputs[0].data<T>(), n, c);
            });
          },
      .grad = [](const GradContext& ctx) -> std::vector<Tensor> {
        static const OpDef& backward = op_def("SparseSoftmaxCrossEntropyWithLogitsGrad");
        return {call1(backward, {ctx.inputs[0], ctx.inputs[1], ctx.output_grads[0]}), Tensor()};
      },
  });
  // Backward-only: (logits, labels, dloss) -> (softmax(logits) - one_hot(labels)) · dloss[:, None].
  r.add(OpDef{
      .name = "SparseSoftmaxCrossEntropyWithLogitsGrad",
      .num_inputs = 3,
      .infer = [](const InferContext& ctx) -> std::vector<TensorMeta> {
        expect_logits(ctx);
        expect_sparse_labels(ctx);
        expect_loss_grad(ctx, 2);
        return {ctx.inputs[0]};
      },
      .cpu_kernel =
          [](const KernelContext& ctx) {
            const Tensor &logits = ctx.inputs[0], &labels = ctx.inputs[1], &dloss = ctx.inputs[2];
            const int64_t n = logits.dim(0), c = logits.dim(1);
            dispatch_sparse(logits, labels, [&]<typename T, typename Label>() {
              check_class_ids(ctx.op, labels.data<Label>(), n, c);
              kernels::cpu::sparse_softmax_cross_entropy_backward(
                  logits.data<T>(), labels.data<Label>(), dloss.data<T>(), ctx.outputs[0].data<T>(),
                  n, c);
            });
          },
      .no_grad = kNoGradBackward,
  });
  r.add(OpDef{
      .name = "MSE",
      .num_inputs = 2,
      .infer = [](const InferContext& ctx) -> std::vector<TensorMeta> {
        expect_floating(ctx, 0);
        expect_floating(ctx, 1);
        return infer_broadcast_binary(ctx);
      },
      .cpu_kernel =
          [](const KernelContext& ctx) {
            const Tensor &a = ctx.inputs[0], &b = ctx.inputs[1], &out = ctx.outputs[0];
            CLEAVE_DISPATCH_FLOAT(a.dtype(), [&] {
              kernels::cpu::binary_loop(a.data<T>(), a.shape(), b.data<T>(), b.shape(),
                                        out.data<T>(), out.shape(), [](T x, T y) {
                                          const T d = x - y;
                                          return d * d;
                                        });
            });
          },
      .grad = [](const GradContext& ctx) -> std::vector<Tensor> {
        // d/da (a - b)^2 = 2 (a - b), d/db = -2 (a - b); broadcast dims are summed back.
        const Tensor &a = ctx.inputs[0], &b = ctx.inputs[1];
        const Tensor g = ops::mul(ops::mul(ops::add(a, ops::neg(b)), ctx.output_grads[0]), 2.0);
        return {ctx.needs_input_grad[0] ? ops::sum_to(g, a.shape()) : Tensor(),
                ctx.needs_input_grad[1] ? ops::sum_to(ops::neg(g), b.shape()) : Tensor()};
      },
  });
}

}  // namespace cleave::ir

namespace cleave::ops {

using ir::call1;
using ir::op_def;

Tensor softmax_cross_entropy_with_logits(const Tensor& logits, const Tensor& labels) {
  static const ir::OpDef& op = op_def("SoftmaxCrossEntropyWithLogits");
  return call1(op, {logits, labels});
}

Tensor sparse_softmax_cross_entropy_with_logits(const Tensor& logits, const Tensor& labels) {
  static const ir::OpDef& op = op_def("SparseSoftmaxCrossEntropyWithLogits");
  return call1(op, {logits, labels});
}

Tensor mse(const Tensor& a, const Tensor& b) {
  static const ir::OpDef& op = op_def("MSE");
  return call1(op, {a, b});
}

}  // namespace cleave::ops

// BatchNorm and LayerNorm and their backward primitives.
//
// NOTE [Normalisation outputs and their gradients]
// BatchNorm(x, gamma, beta, running_mean, running_var) -> (y, batch_mean, batch_var).
//   Training: y uses the statistics of x per channel, returned as outputs 1 and 2 (variance
//   biased) for the caller's running-average update. Inference: y uses running_mean/var, and
//   outputs 1 and 2 are copies of them.
// LayerNorm(x, gamma, beta) -> (y, mean, variance), the statistics per row of the normalised dims
//   with shape x.shape[:begin_norm_axis] + (1, ...) (MindSpore's layout). LayerNormGrad reads them
//   back instead of recomputing them; ops::layer_norm returns y only.
// The statistics outputs are differentiable like y: their gradients (a gradient on a batch mean
// of x is a gradient on x) are added with elementwise ops in the grad rules, so a rule is exact
// for every output a caller may use, not only for y. In inference mode y depends on the running
// statistics, so BatchNorm's rule gives them gradients too (BatchNormGrad outputs 3 and 4).
#include "kernels/cpu/norm.h"

#include "cleave/ops/elementwise.h"
#include "cleave/ops/nn.h"
#include "cleave/ops/shape.h"
#include "op_helpers.h"

namespace cleave::ir {
namespace {

using kernels::cpu::BatchNormGeometry;
using kernels::cpu::LayerNormGeometry;

double epsilon_attr(const Attrs& attrs, const std::string& op) {
  const double eps = attrs.has("epsilon") ? attrs.get<double>("epsilon", op) : 1e-5;
  CLEAVE_CHECK_ARG(eps > 0, "{}: attribute epsilon is {}; expected > 0", op, eps);
  return eps;
}

void expect_shape(const InferContext& ctx, int input, const char* name, const Shape& expected,
                  const std::string& why) {
  const Shape& got = ctx.inputs[input].shape;
  CLEAVE_CHECK_ARG(got == expected, "{}: input {} ({}) has shape {}; expected {} ({})", ctx.op.name,
                   input, name, got.to_string(), expected.to_string(), why);
}

void expect_all_same_dtype(const InferContext& ctx) {
  expect_floating(ctx, 0);
  for (int i = 1; i < static_cast<int>(ctx.inputs.size()); ++i) expect_same_dtype(ctx, 0, i);
}

// ---- BatchNorm ----

// Checks x (input `x_index`) and the per-channel inputs named in `channel_inputs` (index, name).
BatchNormGeometry batch_norm_geometry(
    const InferContext& ctx, int x_index,
    std::initializer_list<std::pair<int, const char*>> channel_inputs) {
  expect_all_same_dtype(ctx);
  expect_min_rank(ctx, x_index, 2);
  const Shape& x = ctx.inputs[x_index].shape;
  for (const auto& [index, name] : channel_inputs) {
    expect_shape(
        ctx, index, name, Shape{x[1]},
        fmt::format("the channel dim 1 of input {} (x), shape {}", x_index, x.to_string()));
  }
  BatchNormGeometry g;
  g.n = x[0];
  g.c = x[1];
  g.spatial = 1;
  for (int64_t d = 2; d < x.rank(); ++d) g.spatial *= x[d];
  g.epsilon = epsilon_attr(ctx.attrs, ctx.op.name);
  g.training =
      ctx.attrs.has("is_training") ? ctx.attrs.get<bool>("is_training", ctx.op.name) : true;
  return g;
}

BatchNormGeometry batch_norm_geometry(const OpDef& op, const Attrs& attrs,
                                      std::span<const Tensor> inputs, int x_index) {
  std::vector<TensorMeta> metas;
  for (const Tensor& t : inputs) metas.push_back({t.shape(), t.dtype()});
  return batch_norm_geometry(InferContext{op, attrs, metas}, x_index, {});
}

// Shape (1, C, 1, ...) of rank `rank`: a per-channel tensor broadcastable against x.
Shape channel_shape(int64_t c, int64_t rank) {
  std::vector<int64_t> dims(static_cast<size_t>(rank), 1);
  dims[1] = c;
  return Shape(dims);
}

// Gradient on x from gradients on per-position statistics of x: `dmean`, `dvar` (undefined when
// none flowed) broadcast against x after reshaping to `stat_shape`; each statistic averages
// `count` elements of x. d mean/dx = 1/count; d var/dx = 2·(x − mean)/count.
Tensor stats_grad_to_x(const Tensor& x, const Tensor& mean, const Tensor& dmean, const Tensor& dvar,
                       const Shape& stat_shape, int64_t count) {
  Tensor dx;
  const double inv = 1.0 / static_cast<double>(count);
  if (dmean.defined()) {
    dx = ops::broadcast_to(ops::reshape(ops::mul(dmean, inv), stat_shape), x.shape());
  }
  if (dvar.defined()) {
    const Tensor centred = ops::add(x, ops::neg(ops::reshape(mean, stat_shape)));
    const Tensor term = ops::mul(centred, ops::reshape(ops::mul(dvar, 2 * inv), stat_shape));
    dx = dx.defined() ? ops::add(dx, term) : term;
  }
  return dx;
}

Tensor add_defined(const Tensor& a, const Tensor& b) {
  if (!a.defined()) return b;
  if (!b.defined()) return a;
  return ops::add(a, b);
}

std::vector<Tensor> batch_norm_grad(const GradContext& ctx) {
  static const OpDef& grad_op = op_def("BatchNormGrad");
  const Tensor &x = ctx.inputs[0], &gamma = ctx.inputs[1];
  const Tensor &mean = ctx.outputs[1], &var = ctx.outputs[2];
  const Tensor &dy = ctx.output_grads[0], &dmean = ctx.output_grads[1], &dvar = ctx.output_grads[2];
  const BatchNormGeometry g = batch_norm_geometry(ctx.op, ctx.attrs, ctx.inputs, 0);
  std::vector<Tensor> grads(5);
  std::vector<Tensor> parts;
  if (dy.defined()) {
    parts = call(grad_op, {dy, x, gamma, mean, var}, ctx.attrs);
    grads[0] = parts[0];
    grads[1] = parts[1];
    grads[2] = parts[2];
  }
  if (g.training) {
    grads[0] = add_defined(
        grads[0],
        stats_grad_to_x(x, mean, dmean, dvar, channel_shape(g.c, x.rank()), g.n * g.spatial));
  } else {
    // Outputs 1 and 2 are the running statistics themselves.
    grads[3] = add_defined(parts.empty() ? Tensor() : parts[3], dmean);
    grads[4] = add_defined(parts.empty() ? Tensor() : parts[4], dvar);
  }
  return grads;
}

void register_batch_norm(Registry& r) {
  r.add(OpDef{
      .name = "BatchNorm",
      .num_inputs = 5,
      .infer = [](const InferContext& ctx) -> std::vector<TensorMeta> {
        const BatchNormGeometry g = batch_norm_geometry(
            ctx, 0, {{1, "gamma"}, {2, "beta"}, {3, "running_mean"}, {4, "running_var"}});
        const DType dt = ctx.inputs[0].dtype;
        return {ctx.inputs[0], {Shape{g.c}, dt}, {Shape{g.c}, dt}};
      },
      .cpu_kernel =
          [](const KernelContext& ctx) {
            const auto& in = ctx.inputs;
            const auto& out = ctx.outputs;
            kernels::cpu::batch_norm_forward(batch_norm_geometry(ctx.op, ctx.attrs, in, 0), in[0],
                                             in[1], in[2], in[3], in[4], out[0], out[1], out[2]);
          },
      .grad = batch_norm_grad,
  });
  // BatchNormGrad(dy, x, gamma, mean, var), attrs of BatchNorm -> (dx, dgamma, dbeta, dmean,
  // dvar): see kernels::cpu::batch_norm_backward.
  r.add(OpDef{
      .name = "BatchNormGrad",
      .num_inputs = 5,
      .infer = [](const InferContext& ctx) -> std::vector<TensorMeta> {
        const BatchNormGeometry g =
            batch_norm_geometry(ctx, 1, {{2, "gamma"}, {3, "mean"}, {4, "var"}});
        expect_shape(ctx, 0, "dy", ctx.inputs[1].shape, "the shape of input 1 (x)");
        const TensorMeta channel{Shape{g.c}, ctx.inputs[0].dtype};
        return {ctx.inputs[1], channel, channel, channel, channel};
      },
      .cpu_kernel =
          [](const KernelContext& ctx) {
            const auto& in = ctx.inputs;
            const auto& out = ctx.outputs;
            kernels::cpu::batch_norm_backward(batch_norm_geometry(ctx.op, ctx.attrs, in, 1), in[0],
                                              in[1], in[2], in[3], in[4], out[0], out[1], out[2],
                                              out[3], out[4]);
          },
      .no_grad = kNoGradBackward,
  });
}

// ---- LayerNorm ----

struct LayerNormPlan {
  LayerNormGeometry geometry;
  int64_t axis = 0;   // begin_norm_axis, normalised
  Shape param_shape;  // x.shape[axis:]
  Shape stat_shape;   // x.shape[:axis] + (1, ...)
};

LayerNormPlan layer_norm_plan(const std::string& op, const Attrs& attrs, const Shape& x,
                              int x_index) {
  const int64_t rank = x.rank();
  CLEAVE_CHECK_ARG(rank >= 1, "{}: input {} (x) is a scalar; expected rank >= 1", op, x_index);
  const int64_t given =
      attrs.has("begin_norm_axis") ? attrs.get<int64_t>("begin_norm_axis", op) : -1;
  CLEAVE_CHECK_ARG(given >= -rank && given < rank,
                   "{}: begin_norm_axis {} is out of range for input {} (x) of shape {} (rank "
                   "{}); expected a value in [{}, {}]",
                   op, given, x_index, x.to_string(), rank, -rank, rank - 1);
  LayerNormPlan p;
  p.axis = given < 0 ? given + rank : given;
  std::vector<int64_t> params(x.dims().begin() + p.axis, x.dims().end());
  std::vector<int64_t> stats(x.dims().begin(), x.dims().begin() + p.axis);
  stats.resize(static_cast<size_t>(rank), 1);
  p.param_shape = Shape(params);
  p.stat_shape = Shape(stats);
  p.geometry.rows = p.stat_shape.numel();
  p.geometry.cols = p.param_shape.numel();
  p.geometry.epsilon = epsilon_attr(attrs, op);
  return p;
}

std::string param_reason(const LayerNormPlan& p, int x_index, const Shape& x) {
  return fmt::format("the dims of input {} (x), shape {}, from begin_norm_axis {} on", x_index,
                     x.to_string(), p.axis);
}

std::vector<Tensor> layer_norm_grad(const GradContext& ctx) {
  static const OpDef& grad_op = op_def("LayerNormGrad");
  const Tensor& x = ctx.inputs[0];
  const Tensor &mean = ctx.outputs[1], &var = ctx.outputs[2];
  const Tensor& dy = ctx.output_grads[0];
  const LayerNormPlan p = layer_norm_plan(ctx.op.name, ctx.attrs, x.shape(), 0);
  std::vector<Tensor> grads(3);
  if (dy.defined()) grads = call(grad_op, {dy, x, ctx.inputs[1], mean, var}, ctx.attrs);
  grads[0] =
      add_defined(grads[0], stats_grad_to_x(x, mean, ctx.output_grads[1], ctx.output_grads[2],
                                            p.stat_shape, p.geometry.cols));
  return grads;
}

void register_layer_norm(Registry& r) {
  r.add(OpDef{
      .name = "LayerNorm",
      .num_inputs = 3,
      .infer = [](const InferContext& ctx) -> std::vector<TensorMeta> {
        expect_all_same_dtype(ctx);
        const Shape& x = ctx.inputs[0].shape;
        const LayerNormPlan p = layer_norm_plan(ctx.op.name, ctx.attrs, x, 0);
        expect_shape(ctx, 1, "gamma", p.param_shape, param_reason(p, 0, x));
        expect_shape(ctx, 2, "beta", p.param_shape, param_reason(p, 0, x));
        const DType dt = ctx.inputs[0].dtype;
        return {ctx.inputs[0], {p.stat_shape, dt}, {p.stat_shape, dt}};
      },
      .cpu_kernel =
          [](const KernelContext& ctx) {
            const auto& in = ctx.inputs;
            const auto& out = ctx.outputs;
            kernels::cpu::layer_norm_forward(
                layer_norm_plan(ctx.op.name, ctx.attrs, in[0].shape(), 0).geometry, in[0], in[1],
                in[2], out[0], out[1], out[2]);
          },
      .grad = layer_norm_grad,
  });
  // LayerNormGrad(dy, x, gamma, mean, var), attrs of LayerNorm -> (dx, dgamma, dbeta).
  r.add(OpDef{
      .name = "LayerNormGrad",
      .num_inputs = 5,
      .infer = [](const InferContext& ctx) -> std::vector<TensorMeta> {
        expect_all_same_dtype(ctx);
        const Shape& x = ctx.inputs[1].shape;
        const LayerNormPlan p = layer_norm_plan(ctx.op.name, ctx.attrs, x, 1);
        expect_shape(ctx, 0, "dy", x, "the shape of input 1 (x)");
        expect_shape(ctx, 2, "gamma", p.param_shape, param_reason(p, 1, x));
        const std::string stat_reason = "LayerNorm's statistics of input 1 (x)";
        expect_shape(ctx, 3, "mean", p.stat_shape, stat_reason);
        expect_shape(ctx, 4, "var", p.stat_shape, stat_reason);
        return {ctx.inputs[1], ctx.inputs[2], ctx.inputs[2]};
      },
      .cpu_kernel =
          [](const KernelContext& ctx) {
            const auto& in = ctx.inputs;
            const auto& out = ctx.outputs;
            kernels::cpu::layer_norm_backward(
                layer_norm_plan(ctx.op.name, ctx.attrs, in[1].shape(), 1).geometry, in[0], in[1],
                in[2], in[3], in[4], out[0], out[1], out[2]);
          },
      .no_grad = kNoGradBackward,
  });
}

}  // namespace

void register_norm_ops(Registry& r) {
  register_batch_norm(r);
  register_layer_norm(r);
}

}  // namespace cleave::ir

namespace cleave::ops {

BatchNormResult batch_norm(const Tensor& x, const Tensor& gamma, const Tensor& beta,
                           const Tensor& running_mean, const Tensor& running_var,
                           const BatchNormOptions& options) {
  static const ir::OpDef& op = ir::op_def("BatchNorm");
  std::vector<Tensor> out =
      ir::call(op, {x, gamma, beta, running_mean, running_var},
               {{"is_training", options.is_training}, {"epsilon", options.epsilon}});
  return {out[0], out[1], out[2]};
}

Tensor layer_norm(const Tensor& x, const Tensor& gamma, const Tensor& beta, int64_t begin_norm_axis,
                  double epsilon) {
  static const ir::OpDef& op = ir::op_def("LayerNorm");
  return ir::call(op, {x, gamma, beta},
                  {{"begin_norm_axis", begin_norm_axis}, {"epsilon", epsilon}})[0];
}

}  // namespace cleave::ops

// Optimizer update primitives: they write the parameter and its state in place.
//
// NOTE [In-place optimizer primitives]
// ApplyMomentum, SGD and Adam take the parameter, its state tensors and the gradient as inputs,
// have no outputs (infer returns {}), and overwrite the parameter and state in their kernels
// (`mutates_inputs`, so autograd never records them). Constant hyper-parameters (momentum,
// betas, eps, weight decay) are attributes. The per-step scalars are optional trailing inputs:
// the learning rate (ApplyMomentum input 3, SGD input 4, Adam input 4) as a one-element Float32
// or Float64 tensor, and Adam's step count (input 5, a one-element tensor of the parameter's
// dtype that the kernel increments before the update, like SGD's `stat` it is state). Given as
// inputs, they are read when the kernel runs, so a compiled training step reads the rate the
// optimizer wrote for this step and one graph serves a whole learning-rate schedule. Without
// them the attributes 'lr' (and Adam's 1-based 'step') are used. Each kernel is one fused pass over
// the elements (kernels/cpu/optim.h). Float32 computes in float (the hyper-parameters are rounded
// to float once), Float64 in double.
#include "kernels/cpu/optim.h"

#include <cmath>
#include <string_view>

#include "op_helpers.h"

namespace cleave::ir {
namespace {

using kernels::cpu::AdamScalars;

// Checks that every input is a floating tensor with input 0's shape and dtype. `roles` names
// the inputs ("variable", "accumulation", "gradient") for the messages.
void expect_matching_inputs(const InferContext& ctx,
                            std::initializer_list<std::string_view> roles) {
  const std::vector<std::string_view> names(roles);
  const TensorMeta& first = ctx.inputs[0];
  CLEAVE_CHECK_ARG(is_floating(first.dtype),
                   "{}: input 0 ({}) has dtype {}; expected Float32 or Float64", ctx.op.name,
                   names[0], dtype_name(first.dtype));
  for (size_t i = 1; i < ctx.inputs.size(); ++i) {
    const TensorMeta& in = ctx.inputs[i];
    CLEAVE_CHECK_ARG(
        in.dtype == first.dtype,
        "{}: input {} ({}) has dtype {} but input 0 ({}) has dtype {}; they must match",
        ctx.op.name, i, names[i], dtype_name(in.dtype), names[0], dtype_name(first.dtype));
    CLEAVE_CHECK_ARG(
        in.shape == first.shape,
        "{}: input {} ({}) has shape {} but input 0 ({}) has shape {}; they must match",
        ctx.op.name, i, names[i], in.shape.to_string(), names[0], first.shape.to_string());
  }
}

// Checks the optional scalar inputs from `first` on (one-element floating tensors) and the
// number of inputs: `required` or `required + optional`. Returns whether they are given.
bool expect_scalar_inputs(const InferContext& ctx, size_t required,
                          std::initializer_list<std::string_view> optional) {
  const size_t n = ctx.inputs.size();
  CLEAVE_CHECK_ARG(n == required || n == required + optional.size(),
                   "{}: {} inputs given; expected {} (the per-step scalars as attributes) or {} "
                   "(the per-step scalars as inputs)",
                   ctx.op.name, n, required, required + optional.size());
  size_t i = required;
  for (std::string_view role : optional) {
    if (i >= n) break;
    const TensorMeta& in = ctx.inputs[i];
    CLEAVE_CHECK_ARG(in.shape.numel() == 1 && is_floating(in.dtype),
                     "{}: input {} ({}) is {} {}; expected a one-element Float32 or Float64 "
                     "tensor",
                     ctx.op.name, i, role, dtype_name(in.dtype), in.shape.to_string());
    ++i;
  }
  return n > required;
}

// The first `n` inputs of ctx, as a context of their own.
InferContext first_inputs(const InferContext& ctx, std::vector<TensorMeta>& storage, size_t n) {
  storage.assign(ctx.inputs.begin(), ctx.inputs.begin() + static_cast<std::ptrdiff_t>(n));
  return InferContext{ctx.op, ctx.attrs, storage};
}

// The learning rate: input `index` when given, else the attribute 'lr'.
double lr_of(const KernelContext& ctx, size_t index) {
  return ctx.inputs.size() > index ? ctx.inputs[index].item() : ctx.attrs.get<double>("lr");
}

double finite_attr(const InferContext& ctx, std::string_view name) {
  const double v = ctx.attrs.get<double>(name, ctx.op.name);
  CLEAVE_CHECK_ARG(std::isfinite(v), "{}: attribute '{}' is {}; expected a finite number",
                   ctx.op.name, name, v);
  return v;
}

// ---- ApplyMomentum(variable, accumulation, gradient) ----
// With g = gradient + weight_decay * variable:
//   accumulation = momentum * accumulation + g
//   variable    -= lr * accumulation                  (use_nesterov false)
//   variable    -= lr * (g + momentum * accumulation) (use_nesterov true)

std::vector<TensorMeta> infer_apply_momentum(const InferContext& ctx) {
  const bool lr_input = expect_scalar_inputs(ctx, 3, {"lr"});
  std::vector<TensorMeta> storage;
  expect_matching_inputs(first_inputs(ctx, storage, 3), {"variable", "accumulation", "gradient"});
  if (!lr_input) finite_attr(ctx, "lr");
  finite_attr(ctx, "momentum");
  ctx.attrs.get<bool>("use_nesterov", ctx.op.name);
  CLEAVE_CHECK_ARG(std::isfinite(ctx.attrs.get_or("weight_decay", 0.0)),
                   "{}: attribute 'weight_decay' is not finite", ctx.op.name);
  return {};
}

void apply_momentum_kernel(const KernelContext& ctx) {
  const Tensor &var = ctx.inputs[0], &acc = ctx.inputs[1], &grad = ctx.inputs[2];
  const double lr = lr_of(ctx, 3);
  const double momentum = ctx.attrs.get<double>("momentum");
  const double weight_decay = ctx.attrs.get_or("weight_decay", 0.0);
  const bool nesterov = ctx.attrs.get<bool>("use_nesterov");
  CLEAVE_DISPATCH_FLOAT(var.dtype(), [&] {
    kernels::cpu::apply_momentum<T>(var.data<T>(), acc.data<T>(), grad.data<T>(), var.numel(),
                                    static_cast<T>(lr), static_cast<T>(momentum),
                                    static_cast<T>(weight_decay), nesterov);
  });
}

// ---- SGD(parameter, gradient, accumulation, stat) ----
// PyTorch's and MindSpore's SGD. With g = gradient + weight_decay * parameter and momentum > 0:
//   accumulation = g                                             (stat != 0: first step)
//   accumulation = momentum * accumulation + (1 - dampening) * g (otherwise)
//   g = g + momentum * accumulation (nesterov) or g = accumulation
// then parameter -= lr * g, and stat is set to 0. `stat` is a one-element tensor of the
// parameter's dtype; with momentum 0 the accumulation is left untouched.

std::vector<TensorMeta> infer_sgd(const InferContext& ctx) {
  const bool lr_input = expect_scalar_inputs(ctx, 4, {"lr"});
  std::vector<TensorMeta> storage;
  expect_matching_inputs(first_inputs(ctx, storage, 3), {"parameter", "gradient", "accumulation"});
  const TensorMeta& stat = ctx.inputs[3];
  CLEAVE_CHECK_ARG(stat.shape.numel() == 1 && stat.dtype == ctx.inputs[0].dtype,
                   "{}: input 3 (stat) is {} {}; expected a one-element {} tensor", ctx.op.name,
                   dtype_name(stat.dtype), stat.shape.to_string(), dtype_name(ctx.inputs[0].dtype));
  if (!lr_input) finite_attr(ctx, "lr");
  const double momentum = finite_attr(ctx, "momentum");
  const double dampening = finite_attr(ctx, "dampening");
  finite_attr(ctx, "weight_decay");
  const bool nesterov = ctx.attrs.get<bool>("nesterov", ctx.op.name);
  CLEAVE_CHECK_ARG(!nesterov || (momentum > 0 && dampening == 0),
                   "{}: nesterov needs momentum > 0 and dampening 0; got momentum {} and "
                   "dampening {}",
                   ctx.op.name, momentum, dampening);
  return {};
}

void sgd_kernel(const KernelContext& ctx) {
  const Tensor &param = ctx.inputs[0], &grad = ctx.inputs[1], &acc = ctx.inputs[2];
  const Tensor& stat = ctx.inputs[3];
  CLEAVE_DISPATCH_FLOAT(param.dtype(), [&] {
    T* stat_value = stat.data<T>();
    kernels::cpu::sgd<T>(param.data<T>(), grad.data<T>(), acc.data<T>(), param.numel(),
                         static_cast<T>(lr_of(ctx, 4)),
                         static_cast<T>(ctx.attrs.get<double>("momentum")),
                         static_cast<T>(1.0 - ctx.attrs.get<double>("dampening")),
                         static_cast<T>(ctx.attrs.get<double>("weight_decay")),
                         ctx.attrs.get<bool>("nesterov"), *stat_value != T(0));
    *stat_value = T(0);
  });
}

// ---- Adam(parameter, m, v, gradient) ----
// PyTorch's Adam / AdamW at 1-based step t:
//   parameter *= 1 - lr * weight_decay        (decoupled: AdamW)
//   g = gradient + weight_decay * parameter   (not decoupled: Adam's L2 term)
//   m = beta1 * m + (1 - beta1) * g
//   v = beta2 * v + (1 - beta2) * g²
//   parameter -= lr / (1 - beta1^t) * m / (sqrt(v) / sqrt(1 - beta2^t) + eps)

std::vector<TensorMeta> infer_adam(const InferContext& ctx) {
  const bool scalar_inputs = expect_scalar_inputs(ctx, 4, {"lr", "step"});
  std::vector<TensorMeta> storage;
  expect_matching_inputs(first_inputs(ctx, storage, 4), {"parameter", "m", "v", "gradient"});
  if (scalar_inputs) {
    CLEAVE_CHECK_ARG(ctx.inputs[5].dtype == ctx.inputs[0].dtype,
                     "{}: input 5 (step) has dtype {}; expected input 0's {} (the parameter)",
                     ctx.op.name, dtype_name(ctx.inputs[5].dtype), dtype_name(ctx.inputs[0].dtype));
  } else {
    finite_attr(ctx, "lr");
  }
  const double beta1 = finite_attr(ctx, "beta1");
  const double beta2 = finite_attr(ctx, "beta2");
  const double eps = finite_attr(ctx, "eps");
  finite_attr(ctx, "weight_decay");
  ctx.attrs.get<bool>("decoupled", ctx.op.name);
  CLEAVE_CHECK_ARG(beta1 >= 0 && beta1 < 1 && beta2 >= 0 && beta2 < 1,
                   "{}: beta1 {} and beta2 {} must lie in [0, 1)", ctx.op.name, beta1, beta2);
  CLEAVE_CHECK_ARG(eps > 0, "{}: eps is {}; expected eps > 0", ctx.op.name, eps);
  if (!scalar_inputs) {
    const int64_t step = ctx.attrs.get<int64_t>("step", ctx.op.name);
    CLEAVE_CHECK_ARG(step >= 1, "{}: step is {}; expected the 1-based step number (>= 1)",
                     ctx.op.name, step);
  }
  return {};
}

void adam_kernel(const KernelContext& ctx) {
  const Tensor &param = ctx.inputs[0], &m = ctx.inputs[1], &v = ctx.inputs[2];
  const Tensor& grad = ctx.inputs[3];
  const double lr = lr_of(ctx, 4);
  const double beta1 = ctx.attrs.get<double>("beta1");
  const double beta2 = ctx.attrs.get<double>("beta2");
  const double weight_decay = ctx.attrs.get<double>("weight_decay");
  const bool decoupled = ctx.attrs.get<bool>("decoupled");
  double t = 0;
  if (ctx.inputs.size() > 5) {
    CLEAVE_DISPATCH_FLOAT(param.dtype(), [&] {
      T* step = ctx.inputs[5].data<T>();
      *step += T(1);  // the updates applied so far, this one included
      t = static_cast<double>(*step);
    });
  } else {
    t = static_cast<double>(ctx.attrs.get<int64_t>("step"));
  }
  CLEAVE_DISPATCH_FLOAT(param.dtype(), [&] {
    const AdamScalars<T> s{
        .beta1 = static_cast<T>(beta1),
        .one_minus_beta1 = static_cast<T>(1.0 - beta1),
        .beta2 = static_cast<T>(beta2),
        .one_minus_beta2 = static_cast<T>(1.0 - beta2),
        .eps = static_cast<T>(ctx.attrs.get<double>("eps")),
        .l2 = static_cast<T>(decoupled ? 0.0 : weight_decay),
        .decay_factor = static_cast<T>(decoupled ? 1.0 - lr * weight_decay : 1.0),
        .step_size = static_cast<T>(lr / (1.0 - std::pow(beta1, t))),
        .inv_sqrt_bias2 = static_cast<T>(1.0 / std::sqrt(1.0 - std::pow(beta2, t))),
    };
    kernels::cpu::adam<T>(param.data<T>(), m.data<T>(), v.data<T>(), grad.data<T>(), param.numel(),
                          s);
  });
}

// ---- Assign(variable, value): variable = value, in place ----
// The in-place write of state that is not a gradient update (BatchNorm's moving statistics), so
// that it is recorded as a side effect in GRAPH_MODE instead of reading a traced value.

std::vector<TensorMeta> infer_assign(const InferContext& ctx) {
  const TensorMeta &var = ctx.inputs[0], &value = ctx.inputs[1];
  CLEAVE_CHECK_ARG(var.shape == value.shape && var.dtype == value.dtype,
                   "Assign: input 1 (value) is {} {}; expected input 0's {} {} (the variable)",
                   dtype_name(value.dtype), value.shape.to_string(), dtype_name(var.dtype),
                   var.shape.to_string());
  return {};
}

void assign_kernel(const KernelContext& ctx) { ctx.inputs[0].copy_from(ctx.inputs[1]); }

}  // namespace

void register_optim_ops(Registry& r) {
  r.add(OpDef{
      .name = "Assign",
      .num_inputs = 2,
      .infer = infer_assign,
      .cpu_kernel = assign_kernel,
      .no_grad = kNoGradInPlace,
      .mutates_inputs = true,
      .mutated_inputs = {0},
  });
  r.add(OpDef{
      .name = "ApplyMomentum",
      .num_inputs = OpDef::kVariadic,
      .infer = infer_apply_momentum,
      .cpu_kernel = apply_momentum_kernel,
      .no_grad = kNoGradInPlace,
      .mutates_inputs = true,
      .mutated_inputs = {0, 1},
  });
  r.add(OpDef{
      .name = "SGD",
      .num_inputs = OpDef::kVariadic,
      .infer = infer_sgd,
      .cpu_kernel = sgd_kernel,
      .no_grad = kNoGradInPlace,
      .mutates_inputs = true,
      .mutated_inputs = {0, 2, 3},
  });
  r.add(OpDef{
      .name = "Adam",
      .num_inputs = OpDef::kVariadic,
      .infer = infer_adam,
      .cpu_kernel = adam_kernel,
      .no_grad = kNoGradInPlace,
      .mutates_inputs = true,
      .mutated_inputs = {0, 1, 2, 5},
  });
}

}  // namespace cleave::ir

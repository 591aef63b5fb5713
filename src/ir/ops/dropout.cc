// Dropout: zeroes each element with probability 1 - keep_prob and scales the others by
// 1 / keep_prob, drawing its mask from a counter-based stream (NOTE [Dropout stream] in
// kernels/cpu/dropout.h).
#include "kernels/cpu/dropout.h"

#include "cleave/core/random.h"
#include "cleave/ops/elementwise.h"
#include "cleave/ops/nn.h"
#include "op_helpers.h"

namespace cleave::ir {
namespace {

std::vector<TensorMeta> infer_dropout(const InferContext& ctx) {
  expect_floating(ctx, 0);
  const double keep_prob = ctx.attrs.get<double>("keep_prob", ctx.op.name);
  CLEAVE_CHECK_ARG(keep_prob > 0.0 && keep_prob <= 1.0,
                   "{}: keep_prob is {}; expected a value in (0, 1] (the probability of keeping "
                   "an element)",
                   ctx.op.name, keep_prob);
  if (ctx.attrs.has("slice_offset")) {
    const Shape& x = ctx.inputs[0].shape;
    const auto& global = ctx.attrs.get<std::vector<int64_t>>("global_shape", ctx.op.name);
    const auto& offset = ctx.attrs.get<std::vector<int64_t>>("slice_offset", ctx.op.name);
    bool fits = static_cast<int64_t>(global.size()) == x.rank() && global.size() == offset.size();
    for (size_t d = 0; fits && d < global.size(); ++d) {
      fits = offset[d] >= 0 && offset[d] + x[static_cast<int64_t>(d)] <= global[d];
    }
    CLEAVE_CHECK_ARG(fits,
                     "{}: input 0 of shape {} at slice_offset {} does not lie inside global_shape "
                     "{}",
                     ctx.op.name, x.to_string(), Shape(offset).to_string(),
                     Shape(global).to_string());
  }
  return {ctx.inputs[0], ctx.inputs[0]};
}

void dropout_kernel(const KernelContext& ctx) {
  const Tensor &x = ctx.inputs[0], &y = ctx.outputs[0], &mask = ctx.outputs[1];
  const double keep_prob = ctx.attrs.get<double>("keep_prob");
  // One draw from the global generator per call (on the calling thread), so set_seed makes the
  // masks reproducible (NOTE [Dropout stream]); a "seed" attribute fixes the stream instead.
  const uint64_t seed = ctx.attrs.has("seed")
                            ? static_cast<uint64_t>(ctx.attrs.get<int64_t>("seed", ctx.op.name))
                            : next_seed();
  if (ctx.attrs.has("slice_offset")) {  // a slice of a sharded Dropout (its sharding rule)
    const auto& global = ctx.attrs.get<std::vector<int64_t>>("global_shape", ctx.op.name);
    const auto& offset = ctx.attrs.get<std::vector<int64_t>>("slice_offset", ctx.op.name);
    CLEAVE_DISPATCH_FLOAT(x.dtype(), [&] {
      kernels::cpu::dropout_slice(x.data<T>(), y.data<T>(), mask.data<T>(), x.shape().dims(),
                                  global, offset, keep_prob, seed);
    });
    return;
  }
  CLEAVE_DISPATCH_FLOAT(x.dtype(), [&] {
    kernels::cpu::dropout(x.data<T>(), y.data<T>(), mask.data<T>(), x.numel(), keep_prob, seed);
  });
}

}  // namespace

void register_dropout_ops(Registry& r) {
  // Outputs (y, mask): mask holds the factor each element was multiplied by, 0 or 1/keep_prob.
  r.add(OpDef{
      .name = "Dropout",
      .num_inputs = 1,
      .infer = infer_dropout,
      .cpu_kernel = dropout_kernel,
      .grad = [](const GradContext& ctx) -> std::vector<Tensor> {
        // The mask is piecewise constant in x: a gradient reaching it contributes nothing.
        const Tensor& dy = ctx.output_grads[0];
        if (!dy.defined()) return {Tensor()};
        return {ops::mul(dy, ctx.outputs[1])};
      },
      .random = true,
  });
}

}  // namespace cleave::ir

namespace cleave::ops {

using ir::op_def;

Tensor dropout(const Tensor& x, double keep_prob) {
  static const ir::OpDef& op = op_def("Dropout");
  return ir::call(op, {x}, {{"keep_prob", keep_prob}})[0];
}

}  // namespace cleave::ops

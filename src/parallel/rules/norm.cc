// BatchNorm and LayerNorm and their backward primitives.
#include <fmt/format.h>

#include <algorithm>

#include "cleave/ops/elementwise.h"
#include "cleave/ops/reduce.h"
#include "cleave/ops/shape.h"
#include "cleave/parallel/step_parallel.h"
#include "parallel/rules/rules.h"

namespace cleave::parallel::rules {
namespace {

// NOTE [Synchronised batch statistics]
// BatchNorm(x (N, C, ...), gamma, beta, running_mean, running_var) -> (y, batch_mean, batch_var)
// is per channel: every operand follows x's channel dimension, which splits freely. The batch
// and spatial dimensions split too. In inference y is elementwise per channel (it reads the
// running statistics), so the local op is BatchNorm on the slices. In training the statistics
// are the batch's: for the result to equal one device's they must be those of the whole batch,
// not of a rank's slice. The lowering then computes them across the ranks holding the other
// slices of the same channels (the ranks along the split batch and spatial axes), in two passes
// for accuracy, with `count` = N·H·W... of the global x:
//   mean = AllReduce(sum of x over the local batch and spatial positions) / count
//   var  = AllReduce(sum of (x − mean)²) / count        (biased, as the kernel's batch_var)
//   y    = (x − mean) · rsqrt(var + epsilon) · gamma + beta
// and returns mean and var as batch_mean and batch_var, complete on every rank (not pending:
// the outputs index only the channel loop). The ops are differentiable, AllReduce included, so
// autodiff gives the gradients of the synchronised normalisation (MindSpore's SyncBatchNorm).
class BatchNormRule : public ShardingRule {
 public:
  std::string summary() const override {
    return "any split of x, the per-channel inputs and outputs following its channel "
           "dimension; in training a split batch or spatial dimension computes the statistics "
           "of the whole batch (AllReduce; NOTE [Synchronised batch statistics])";
  }

  IterationSpace space(const RuleContext& ctx) const override {
    const Shape& x = ctx.inputs[0].shape;
    IterationSpace space;
    space.loops = loops_of(x);
    space.loops[0].name = "the batch dimension";
    space.loops[1].name = "the channel dimension";
    for (int64_t d = 2; d < x.rank(); ++d) {
      space.loops[static_cast<size_t>(d)].name = "a spatial dimension";
    }
    space.inputs = {identity_dims(x.rank()), {1}, {1}, {1}, {1}};
    space.outputs = {identity_dims(x.rank()), {1}, {1}};
    return space;
  }

  std::vector<Tensor> lower(const LowerContext& ctx) const override {
    const bool training = ctx.rule.attrs.get_or("is_training", true);
    const int64_t rank = ctx.rule.inputs[0].shape.rank();
    std::vector<int> split_axes;  // the device axes of the batch and spatial loops split
    for (int l = 0; l < static_cast<int>(rank); ++l) {
      if (l == 1) continue;
      for (int a : ctx.sharding.axes_of(l)) split_axes.push_back(a);
    }
    std::sort(split_axes.begin(), split_axes.end());
    if (!training || split_axes.empty()) return ShardingRule::lower(ctx);

    const Shape& global = ctx.rule.inputs[0].shape;
    const double inv_count = static_cast<double>(global[1]) / static_cast<double>(global.numel());
    const double epsilon = ctx.rule.attrs.get_or("epsilon", 1e-5);
    const std::vector<int64_t> ranks =
        ranks_along(ctx.rank, ctx.sharding.device_matrix, split_axes);
    const Tensor& x = ctx.inputs[0];
    const int64_t channels = x.shape()[1];
    std::vector<int64_t> axes{0};
    std::vector<int64_t> stat_dims(static_cast<size_t>(rank), 1);
    stat_dims[1] = channels;
    for (int64_t d = 2; d < rank; ++d) axes.push_back(d);
    const ops::ReduceOptions over_positions{.axes = axes, .keep_dims = true};
    auto global_mean = [&](const Tensor& t) {
      return ops::mul(all_reduce_over(ops::reduce_sum(t, over_positions), ranks), inv_count);
    };
    const Tensor mean = global_mean(x);
    const Tensor centred = ops::sub(x, mean);
    const Tensor var = global_mean(ops::mul(centred, centred));
    const Shape stat_shape(stat_dims);
    const Tensor scale =
        ops::mul(ops::rsqrt(ops::add(var, epsilon)), ops::reshape(ctx.inputs[1], stat_shape));
    const Tensor y = ops::add(ops::mul(centred, scale), ops::reshape(ctx.inputs[2], stat_shape));
    return {y, ops::reshape(mean, Shape{channels}), ops::reshape(var, Shape{channels})};
  }
};

// BatchNormGrad(dy, x, gamma, mean, var) -> (dx, dgamma, dbeta, dmean, dvar): dx needs sums over
// the whole batch of each channel, so only the channel dimension splits.
IterationSpace batch_norm_grad_space(const RuleContext& ctx) {
  const Shape& x = ctx.inputs[1].shape;
  IterationSpace space;
  space.loops = loops_of(x);
  space.loops[1].name = "the channel dimension";
  fix(space, 0, "the batch dimension (BatchNormGrad's dx needs sums over the whole batch)");
  for (int d = 2; d < static_cast<int>(x.rank()); ++d) {
    fix(space, d, "a spatial dimension (BatchNormGrad's dx needs sums over all of it)");
  }
  const std::vector<int> image = identity_dims(x.rank());
  space.inputs = {image, image, {1}, {1}, {1}};
  space.outputs = {image, {1}, {1}, {1}, {1}};
  return space;
}

// LayerNorm(x, gamma, beta) -> (y, mean, var) and LayerNormGrad(dy, x, gamma, mean, var) ->
// (dx, dgamma, dbeta): the dimensions from begin_norm_axis on are normalised together (fixed);
// gamma and beta follow them, so they are never split; the statistics (x.shape[:axis] + ones)
// follow the batch dimensions before it. dgamma and dbeta sum over the batch dimensions: in the
// gradient those are reductions.
IterationSpace layer_norm_space(const RuleContext& ctx, bool grad) {
  const Shape& x = ctx.inputs[grad ? 1 : 0].shape;
  const int64_t rank = x.rank();
  int64_t axis = ctx.attrs.get_or<int64_t>("begin_norm_axis", -1);
  if (axis < 0) axis += rank;
  IterationSpace space;
  space.loops = loops_of(x);
  std::vector<int> params, stats;
  for (int d = 0; d < static_cast<int>(rank); ++d) {
    if (d >= axis) {
      fix(space, d,
          "a normalised dimension (from begin_norm_axis on; each row's statistics need all of "
          "it)");
      params.push_back(d);
      stats.push_back(-1);
      continue;
    }
    LoopDim& loop = space.loops[static_cast<size_t>(d)];
    loop.name = "a batch dimension";
    if (grad) {
      loop.kind = LoopDim::Kind::kReduce;
      loop.name = "a batch dimension (dgamma and dbeta sum over it)";
    }
    stats.push_back(d);
  }
  const std::vector<int> image = identity_dims(rank);
  if (grad) {
    space.inputs = {image, image, params, stats, stats};
    space.outputs = {image, params, params};
  } else {
    space.inputs = {image, params, params};
    space.outputs = {image, stats, stats};
  }
  return space;
}

}  // namespace

void register_norm() {
  add({"BatchNorm"}, std::make_shared<BatchNormRule>());
  add({"BatchNormGrad"},
      space_rule("the channel dimension split; the batch and spatial dimensions are not",
                 batch_norm_grad_space));
  add({"LayerNorm"},
      space_rule("the batch dimensions (before begin_norm_axis) split; the normalised "
                 "dimensions, gamma and beta are not",
                 [](const RuleContext& ctx) { return layer_norm_space(ctx, false); }));
  add({"LayerNormGrad"},
      space_rule("the batch dimensions split as a reduction (dgamma and dbeta pending sums); "
                 "the normalised dimensions are not",
                 [](const RuleContext& ctx) { return layer_norm_space(ctx, true); }));
}

}  // namespace cleave::parallel::rules

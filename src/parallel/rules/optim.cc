// The in-place updates: ApplyMomentum, SGD, Adam (NOTE [In-place optimizer primitives]) and
// Assign.
#include "parallel/rules/rules.h"

namespace cleave::parallel::rules {
namespace {

// Every element of the parameter is updated independently from the same element of its state
// and gradient, so those inputs (the first `shaped` ones) split alike, any way; the per-step
// scalars after them (learning rate, SGD's stat, Adam's step) are held whole by every rank, and
// each rank updates its own copy of a mutable one (stat, step) exactly as one device does. The
// ops have no outputs. They run after the rewrite on local slices, except Assign, which writes
// BatchNorm's moving statistics in forward graphs: the rewrite then picks the strategy keeping
// its parameter's layout (NOTE [Step-parallel rewrite]).
IterationSpace update_space(const RuleContext& ctx, size_t shaped) {
  const Shape& param = ctx.inputs[0].shape;
  IterationSpace space;
  space.loops = loops_of(param);
  for (size_t k = 0; k < ctx.inputs.size(); ++k) {
    const int64_t rank = ctx.inputs[k].shape.rank();
    space.inputs.push_back(k < shaped ? identity_dims(rank) : whole_dims(rank));
  }
  return space;
}

std::shared_ptr<const ShardingRule> update_rule(size_t shaped) {
  return space_rule(
      "the parameter, its state and its gradient split alike (any split); the scalar inputs "
      "(learning rate, step, stat) are held whole by every rank",
      [shaped](const RuleContext& ctx) { return update_space(ctx, shaped); });
}

}  // namespace

void register_optim() {
  add({"ApplyMomentum"}, update_rule(3));  // variable, accumulation, gradient; lr
  add({"SGD"}, update_rule(3));            // parameter, gradient, accumulation; stat, lr
  add({"Adam"}, update_rule(4));           // parameter, m, v, gradient; lr, step
  add({"Assign"}, space_rule("the variable and the value split alike (any split)",
                             [](const RuleContext& ctx) { return update_space(ctx, 2); }));
}

}  // namespace cleave::parallel::rules

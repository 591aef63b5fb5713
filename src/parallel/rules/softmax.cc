// Softmax and LogSoftmax with their backward primitives SoftmaxGrad and LogSoftmaxGrad.
#include "parallel/rules/rules.h"

namespace cleave::parallel::rules {
namespace {

// Softmax, LogSoftmax and their gradients: every operand has the input's shape; the normalised
// axis is not split.
IterationSpace softmax_space(const RuleContext& ctx) {
  IterationSpace space = broadcast_space(ctx);
  const int64_t rank = ctx.inputs[0].shape.rank();
  const int64_t axis = ctx.attrs.get_or<int64_t>("axis", -1);
  fix(space, static_cast<int>(axis < 0 ? axis + rank : axis), "the axis softmax normalises");
  return space;
}

}  // namespace

void register_softmax() {
  add({"Softmax", "LogSoftmax", "SoftmaxGrad", "LogSoftmaxGrad"},
      space_rule("any split but the normalised axis", softmax_space));
}

}  // namespace cleave::parallel::rules

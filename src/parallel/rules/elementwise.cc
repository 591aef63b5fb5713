// Elementwise primitives: unary math and activations, binary arithmetic with NumPy broadcasting,
// their backward primitives, Cast, ZerosLike, OnesLike, Fill.
#include "parallel/rules/rules.h"

namespace cleave::parallel::rules {
namespace {

// Fill makes its output from attributes: every rank makes all of it.
IterationSpace fill_space(const RuleContext& ctx) {
  IterationSpace space;
  space.loops = loops_of(ctx.outputs[0].shape);
  space.outputs.push_back(whole_dims(ctx.outputs[0].shape.rank()));
  return space;
}

}  // namespace

void register_elementwise() {
  add({"Abs",      "Erf",       "Exp",       "GeLU",        "Log",      "Neg",
       "ReLU",     "Rsqrt",     "Sigmoid",   "Sqrt",        "Square",   "Tanh",
       "Cast",     "ZerosLike", "OnesLike",  "Add",         "Sub",      "Mul",
       "Div",      "Pow",       "Maximum",   "Minimum",     "AbsGrad",  "ErfGrad",
       "GeLUGrad", "ReluGrad",  "RsqrtGrad", "SigmoidGrad", "SqrtGrad", "TanhGrad"},
      broadcast_rule());
  add({"MaximumGrad", "MinimumGrad"},
      space_rule("elementwise with broadcasting; the gradient of a broadcast operand is a pending "
                 "sum over the split dimensions it was broadcast along",
                 [](const RuleContext& ctx) { return broadcast_space(ctx, true); }));
  add({"Fill"},
      space_rule("no inputs: replicated (every rank makes the whole tensor)", fill_space));
}

}  // namespace cleave::parallel::rules

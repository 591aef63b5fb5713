// Elementwise primitives: unary math and activations, binary arithmetic and comparisons with
// NumPy broadcasting, their backward primitives, Cast, Select, Fill, Dropout.
#include "parallel/rules/rules.h"

namespace cleave::parallel::rules {
namespace {

// Dropout draws each element's mask from a counter (NOTE [Dropout stream]); the local op draws
// with the counters of its slice in the global tensor, so the sharded mask is the slice of the
// mask one device draws (with the same seed on every rank: one process per rank draws the same
// seed from the same program, and a "seed" attribute fixes it).
class DropoutRule : public SpaceRule {
 public:
  DropoutRule()
      : SpaceRule("elementwise; each rank draws its slice of the single-device mask",
                  [](const RuleContext& ctx) { return broadcast_space(ctx); }) {}
  ir::Attrs local_attrs(const LowerContext& ctx) const override {
    ir::Attrs attrs = ctx.rule.attrs;
    const Layout& out = ctx.sharding.outputs[0];
    const Shape& global = ctx.rule.outputs[0].shape;
    if (out.is_replicated()) return attrs;
    attrs.set("global_shape", global.dims());
    attrs.set("slice_offset", out.slice_offset(global, ctx.rank));
    return attrs;
  }
};

// Fill makes its output from attributes: every rank makes all of it.
IterationSpace fill_space(const RuleContext& ctx) {
  IterationSpace space;
  space.loops = loops_of(ctx.outputs[0].shape);
  space.outputs.push_back(whole_dims(ctx.outputs[0].shape.rank()));
  return space;
}

}  // namespace

void register_elementwise() {
  const auto elementwise = space_rule(
      "elementwise with broadcasting: any split; a size-1 "
      "dimension broadcast against a larger one is not split",
      [](const RuleContext& ctx) { return broadcast_space(ctx); });
  add({"Abs",       "Erf",       "Exp",          "GeLU",       "Log",       "Neg",
       "ReLU",      "Rsqrt",     "Sigmoid",      "Sqrt",       "Square",    "Tanh",
       "Cast",      "ZerosLike", "OnesLike",     "LogicalNot", "Add",       "Sub",
       "Mul",       "Div",       "Pow",          "Maximum",    "Minimum",   "Equal",
       "NotEqual",  "Greater",   "GreaterEqual", "Less",       "LessEqual", "LogicalAnd",
       "LogicalOr", "Select",    "MSE",          "AbsGrad",    "ErfGrad",   "GeLUGrad",
       "ReluGrad",  "RsqrtGrad", "SigmoidGrad",  "SqrtGrad",   "TanhGrad"},
      elementwise);
  add({"MaximumGrad", "MinimumGrad"},
      space_rule("elementwise with broadcasting; the gradient of a broadcast operand is a pending "
                 "sum over the split dimensions it was broadcast along",
                 [](const RuleContext& ctx) { return broadcast_space(ctx, true); }));
  add({"Dropout"}, std::make_shared<DropoutRule>());
  add({"Fill"},
      space_rule("no inputs: replicated (every rank makes the whole tensor)", fill_space));
}

}  // namespace cleave::parallel::rules

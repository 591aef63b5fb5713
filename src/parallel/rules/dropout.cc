// Dropout: elementwise, each rank drawing its slice of the one-device mask.
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

}  // namespace

void register_dropout() { add({"Dropout"}, std::make_shared<DropoutRule>()); }

}  // namespace cleave::parallel::rules

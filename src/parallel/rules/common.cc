// Helpers shared by the rule files (rules.h).
#include <fmt/format.h>

#include "cleave/core/error.h"
#include "cleave/ir/registry.h"
#include "parallel/rules/rules.h"

namespace cleave::parallel::rules {
namespace {

// The family register_family is running (null outside it).
const char* g_family = nullptr;

}  // namespace

void register_family(const char* family, void (*register_rules)()) {
  g_family = family;
  register_rules();
  g_family = nullptr;
}

void add(std::initializer_list<const char*> ops, const std::shared_ptr<const ShardingRule>& rule) {
  for (const char* op : ops) {
    const ir::OpDef* def = ir::Registry::global().find(op);
    CLEAVE_ASSERT(g_family == nullptr || def == nullptr || def->family == g_family,
                  "the sharding rule of op '{}' is in src/parallel/rules/{}.cc, but the op is of "
                  "family '{}': the rule belongs in src/parallel/rules/{}.cc",
                  op, g_family, def->family, def->family);
    ir::Registry::global().attach_sharding_rule(op, rule);
  }
}

std::shared_ptr<const ShardingRule> space_rule(std::string summary, SpaceRule::SpaceFn space) {
  return std::make_shared<SpaceRule>(std::move(summary), std::move(space));
}

std::shared_ptr<const ShardingRule> broadcast_rule() {
  static const std::shared_ptr<const ShardingRule> rule = space_rule(
      "elementwise with broadcasting: any split; a size-1 "
      "dimension broadcast against a larger one is not split",
      [](const RuleContext& ctx) { return broadcast_space(ctx); });
  return rule;
}

std::string ImageRule::summary() const {
  return "batch and channels split; the spatial dimensions are not";
}

IterationSpace ImageRule::space(const RuleContext& ctx) const {
  IterationSpace space;
  space.loops = loops_of(ctx.outputs[0].shape);
  space.loops[0].name = "the batch dimension";
  space.loops[1].name = "the channel dimension";
  fix(space, 2, why_);
  fix(space, 3, why_);
  space.inputs.assign(ctx.inputs.size(), identity_dims(4));
  space.outputs = {identity_dims(4)};
  return space;
}

ir::Attrs ImageRule::local_attrs(const LowerContext& ctx) const {
  ir::Attrs attrs = ctx.rule.attrs;
  if (!shape_attr_.empty()) {
    attrs.set(shape_attr_, ctx.sharding.outputs[0].slice_shape(ctx.rule.outputs[0].shape).dims());
  }
  return attrs;
}

std::vector<LoopDim> loops_of(const Shape& shape) {
  std::vector<LoopDim> loops;
  for (int64_t d = 0; d < shape.rank(); ++d) {
    loops.push_back({.size = shape[d], .name = fmt::format("dim {}", d)});
  }
  return loops;
}

std::vector<int> broadcast_dims(const Shape& shape, const Shape& out) {
  std::vector<int> dims;
  const int64_t shift = out.rank() - shape.rank();
  for (int64_t d = 0; d < shape.rank(); ++d) {
    const int64_t o = d + shift;
    dims.push_back(o >= 0 && shape[d] == out[o] ? static_cast<int>(o) : -1);
  }
  return dims;
}

std::vector<int> identity_dims(int64_t rank) {
  std::vector<int> dims;
  for (int64_t d = 0; d < rank; ++d) dims.push_back(static_cast<int>(d));
  return dims;
}

std::vector<int> whole_dims(int64_t rank) {
  return std::vector<int>(static_cast<size_t>(rank), -1);
}

IterationSpace broadcast_space(const RuleContext& ctx, bool reduce_broadcast) {
  // The loops are the broadcast of every operand's shape (output 0 of a forward op; the largest
  // operand of a gradient whose outputs are the smaller ones).
  Shape full = ctx.outputs.empty() ? Shape() : ctx.outputs[0].shape;
  auto widen = [&](const Shape& s) {
    if (s.rank() > full.rank()) {
      std::vector<int64_t> dims(static_cast<size_t>(s.rank() - full.rank()), 1);
      dims.insert(dims.end(), full.dims().begin(), full.dims().end());
      full = Shape(std::move(dims));
    }
    const int64_t shift = full.rank() - s.rank();
    for (int64_t d = 0; d < s.rank(); ++d) {
      if (full[d + shift] == 1) full[d + shift] = s[d];
    }
  };
  for (const ir::TensorMeta& m : ctx.inputs) widen(m.shape);
  for (const ir::TensorMeta& m : ctx.outputs) widen(m.shape);
  IterationSpace space;
  space.loops = loops_of(full);
  if (reduce_broadcast) {
    for (LoopDim& l : space.loops) l.kind = LoopDim::Kind::kReduce;
  }
  for (const ir::TensorMeta& m : ctx.inputs) space.inputs.push_back(broadcast_dims(m.shape, full));
  for (const ir::TensorMeta& m : ctx.outputs) {
    space.outputs.push_back(broadcast_dims(m.shape, full));
  }
  return space;
}

void fix(IterationSpace& space, int l, std::string why) {
  LoopDim& loop = space.loops[static_cast<size_t>(l)];
  loop.kind = LoopDim::Kind::kFixed;
  loop.name = std::move(why);
}

Shape local_shape(const Shape& global, const Layout& layout) { return layout.slice_shape(global); }

}  // namespace cleave::parallel::rules

// Primitives that rearrange elements: the views (Reshape, Flatten, ExpandDims, Squeeze),
// Transpose, Tile, BroadcastTo.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <functional>

#include "cleave/ir/dispatch.h"
#include "parallel/rules/rules.h"

namespace cleave::parallel::rules {
namespace {

// NOTE [Reshape sharding]
// A reshape keeps the row-major order of the elements. Its dimensions fall into groups whose
// sizes multiply to the same number on both sides ((8, 16, 5, 5) -> (8, 400): {8} -> {8} and
// {16, 5, 5} -> {400}); dimensions of size 1 belong to no group and are never split. A split of
// the first input dimension of a group cuts the group's elements into contiguous blocks, which
// is a split of the group's first output dimension when it divides it: rank r's slice of the
// input is then exactly its slice of the output, and the local op reshapes slices. Any other
// split (a later dimension of a group, or one that does not divide the first output dimension)
// would interleave the ranks' elements: it is rejected with the valid splits named.
struct ReshapeGroup {
  std::vector<int64_t> in, out;  // dimension indices
};

std::vector<ReshapeGroup> reshape_groups(const Shape& in, const Shape& out) {
  std::vector<ReshapeGroup> groups;
  int64_t i = 0, j = 0;
  auto skip_ones = [](const Shape& s, int64_t& d) {
    while (d < s.rank() && s[d] == 1) ++d;
  };
  while (true) {
    skip_ones(in, i);
    skip_ones(out, j);
    if (i >= in.rank() || j >= out.rank()) break;
    ReshapeGroup g;
    int64_t pi = in[i], pj = out[j];
    g.in.push_back(i++);
    g.out.push_back(j++);
    while (pi != pj) {
      if (pi < pj) {
        pi *= in[i];
        g.in.push_back(i++);
      } else {
        pj *= out[j];
        g.out.push_back(j++);
      }
    }
    groups.push_back(std::move(g));
  }
  return groups;
}

class ReshapeRule : public ShardingRule {
 public:
  std::string summary() const override {
    return "the first dimension of each group of dimensions the reshape merges or splits, when "
           "its split divides the group's first output dimension (NOTE [Reshape sharding])";
  }

  OpSharding infer(const RuleContext& ctx, const ir::Strategy& strategy) const override {
    const Shape& in = ctx.inputs[0].shape;
    const Shape& out = ctx.outputs[0].shape;
    if (strategy.size() != 1 || static_cast<int64_t>(strategy[0].size()) != in.rank()) {
      invalid_strategy(ctx, strategy,
                       fmt::format("expected one entry of {} splits (input 0 has rank {})",
                                   in.rank(), in.rank()));
    }
    const std::vector<int64_t>& s = strategy[0];
    std::vector<int> out_axis(static_cast<size_t>(out.rank()), -1);
    std::vector<bool> splittable(static_cast<size_t>(in.rank()), false);
    for (const ReshapeGroup& g : reshape_groups(in, out)) {
      splittable[static_cast<size_t>(g.in[0])] = true;
      const int64_t split = s[static_cast<size_t>(g.in[0])];
      if (split > 1) {
        if (out[g.out[0]] % split != 0 || in[g.in[0]] % split != 0) {
          invalid_strategy(ctx, strategy,
                           fmt::format("input 0 dim {} is split {} ways, but the reshape to {} "
                                       "makes it part of output dim {} of size {}; a split of "
                                       "it must divide both {} and {}",
                                       g.in[0], split, out.to_string(), g.out[0], out[g.out[0]],
                                       in[g.in[0]], out[g.out[0]]));
        }
        out_axis[static_cast<size_t>(g.out[0])] = static_cast<int>(g.in[0]);
      }
    }
    int64_t used = 1;
    for (int64_t d = 0; d < in.rank(); ++d) {
      const int64_t split = s[static_cast<size_t>(d)];
      if (split < 1) {
        invalid_strategy(ctx, strategy,
                         fmt::format("input 0 dim {} is split {} ways; splits "
                                     "must be >= 1",
                                     d, split));
      }
      if (split > 1 && !splittable[static_cast<size_t>(d)]) {
        invalid_strategy(ctx, strategy,
                         fmt::format("input 0 dim {} is split {} ways, but the reshape from {} to "
                                     "{} merges it after a larger dimension, which would "
                                     "interleave the ranks' elements; only the first dimension "
                                     "of each merged group can be split (NOTE [Reshape "
                                     "sharding])",
                                     d, split, in.to_string(), out.to_string()));
      }
      used *= split;
    }
    if (ctx.device_num % used != 0) {
      invalid_strategy(ctx, strategy,
                       fmt::format("it uses {} devices, which does not divide device_num {}", used,
                                   ctx.device_num));
    }
    OpSharding r;
    r.strategy = strategy;
    r.loop_splits = s;
    r.device_matrix = s;
    if (r.device_matrix.empty()) r.device_matrix.push_back(1);
    if (ctx.device_num / used > 1) r.device_matrix.push_back(ctx.device_num / used);
    std::vector<Layout::DimAxes> in_map, out_map;
    for (int64_t d = 0; d < in.rank(); ++d) {
      in_map.push_back(s[static_cast<size_t>(d)] > 1 ? Layout::DimAxes{static_cast<int>(d)}
                                                     : Layout::DimAxes{});
    }
    for (int a : out_axis) out_map.push_back(a >= 0 ? Layout::DimAxes{a} : Layout::DimAxes{});
    r.inputs = {Layout(r.device_matrix, std::move(in_map))};
    r.outputs = {Layout(r.device_matrix, std::move(out_map))};
    return r;
  }

  ir::Strategy default_strategy(const RuleContext& ctx) const override {
    const Shape& in = ctx.inputs[0].shape;
    ir::Strategy s{std::vector<int64_t>(static_cast<size_t>(in.rank()), 1)};
    if (in.rank() > 0 && ctx.device_num > 1) {
      s[0][0] = ctx.device_num;
      try {
        infer(ctx, s);
        return s;
      } catch (const Error&) {
        s[0][0] = 1;
      }
    }
    return s;
  }

  std::vector<OpSharding> shardings(const RuleContext& ctx) const override {
    const Shape& in = ctx.inputs[0].shape;
    std::vector<OpSharding> out;
    std::vector<int64_t> s(static_cast<size_t>(in.rank()), 1);
    std::function<void(int64_t, int64_t)> walk = [&](int64_t d, int64_t used) {
      if (d == in.rank()) {
        try {
          out.push_back(infer(ctx, {s}));
        } catch (const Error&) {
        }
        return;
      }
      for (int64_t v = 1; used * v <= ctx.device_num; ++v) {
        if (ctx.device_num % (used * v) != 0 || in[d] % v != 0) continue;
        s[static_cast<size_t>(d)] = v;
        walk(d + 1, used * v);
      }
      s[static_cast<size_t>(d)] = 1;
    };
    walk(0, 1);
    return out;
  }

  ir::Attrs local_attrs(const LowerContext& ctx) const override {
    ir::Attrs attrs = ctx.rule.attrs;
    if (ctx.rule.op.name == "Reshape") {
      attrs.set("shape", ctx.sharding.outputs[0].slice_shape(ctx.rule.outputs[0].shape).dims());
    }
    return attrs;
  }
};

IterationSpace transpose_space(const RuleContext& ctx) {
  const Shape& in = ctx.inputs[0].shape;
  std::vector<int64_t> perm = ctx.attrs.get<std::vector<int64_t>>("perm", ctx.op.name);
  IterationSpace space;
  space.loops = loops_of(in);
  space.inputs = {identity_dims(in.rank())};
  std::vector<int> out;
  for (int64_t p : perm) out.push_back(static_cast<int>(p < 0 ? p + in.rank() : p));
  space.outputs = {std::move(out)};
  return space;
}

// Tile: a tiled dimension (multiple > 1) repeats its whole extent, so it is not split.
IterationSpace tile_space(const RuleContext& ctx) {
  const Shape& in = ctx.inputs[0].shape;
  const Shape& out = ctx.outputs[0].shape;
  const auto& multiples = ctx.attrs.get<std::vector<int64_t>>("multiples", ctx.op.name);
  IterationSpace space;
  space.loops = loops_of(out);
  const int64_t shift = out.rank() - in.rank();
  for (int64_t d = 0; d < out.rank(); ++d) {
    const int64_t at = d - (out.rank() - static_cast<int64_t>(multiples.size()));
    const int64_t m = at >= 0 ? multiples[static_cast<size_t>(at)] : 1;
    if (m != 1 || d < shift) fix(space, static_cast<int>(d), "a tiled dimension");
  }
  std::vector<int> dims;
  for (int64_t d = 0; d < in.rank(); ++d) dims.push_back(static_cast<int>(d + shift));
  space.inputs = {std::move(dims)};
  space.outputs = {identity_dims(out.rank())};
  return space;
}

class BroadcastToRule : public SpaceRule {
 public:
  BroadcastToRule()
      : SpaceRule("the input's dimensions split; new and broadcast dimensions are not",
                  [](const RuleContext& ctx) { return broadcast_space(ctx); }) {}
  ir::Attrs local_attrs(const LowerContext& ctx) const override {
    ir::Attrs attrs = ctx.rule.attrs;
    attrs.set("shape", ctx.sharding.outputs[0].slice_shape(ctx.rule.outputs[0].shape).dims());
    return attrs;
  }
};

}  // namespace

void register_shape() {
  add({"Reshape", "Flatten", "ExpandDims", "Squeeze"}, std::make_shared<ReshapeRule>());
  add({"Transpose"}, space_rule("any split; the output's map is permuted", transpose_space));
  add({"Tile"}, space_rule("dimensions that are not tiled", tile_space));
  add({"BroadcastTo"}, std::make_shared<BroadcastToRule>());
}

}  // namespace cleave::parallel::rules

// Primitives that cut tensors into pieces or join them: Concat, Split, Slice, StridedSlice and
// the backward SliceGrad and StridedSliceGrad.
//
// A dimension the op joins, divides or cuts needs its whole extent on every rank: the concat and
// split axes, and a dimension a slice takes part of (or steps through, or reverses). Every other
// dimension is copied whole, so it may be split any way, and the local op is the same copy of the
// local extent (local_attrs rewrites the slice bounds of those dimensions to it).
#include <fmt/format.h>

#include <algorithm>

#include "parallel/rules/rules.h"

namespace cleave::parallel::rules {
namespace {

int64_t normalized_axis(int64_t axis, int64_t rank) { return axis < 0 ? axis + rank : axis; }

// ---- Concat, Split ----

// Concat: one loop per output dimension; every input indexes them all, and the concat axis is
// fixed (each input holds a different stretch of it).
IterationSpace concat_space(const RuleContext& ctx) {
  const Shape& out = ctx.outputs[0].shape;
  IterationSpace space;
  space.loops = loops_of(out);
  for (int64_t d = 0; d < out.rank(); ++d) {
    space.loops[static_cast<size_t>(d)].name = fmt::format("dim {}, which every input shares", d);
  }
  fix(space,
      static_cast<int>(normalized_axis(ctx.attrs.get<int64_t>("axis", ctx.op.name), out.rank())),
      "the concat axis");
  for (size_t k = 0; k < ctx.inputs.size(); ++k) space.inputs.push_back(identity_dims(out.rank()));
  space.outputs = {identity_dims(out.rank())};
  return space;
}

// Split: one loop per input dimension; every output indexes them all, and the split axis is
// fixed (each output is a different stretch of it).
IterationSpace split_space(const RuleContext& ctx) {
  const Shape& in = ctx.inputs[0].shape;
  IterationSpace space;
  space.loops = loops_of(in);
  fix(space,
      static_cast<int>(normalized_axis(ctx.attrs.get<int64_t>("axis", ctx.op.name), in.rank())),
      "the split axis");
  space.inputs = {identity_dims(in.rank())};
  space.outputs.assign(ctx.outputs.size(), identity_dims(in.rank()));
  return space;
}

// ---- Slice, SliceGrad ----

// Per dimension of the sliced tensor `full`: empty when the slice (begin, size; size -1: to the
// end) takes all of it, else the loop name saying how it is cut.
std::vector<std::string> slice_cuts(const Shape& full, const std::vector<int64_t>& begin,
                                    const std::vector<int64_t>& size, const char* who) {
  std::vector<std::string> cuts;
  for (int64_t d = 0; d < full.rank(); ++d) {
    const auto i = static_cast<size_t>(d);
    const int64_t n = size[i] == -1 ? full[d] - begin[i] : size[i];
    cuts.push_back(begin[i] == 0 && n == full[d]
                       ? std::string()
                       : fmt::format("a dimension {} cuts (begin {}, size {} of {})", who, begin[i],
                                     n, full[d]));
  }
  return cuts;
}

// One loop per dimension of `full`; the cut ones fixed. `in`/`out` index them in order.
IterationSpace cut_space(const Shape& full, const std::vector<std::string>& cuts,
                         std::vector<int> in, std::vector<int> out) {
  IterationSpace space;
  space.loops = loops_of(full);
  for (size_t d = 0; d < cuts.size(); ++d) {
    if (!cuts[d].empty()) fix(space, static_cast<int>(d), cuts[d]);
  }
  space.inputs = {std::move(in)};
  space.outputs = {std::move(out)};
  return space;
}

class SliceRule : public ShardingRule {
 public:
  std::string summary() const override {
    return "dimensions the slice takes whole, any split; a cut dimension is not split";
  }
  IterationSpace space(const RuleContext& ctx) const override {
    const Shape& in = ctx.inputs[0].shape;
    return cut_space(in, cuts(ctx), identity_dims(in.rank()), identity_dims(in.rank()));
  }
  ir::Attrs local_attrs(const LowerContext& ctx) const override {
    const Shape local = ctx.sharding.inputs[0].slice_shape(ctx.rule.inputs[0].shape);
    const std::vector<std::string> cut = cuts(ctx.rule);
    auto size = ctx.rule.attrs.get<std::vector<int64_t>>("size");
    for (int64_t d = 0; d < local.rank(); ++d) {
      if (cut[static_cast<size_t>(d)].empty()) size[static_cast<size_t>(d)] = local[d];
    }
    ir::Attrs attrs = ctx.rule.attrs;
    attrs.set("size", std::move(size));
    return attrs;
  }

 private:
  static std::vector<std::string> cuts(const RuleContext& ctx) {
    return slice_cuts(ctx.inputs[0].shape, ctx.attrs.get<std::vector<int64_t>>("begin"),
                      ctx.attrs.get<std::vector<int64_t>>("size"), "the slice");
  }
};

// SliceGrad(dy; begin, shape): loops over `shape`; dy indexes them all.
class SliceGradRule : public ShardingRule {
 public:
  std::string summary() const override {
    return "dimensions the forward Slice took whole, any split; a dimension it cut is not split";
  }
  IterationSpace space(const RuleContext& ctx) const override {
    const Shape& out = ctx.outputs[0].shape;
    const std::vector<std::string> cuts =
        slice_cuts(out, ctx.attrs.get<std::vector<int64_t>>("begin"), ctx.inputs[0].shape.dims(),
                   "the forward Slice");
    return cut_space(out, cuts, identity_dims(out.rank()), identity_dims(out.rank()));
  }
  ir::Attrs local_attrs(const LowerContext& ctx) const override {
    ir::Attrs attrs = ctx.rule.attrs;
    attrs.set("shape", ctx.sharding.outputs[0].slice_shape(ctx.rule.outputs[0].shape).dims());
    return attrs;
  }
};

// ---- StridedSlice, StridedSliceGrad ----

// How a StridedSlice (NOTE [StridedSlice semantics] in src/ir/ops/slice.cc) treats each
// dimension of its input `full`: `cut` is empty when it takes the whole dimension in order
// (start 0, stop n, stride 1, not shrunk), else the loop name saying how it is cut.
struct StridedDims {
  std::vector<std::string> cut;
  std::vector<bool> shrunk;
};

StridedDims strided_dims(const Shape& full, const ir::Attrs& attrs, const char* who) {
  const auto& begin = attrs.get<std::vector<int64_t>>("begin");
  const auto& end = attrs.get<std::vector<int64_t>>("end");
  const auto& strides = attrs.get<std::vector<int64_t>>("strides");
  const int64_t begin_mask = attrs.get_or<int64_t>("begin_mask", 0);
  const int64_t end_mask = attrs.get_or<int64_t>("end_mask", 0);
  const int64_t shrink_mask = attrs.get_or<int64_t>("shrink_axis_mask", 0);
  StridedDims dims;
  for (int64_t d = 0; d < full.rank(); ++d) {
    const int64_t n = full[d];
    const auto i = static_cast<size_t>(d);
    const bool given = i < begin.size();
    const bool shrunk = given && ((shrink_mask >> d) & 1);
    dims.shrunk.push_back(shrunk);
    if (!given) {
      dims.cut.emplace_back();
    } else if (shrunk) {
      dims.cut.push_back(
          fmt::format("a dimension {} takes one element of (shrink_axis_mask)", who));
    } else if (strides[i] != 1) {
      dims.cut.push_back(fmt::format("a dimension {} {} (stride {})", who,
                                     strides[i] < 0 ? "reverses" : "steps through", strides[i]));
    } else {
      auto resolve = [n](int64_t v) { return std::clamp(v < 0 ? v + n : v, int64_t{0}, n); };
      const int64_t start = (begin_mask >> d) & 1 ? 0 : resolve(begin[i]);
      const int64_t stop = (end_mask >> d) & 1 ? n : resolve(end[i]);
      dims.cut.push_back(start == 0 && stop == n
                             ? std::string()
                             : fmt::format("a dimension {} cuts (elements [{}, {}) of {})", who,
                                           start, std::max(start, stop), n));
    }
  }
  return dims;
}

// The loops of the sliced tensor's dimensions that the sliced result keeps (not shrunk).
std::vector<int> kept_dims(const StridedDims& dims) {
  std::vector<int> kept;
  for (size_t d = 0; d < dims.shrunk.size(); ++d) {
    if (!dims.shrunk[d]) kept.push_back(static_cast<int>(d));
  }
  return kept;
}

// The StridedSlice attributes with the bounds of every dimension taken whole made those of
// `local`, the local extent of the sliced tensor.
ir::Attrs local_strided_attrs(const ir::Attrs& global, const StridedDims& dims,
                              const Shape& local) {
  auto begin = global.get<std::vector<int64_t>>("begin");
  auto end = global.get<std::vector<int64_t>>("end");
  for (size_t d = 0; d < begin.size(); ++d) {
    if (!dims.cut[d].empty()) continue;
    begin[d] = 0;
    end[d] = local[static_cast<int64_t>(d)];
  }
  ir::Attrs attrs = global;
  attrs.set("begin", std::move(begin));
  attrs.set("end", std::move(end));
  return attrs;
}

class StridedSliceRule : public ShardingRule {
 public:
  std::string summary() const override {
    return "dimensions the strided slice takes whole and in order, any split; a cut, strided, "
           "reversed or shrunk dimension is not split";
  }
  IterationSpace space(const RuleContext& ctx) const override {
    const Shape& in = ctx.inputs[0].shape;
    const StridedDims dims = strided_dims(in, ctx.attrs, "the strided slice");
    return cut_space(in, dims.cut, identity_dims(in.rank()), kept_dims(dims));
  }
  ir::Attrs local_attrs(const LowerContext& ctx) const override {
    const Shape& in = ctx.rule.inputs[0].shape;
    return local_strided_attrs(ctx.rule.attrs, strided_dims(in, ctx.rule.attrs, ""),
                               ctx.sharding.inputs[0].slice_shape(in));
  }
};

// StridedSliceGrad(dy; StridedSlice's attributes, shape): loops over `shape`; dy indexes those
// the forward kept.
class StridedSliceGradRule : public ShardingRule {
 public:
  std::string summary() const override {
    return "dimensions the forward StridedSlice took whole and in order, any split; a dimension "
           "it cut, strided, reversed or shrunk is not split";
  }
  IterationSpace space(const RuleContext& ctx) const override {
    const Shape& out = ctx.outputs[0].shape;
    const StridedDims dims = strided_dims(out, ctx.attrs, "the forward StridedSlice");
    return cut_space(out, dims.cut, kept_dims(dims), identity_dims(out.rank()));
  }
  ir::Attrs local_attrs(const LowerContext& ctx) const override {
    const Shape& out = ctx.rule.outputs[0].shape;
    const Shape local = ctx.sharding.outputs[0].slice_shape(out);
    ir::Attrs attrs =
        local_strided_attrs(ctx.rule.attrs, strided_dims(out, ctx.rule.attrs, ""), local);
    attrs.set("shape", local.dims());
    return attrs;
  }
};

}  // namespace

void register_slice() {
  add({"Concat"},
      space_rule("any split but the concat axis, every input split alike", concat_space));
  add({"Split"}, space_rule("any split but the split axis", split_space));
  add({"Slice"}, std::make_shared<SliceRule>());
  add({"SliceGrad"}, std::make_shared<SliceGradRule>());
  add({"StridedSlice"}, std::make_shared<StridedSliceRule>());
  add({"StridedSliceGrad"}, std::make_shared<StridedSliceGradRule>());
}

}  // namespace cleave::parallel::rules

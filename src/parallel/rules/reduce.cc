// Reductions (ReduceSum, ReduceMean, ReduceMax, ReduceMin, ReduceProd) and ArgMax/ArgMin.
#include <algorithm>

#include "cleave/ops/elementwise.h"
#include "parallel/rules/rules.h"

namespace cleave::parallel::rules {
namespace {

int64_t axis_attr(const RuleContext& ctx, const char* name = "axis") {
  const int64_t rank = ctx.inputs[0].shape.rank();
  const int64_t a = ctx.attrs.get<int64_t>(name, ctx.op.name);
  return a < 0 ? a + rank : a;
}

// Reduce*: a split reduced dimension leaves each rank a reduction of its slice, completed over
// the ranks by an AllReduce of the same kind (a mean: the local mean scaled by 1 / splits, then
// summed). A product is not completed that way: ReduceProd's reduced dimensions are not split.
class ReduceRule : public ShardingRule {
 public:
  explicit ReduceRule(PartialOp op, bool splittable = true) : op_(op), splittable_(splittable) {}
  std::string summary() const override {
    return splittable_ ? "any split; a split reduced dimension leaves a pending reduction "
                         "(AllReduce)"
                       : "kept dimensions split; the reduced dimensions are not";
  }
  IterationSpace space(const RuleContext& ctx) const override {
    const Shape& in = ctx.inputs[0].shape;
    std::vector<int64_t> axes = ctx.attrs.get<std::vector<int64_t>>("axis", ctx.op.name);
    for (int64_t& a : axes) a = a < 0 ? a + in.rank() : a;
    if (axes.empty()) {
      for (int64_t d = 0; d < in.rank(); ++d) axes.push_back(d);
    }
    const bool keep = ctx.attrs.get_or("keep_dims", false);
    IterationSpace space;
    space.loops = loops_of(in);
    std::vector<int> out;
    for (int64_t d = 0; d < in.rank(); ++d) {
      const bool reduced = std::find(axes.begin(), axes.end(), d) != axes.end();
      if (!reduced) {
        out.push_back(static_cast<int>(d));
        continue;
      }
      LoopDim& loop = space.loops[static_cast<size_t>(d)];
      if (splittable_) {
        loop.kind = LoopDim::Kind::kReduce;
        loop.reduce = op_;
        loop.name = "a reduced dimension";
      } else {
        fix(space, static_cast<int>(d), "a dimension ReduceProd reduces");
      }
      if (keep) out.push_back(-1);
    }
    space.inputs = {identity_dims(in.rank())};
    space.outputs = {std::move(out)};
    // A full reduction's default splits the input's first dimension (a pending reduction of
    // one element per rank) rather than gathering the input on every rank.
    space.batch_loop = in.rank() > 0 ? 0 : -1;
    return space;
  }
  std::vector<Tensor> lower(const LowerContext& ctx) const override {
    std::vector<Tensor> out = ShardingRule::lower(ctx);
    if (ctx.rule.op.name != "ReduceMean") return out;
    // A mean over a split dimension: each rank's mean of its slice, weighted by its share.
    int64_t splits = 1;
    for (size_t l = 0; l < ctx.sharding.space.loops.size(); ++l) {
      if (ctx.sharding.space.loops[l].kind == LoopDim::Kind::kReduce) {
        splits *= ctx.sharding.split(static_cast<int>(l));
      }
    }
    if (splits > 1) out[0] = ops::mul(out[0], 1.0 / static_cast<double>(splits));
    return out;
  }

 private:
  PartialOp op_;
  bool splittable_;
};

// ArgMax/ArgMin: the index along a split axis would be local; the axis is not split.
IterationSpace arg_space(const RuleContext& ctx) {
  const Shape& in = ctx.inputs[0].shape;
  const int64_t axis = axis_attr(ctx);
  IterationSpace space;
  space.loops = loops_of(in);
  fix(space, static_cast<int>(axis), "the axis the index is taken along");
  space.inputs = {identity_dims(in.rank())};
  std::vector<int> out = identity_dims(in.rank());
  out.erase(out.begin() + axis);
  space.outputs = {std::move(out)};
  return space;
}

}  // namespace

void register_reduce() {
  add({"ReduceSum", "ReduceMean"}, std::make_shared<ReduceRule>(PartialOp::kSum));
  add({"ReduceMax"}, std::make_shared<ReduceRule>(PartialOp::kMax));
  add({"ReduceMin"}, std::make_shared<ReduceRule>(PartialOp::kMin));
  add({"ReduceProd"}, std::make_shared<ReduceRule>(PartialOp::kSum, false));
  add({"ArgMax", "ArgMin"},
      space_rule("any split but the axis the index is taken along", arg_space));
}

}  // namespace cleave::parallel::rules

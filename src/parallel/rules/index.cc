// Primitives driven by integer index tensors: Gather (with a vocabulary split), OneHot and
// UnsortedSegmentSum.
#include <fmt/format.h>

#include "cleave/ops/elementwise.h"
#include "cleave/ops/shape.h"
#include "parallel/rules/rules.h"

namespace cleave::parallel::rules {
namespace {

// NOTE [Vocabulary-split Gather]
// Gather(params, indices; axis) reads rows of params along `axis` (the *vocabulary*, V rows of an
// embedding table) at the given indices. Its loops are params' dimensions, then the indices'
// dimensions; the output indexes params' dimensions before and after the axis and the indices'
// dimensions, which are all parallel. The vocabulary loop is a reduction: split n ways, rank r
// holds rows [offset, offset + V / n) with offset = r' * V / n (r' its slice of that loop), and
// computes the rows its slice holds and zeros elsewhere:
//   local   = indices - offset
//   mine    = local >= 0 and local < V / n
//   out     = select(mine, gather(params_slice, select(mine, local, 0)), 0)
// (an index another rank holds gathers row 0 and is zeroed after: select, not a multiplication,
// so that an inf in row 0 cannot leak a NaN). Every output element is then the gathered row on
// exactly one rank of the vocabulary axis and zero on the others: a pending sum over it, which the
// rewrite completes with an AllReduce, as MindSpore's GatherV2 with a split first dimension does.
// The gradient needs nothing more: autodiff of the local graph scatter-adds the output gradient
// into the local rows at the selected indices, and the zeroed elements contribute nothing.
class GatherRule : public ShardingRule {
 public:
  std::string summary() const override {
    return "any split; a split of the gathered axis (a vocabulary split) masks the indices each "
           "rank does not hold and leaves the output a pending sum (AllReduce)";
  }
  IterationSpace space(const RuleContext& ctx) const override {
    const Shape& params = ctx.inputs[0].shape;
    const Shape& indices = ctx.inputs[1].shape;
    const int64_t a = axis(ctx);
    IterationSpace space;
    space.loops = loops_of(params);
    for (LoopDim& l : space.loops) l.name = "a dimension of input 0 (params)";
    LoopDim& vocab = space.loops[static_cast<size_t>(a)];
    vocab.kind = LoopDim::Kind::kReduce;
    vocab.name = "the gathered axis";
    for (int64_t d = 0; d < indices.rank(); ++d) {
      space.loops.push_back({.size = indices[d], .name = "a dimension of input 1 (indices)"});
    }
    const int p = static_cast<int>(params.rank());
    space.inputs = {identity_dims(params.rank()), {}};
    std::vector<int> out;
    for (int d = 0; d < a; ++d) out.push_back(d);
    for (int d = 0; d < indices.rank(); ++d) {
      space.inputs[1].push_back(p + d);
      out.push_back(p + d);
    }
    for (int d = static_cast<int>(a) + 1; d < p; ++d) out.push_back(d);
    space.outputs = {std::move(out)};
    return space;
  }
  std::vector<Tensor> lower(const LowerContext& ctx) const override {
    const int a = static_cast<int>(axis(ctx.rule));
    if (ctx.sharding.split(a) <= 1) return ShardingRule::lower(ctx);
    const Tensor& params = ctx.inputs[0];
    const Tensor& indices = ctx.inputs[1];
    const DType index_type = indices.dtype();
    const int64_t rows = params.shape()[a];
    const int64_t offset = ctx.loop_index(a) * rows;
    const Tensor local = ops::sub(indices, static_cast<double>(offset));
    const Tensor mine =
        ops::logical_and(ops::greater_equal(local, Tensor::scalar(0, index_type)),
                         ops::less(local, Tensor::scalar(static_cast<double>(rows), index_type)));
    const Tensor gathered =
        ops::gather(params, ops::select(mine, local, Tensor::scalar(0, index_type)), a);
    // `mine` lined up with the output: the indices' dimensions between params' dimensions.
    std::vector<int64_t> mask_shape(static_cast<size_t>(a), 1);
    const auto& index_dims = indices.shape().dims();
    mask_shape.insert(mask_shape.end(), index_dims.begin(), index_dims.end());
    mask_shape.resize(static_cast<size_t>(gathered.rank()), 1);
    return {ops::select(ops::reshape(mine, Shape(mask_shape)), gathered,
                        Tensor::scalar(0, gathered.dtype()))};
  }

 private:
  static int64_t axis(const RuleContext& ctx) {
    const int64_t a = ctx.attrs.get<int64_t>("axis", ctx.op.name);
    return a < 0 ? a + ctx.inputs[0].shape.rank() : a;
  }
};

// OneHot(indices; depth, axis): the indices' dimensions are parallel; the depth dimension is
// made, not read, so every rank makes all of it.
IterationSpace one_hot_space(const RuleContext& ctx) {
  const Shape& in = ctx.inputs[0].shape;
  int64_t axis = ctx.attrs.get<int64_t>("axis", ctx.op.name);
  if (axis == -1) axis = in.rank();
  IterationSpace space;
  space.loops = loops_of(in);
  space.inputs = {identity_dims(in.rank())};
  std::vector<int> out = identity_dims(in.rank());
  out.insert(out.begin() + axis, -1);
  space.outputs = {std::move(out)};
  space.batch_loop = in.rank() > 0 ? 0 : -1;
  return space;
}

// UnsortedSegmentSum(data, segment_ids; num_segments): the dimensions segment_ids covers (data's
// leading ones) are summed into segments, so they are reductions: split, each rank sums its
// slice into every segment and the output is a pending sum. The trailing dimensions are parallel;
// the segment dimension of the output is made whole on every rank.
IterationSpace segment_sum_space(const RuleContext& ctx) {
  const Shape& data = ctx.inputs[0].shape;
  const int64_t k = ctx.inputs[1].shape.rank();
  IterationSpace space;
  space.loops = loops_of(data);
  for (int64_t d = 0; d < k; ++d) {
    LoopDim& loop = space.loops[static_cast<size_t>(d)];
    loop.kind = LoopDim::Kind::kReduce;
    loop.name = "a dimension the segment ids cover";
  }
  space.inputs = {identity_dims(data.rank()), identity_dims(k)};
  std::vector<int> out{-1};
  for (int64_t d = k; d < data.rank(); ++d) out.push_back(static_cast<int>(d));
  space.outputs = {std::move(out)};
  // Data parallel: the samples split, the segment sums completed by an AllReduce.
  space.batch_loop = data.rank() > 0 ? 0 : -1;
  return space;
}

}  // namespace

void register_index() {
  add({"Gather"}, std::make_shared<GatherRule>());
  add({"OneHot"}, space_rule("the indices' dimensions, any split; the depth dimension is not split",
                             one_hot_space));
  add({"UnsortedSegmentSum"},
      space_rule("any split of the data; a split segmented dimension leaves a pending sum "
                 "(AllReduce); the output's segment dimension is not split",
                 segment_sum_space));
}

}  // namespace cleave::parallel::rules

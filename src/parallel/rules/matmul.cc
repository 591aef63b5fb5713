// MatMul, BatchMatMul (with transposes and broadcast batch dimensions), BiasAdd.
#include "parallel/rules/rules.h"

namespace cleave::parallel::rules {
namespace {

// Loops: the batch dimensions of the output (BatchMatMul), then i (rows of the output), k (the
// reduction dimension) and j (columns): MindSpore's device matrix order for MatMul, [i, k, j],
// so that ((2, 4), (4, 1)) on 8 devices is the matrix [2, 4, 1].
class MatMulRule : public ShardingRule {
 public:
  ComputeClass compute_class() const override { return ComputeClass::kMatMul; }
  std::string summary() const override {
    return "rows, reduction and columns (and batch) split; a split reduction dimension leaves "
           "the output a pending sum (AllReduce); broadcast batch dimensions are not split";
  }
  IterationSpace space(const RuleContext& ctx) const override {
    const Shape& a = ctx.inputs[0].shape;
    const Shape& b = ctx.inputs[1].shape;
    const Shape& out = ctx.outputs[0].shape;
    const bool ta = ctx.attrs.get_or("transpose_a", false);
    const bool tb = ctx.attrs.get_or("transpose_b", false);
    const int64_t batch = out.rank() - 2;
    IterationSpace space;
    for (int64_t d = 0; d < batch; ++d) {
      space.loops.push_back({.size = out[d], .name = "a batch dimension"});
    }
    const int i = static_cast<int>(batch), k = i + 1, j = i + 2;
    space.loops.push_back({.size = out[batch], .name = "the rows of the output"});
    space.loops.push_back({.size = a[a.rank() - (ta ? 2 : 1)],
                           .kind = LoopDim::Kind::kReduce,
                           .name = "the reduction dimension"});
    space.loops.push_back({.size = out[batch + 1], .name = "the columns of the output"});
    auto operand = [&](const Shape& s, int first, int second) {
      std::vector<int> dims;
      const int64_t shift = batch - (s.rank() - 2);
      for (int64_t d = 0; d < s.rank() - 2; ++d) {
        dims.push_back(s[d] == out[d + shift] ? static_cast<int>(d + shift) : -1);
      }
      dims.push_back(first);
      dims.push_back(second);
      return dims;
    };
    space.inputs.push_back(ta ? operand(a, k, i) : operand(a, i, k));
    space.inputs.push_back(tb ? operand(b, j, k) : operand(b, k, j));
    std::vector<int> o = identity_dims(batch);
    o.push_back(i);
    o.push_back(j);
    space.outputs.push_back(std::move(o));
    return space;
  }
  double flops(const RuleContext& ctx) const override {
    const Shape& out = ctx.outputs[0].shape;
    const Shape& a = ctx.inputs[0].shape;
    const int64_t k = a[a.rank() - (ctx.attrs.get_or("transpose_a", false) ? 2 : 1)];
    return 2.0 * static_cast<double>(out.numel()) * static_cast<double>(k);
  }
};

// BiasAdd(x (N, C, ...), bias (C)): the bias follows x's channel dimension (dim 1).
IterationSpace bias_add_space(const RuleContext& ctx) {
  IterationSpace space;
  const Shape& x = ctx.inputs[0].shape;
  space.loops = loops_of(x);
  space.loops[1].name = "the channel dimension";
  space.inputs = {identity_dims(x.rank()), {1}};
  space.outputs = {identity_dims(x.rank())};
  return space;
}

}  // namespace

void register_matmul() {
  add({"MatMul", "BatchMatMul"}, std::make_shared<MatMulRule>());
  add({"BiasAdd"},
      space_rule("any split of x; the bias is split like x's channel dimension", bias_add_space));
}

}  // namespace cleave::parallel::rules

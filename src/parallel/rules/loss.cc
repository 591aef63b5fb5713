// The cross entropies: SoftmaxCrossEntropyWithLogits and SparseSoftmaxCrossEntropyWithLogits,
// with their backward primitives; MSE (elementwise).
#include "parallel/rules/rules.h"

namespace cleave::parallel::rules {
namespace {

// Loops: the batch N and the classes C of logits (N, C). Dense labels are (N, C), sparse labels
// (N); the backward primitives take dloss (N) as input 2 and return dlogits (N, C); the forward
// returns the loss (N). The classes are fixed.
IterationSpace cross_entropy_space(const RuleContext& ctx) {
  const Shape& logits = ctx.inputs[0].shape;
  IterationSpace space;
  space.loops = {{.size = logits[0], .name = "the batch dimension"},
                 {.size = logits[1], .name = "the class dimension"}};
  fix(space, 1, "the class dimension (the softmax over it needs the whole row)");
  const bool dense = ctx.inputs[1].shape.rank() == 2;
  space.inputs = {{0, 1}, dense ? std::vector<int>{0, 1} : std::vector<int>{0}};
  if (ctx.inputs.size() == 3) space.inputs.push_back({0});  // dloss
  space.outputs = {ctx.outputs[0].shape.rank() == 2 ? std::vector<int>{0, 1} : std::vector<int>{0}};
  return space;
}

}  // namespace

void register_loss() {
  add({"SoftmaxCrossEntropyWithLogits", "SoftmaxCrossEntropyWithLogitsGrad",
       "SparseSoftmaxCrossEntropyWithLogits", "SparseSoftmaxCrossEntropyWithLogitsGrad"},
      space_rule("the batch split; the class dimension is not", cross_entropy_space));
  add({"MSE"}, broadcast_rule());
}

}  // namespace cleave::parallel::rules

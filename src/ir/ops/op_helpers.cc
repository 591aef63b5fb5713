#include "op_helpers.h"

namespace cleave::ir {

void expect_float_pair(const InferContext& ctx) {
  expect_floating(ctx, 0);
  expect_floating(ctx, 1);
  expect_same_dtype(ctx, 0, 1);
}

std::vector<TensorMeta> infer_same_as_input0(const InferContext& ctx) { return {ctx.inputs[0]}; }

std::vector<TensorMeta> infer_broadcast_binary(const InferContext& ctx) {
  expect_same_dtype(ctx, 0, 1);
  return {{broadcast_shapes(ctx.inputs[0].shape, ctx.inputs[1].shape, ctx.op.name.c_str()),
           ctx.inputs[0].dtype}};
}

}  // namespace cleave::ir

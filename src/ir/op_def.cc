#include "cleave/ir/op_def.h"

#include <fmt/format.h>

namespace cleave::ir {

void expect_rank(const InferContext& ctx, int input, int64_t rank) {
  const Shape& s = ctx.inputs[input].shape;
  CLEAVE_CHECK_ARG(s.rank() == rank, "{}: input {} has shape {} (rank {}); expected rank {}",
                   ctx.op.name, input, s.to_string(), s.rank(), rank);
}

void expect_min_rank(const InferContext& ctx, int input, int64_t min_rank) {
  const Shape& s = ctx.inputs[input].shape;
  CLEAVE_CHECK_ARG(s.rank() >= min_rank, "{}: input {} has shape {} (rank {}); expected rank >= {}",
                   ctx.op.name, input, s.to_string(), s.rank(), min_rank);
}

void expect_floating(const InferContext& ctx, int input) {
  const DType d = ctx.inputs[input].dtype;
  CLEAVE_CHECK_ARG(is_floating(d), "{}: input {} has dtype {}; expected Float32 or Float64",
                   ctx.op.name, input, dtype_name(d));
}

void expect_dtype(const InferContext& ctx, int input, std::initializer_list<DType> allowed) {
  const DType d = ctx.inputs[input].dtype;
  for (DType a : allowed) {
    if (a == d) return;
  }
  std::vector<std::string_view> names;
  for (DType a : allowed) names.push_back(dtype_name(a));
  CLEAVE_FAIL("{}: input {} has dtype {}; expected one of {}", ctx.op.name, input, dtype_name(d),
              fmt::join(names, ", "));
}

void expect_same_dtype(const InferContext& ctx, int a, int b) {
  const DType da = ctx.inputs[a].dtype;
  const DType db = ctx.inputs[b].dtype;
  CLEAVE_CHECK_ARG(da == db, "{}: input {} has dtype {} but input {} has dtype {}; they must match",
                   ctx.op.name, a, dtype_name(da), b, dtype_name(db));
}

}  // namespace cleave::ir

// CPU kernels of the reductions: sum, product, max and min over any set of axes, and the index
// of the max/min along one axis.
//
// NOTE [Reduction as outer x reduced x inner]
// A contiguous tensor reduced over a set of axes is first simplified: size-1 dims are dropped
// and adjacent dims that are all reduced (or all kept) are merged, so e.g. an (N, C, H, W) tensor
// reduced over (0, 2, 3) becomes the groups [N reduced][C kept][H*W reduced]. The common cases
// are then one pass each:
//   [R]          reduce all: per-thread partials over contiguous chunks, combined at the end;
//   [K][R]       reduce the last axis: one contiguous row reduction per output element;
//   [R][K], [K][R][K]  reduce a leading/middle axis (a bias gradient): rows of the inner dim are
//                combined elementwise into the output, vectorised along the inner dim.
// Other patterns peel the last reduced group off with one of those passes into a temporary
// until one group is left, so a pass is made per reduced group, never per axis. Row reductions
// keep 256 bytes of independent accumulators (vector lanes), which vectorises the loop and keeps
// Float32 rounding error low.
#pragma once

#include <cstdint>
#include <vector>

#include "cleave/core/tensor.h"

namespace cleave::kernels::cpu {

enum class ReduceOp { kSum, kProd, kMax, kMin };

// Reduces numeric `x` over `axes` (ascending, distinct, each in [0, rank)) into `out`, which
// holds the kept dims in row-major order (keeping reduced dims as size 1 or not is the caller's
// choice). Over zero elements the result is the identity: 0 for kSum, 1 for kProd, -inf/+inf (or
// the integer limits) for kMax/kMin. kMax/kMin propagate NaN.
void reduce(ReduceOp op, const Tensor& x, const std::vector<int64_t>& axes, const Tensor& out);

enum class ArgReduceOp { kArgMax, kArgMin };

// Int32 `out` (x's shape without `axis`) = the index along `axis` of the first maximum (minimum)
// of numeric `x`; NaN counts as larger (smaller) than every number. Requires x.dim(axis) > 0.
void arg_reduce(ArgReduceOp op, const Tensor& x, int64_t axis, const Tensor& out);

}  // namespace cleave::kernels::cpu

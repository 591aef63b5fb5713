// The elementwise reduction of several ranks' buffers in rank order, shared by the collectives
// that reduce in this process (the inproc backend, the shared-memory collectives). Internal to
// comm.
//
// NOTE [Rank-order reduction]
// Element i of the result is the reduction of element i of the inputs in their order, the first
// input's value first:
//   out[i] = ((in_0[i] op in_1[i]) op in_2[i]) op ... op in_{k-1}[i]
// whatever i, the element count or the number of inputs. A collective that passes its ranks'
// buffers in group-rank order therefore gets the sequential reduction over ranks 0..size-1: the
// same bits on every rank and from run to run. Integer sums and products wrap around (two's
// complement) instead of overflowing; on Bool, sum is "any" and product "all" (ProcessGroup only
// lets max and min through). max(a, b) is a < b ? b : a and min(a, b) is b < a ? b : a, as
// std::max and std::min. kMean (floating dtypes only) is the sum, then one multiplication by
// T(1.0 / k) for k inputs: the bits ProcessGroup's default mean gives (a sum, then scaled).
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "cleave/comm/process_group.h"
#include "cleave/core/dtype.h"

namespace cleave::comm {

// Writes the reduction of `ins` (at least one buffer of `n` elements of `dtype`) into `out` and,
// when `also` is not null, a copy into `also`. `out` and `also` may be any of the inputs: each
// block of the result is written after that block of every input was read.
void reduce_in_rank_order(DType dtype, ReduceOp op, const std::vector<const std::byte*>& ins,
                          int64_t n, std::byte* out, std::byte* also = nullptr);

}  // namespace cleave::comm

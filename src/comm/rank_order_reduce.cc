// The rank-order reduction (NOTE [Rank-order reduction] in comm/rank_order_reduce.h).
#include "comm/rank_order_reduce.h"

#include <algorithm>
#include <cstring>
#include <type_traits>

#include "cleave/core/error.h"

namespace cleave::comm {
namespace {

template <typename T>
T add(T a, T b) {
  if constexpr (std::is_same_v<T, bool>) {
    return a || b;
  } else if constexpr (std::is_integral_v<T>) {
    using U = std::make_unsigned_t<T>;
    return static_cast<T>(static_cast<U>(a) + static_cast<U>(b));
  } else {
    return a + b;
  }
}

template <typename T>
T multiply(T a, T b) {
  if constexpr (std::is_same_v<T, bool>) {
    return a && b;
  } else if constexpr (std::is_integral_v<T>) {
    using U = std::make_unsigned_t<T>;
    return static_cast<T>(static_cast<U>(a) * static_cast<U>(b));
  } else {
    return a * b;
  }
}

// One block of 4 KB at a time through an accumulator, which stays in L1 and lets the result go
// to any of the inputs.
template <typename T, typename Op>
void reduce_blocks(const std::vector<const std::byte*>& ins, int64_t n, std::byte* out,
                   std::byte* also, Op op, bool mean = false) {
  constexpr int64_t kBlock = 4096 / sizeof(T);
  T acc[kBlock];
  for (int64_t b = 0; b < n; b += kBlock) {
    const int64_t m = std::min(kBlock, n - b);
    const size_t bytes = static_cast<size_t>(m) * sizeof(T);
    std::memcpy(acc, ins[0] + b * sizeof(T), bytes);
    for (size_t q = 1; q < ins.size(); ++q) {
      const T* in = reinterpret_cast<const T*>(ins[q]) + b;
      for (int64_t i = 0; i < m; ++i) acc[i] = op(acc[i], in[i]);
    }
    if constexpr (std::is_floating_point_v<T>) {
      // The multiplication ProcessGroup's default mean makes (scale_by_size).
      const T scale = static_cast<T>(1.0 / static_cast<double>(ins.size()));
      if (mean) {
        for (int64_t i = 0; i < m; ++i) acc[i] *= scale;
      }
    }
    std::memcpy(out + b * sizeof(T), acc, bytes);
    if (also != nullptr) std::memcpy(also + b * sizeof(T), acc, bytes);
  }
}

}  // namespace

void reduce_in_rank_order(DType dtype, ReduceOp op, const std::vector<const std::byte*>& ins,
                          int64_t n, std::byte* out, std::byte* also) {
  CLEAVE_ASSERT(!ins.empty(), "reduce_in_rank_order: no input");
  if (n <= 0) return;
  CLEAVE_DISPATCH_ALL(dtype, [&] {
    switch (op) {
      case ReduceOp::kSum:
        return reduce_blocks<T>(ins, n, out, also, [](T a, T b) { return add(a, b); });
      case ReduceOp::kMean:
        if constexpr (std::is_floating_point_v<T>) {
          return reduce_blocks<T>(
              ins, n, out, also, [](T a, T b) { return a + b; }, true);
        } else {
          CLEAVE_ASSERT(false, "reduce_in_rank_order: mean of {}", dtype_name(dtype));
          return;
        }
      case ReduceOp::kProd:
        return reduce_blocks<T>(ins, n, out, also, [](T a, T b) { return multiply(a, b); });
      case ReduceOp::kMax:
        return reduce_blocks<T>(ins, n, out, also, [](T a, T b) { return a < b ? b : a; });
      case ReduceOp::kMin:
        return reduce_blocks<T>(ins, n, out, also, [](T a, T b) { return b < a ? b : a; });
    }
  });
}

}  // namespace cleave::comm

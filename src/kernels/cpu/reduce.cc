#include "reduce.h"

#include <omp.h>

#include <algorithm>
#include <limits>
#include <type_traits>

#include "loops.h"
#include "parallel.h"

namespace cleave::kernels::cpu {
namespace {

template <ReduceOp kOp, typename T>
constexpr T identity() {
  if constexpr (kOp == ReduceOp::kSum) {
    return T(0);
  } else if constexpr (kOp == ReduceOp::kProd) {
    return T(1);
  } else if constexpr (kOp == ReduceOp::kMax) {
    if constexpr (std::numeric_limits<T>::has_infinity) return -std::numeric_limits<T>::infinity();
    return std::numeric_limits<T>::lowest();
  } else {
    if constexpr (std::numeric_limits<T>::has_infinity) return std::numeric_limits<T>::infinity();
    return std::numeric_limits<T>::max();
  }
}

// The running value `acc` combined with `v`. Max/Min keep a NaN once seen (`acc != acc`).
template <ReduceOp kOp, typename T>
inline T combine(T acc, T v) {
  if constexpr (kOp == ReduceOp::kSum) {
    return static_cast<T>(acc + v);
  } else if constexpr (kOp == ReduceOp::kProd) {
    return static_cast<T>(acc * v);
  } else if constexpr (kOp == ReduceOp::kMax) {
    if constexpr (std::is_floating_point_v<T>) return (acc > v || acc != acc) ? acc : v;
    return acc > v ? acc : v;
  } else {
    if constexpr (std::is_floating_point_v<T>) return (acc < v || acc != acc) ? acc : v;
    return acc < v ? acc : v;
  }
}

// One thread, n contiguous elements. 256 bytes of lane accumulators: the simd loop keeps them
// in vector registers.
template <ReduceOp kOp, typename T>
T reduce_contiguous(const T* p, int64_t n) {
  constexpr int kLanes = static_cast<int>(256 / sizeof(T));
  T lanes[kLanes];
  for (int l = 0; l < kLanes; ++l) lanes[l] = identity<kOp, T>();
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
#pragma omp simd
    for (int l = 0; l < kLanes; ++l) lanes[l] = combine<kOp>(lanes[l], p[i + l]);
  }
  T acc = identity<kOp, T>();
  for (int l = 0; l < kLanes; ++l) acc = combine<kOp>(acc, lanes[l]);
  for (; i < n; ++i) acc = combine<kOp>(acc, p[i]);
  return acc;
}

// All threads, n contiguous elements: one chunk per thread, partials combined in chunk order (the
// result depends only on n and the thread count).
template <ReduceOp kOp, typename T>
T reduce_all(const T* p, int64_t n) {
  if (n <= kParallelGrain) return reduce_contiguous<kOp>(p, n);
  const int64_t chunks = std::min<int64_t>(omp_get_max_threads(), n / kParallelGrain);
  std::vector<T> partial(static_cast<size_t>(chunks));
#pragma omp parallel for
  for (int64_t c = 0; c < chunks; ++c) {
    const int64_t begin = n * c / chunks;
    const int64_t end = n * (c + 1) / chunks;
    partial[static_cast<size_t>(c)] = reduce_contiguous<kOp>(p + begin, end - begin);
  }
  T acc = identity<kOp, T>();
  for (const T& v : partial) acc = combine<kOp>(acc, v);
  return acc;
}

// acc[i] = combine(acc[i], row[i]) for i < n.
template <ReduceOp kOp, typename T>
inline void combine_row(T* acc, const T* row, int64_t n) {
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) acc[i] = combine<kOp>(acc[i], row[i]);
}

// acc[0, len) = combine over k < rows of in[k * stride, k * stride + len). Narrow contiguous
// rows (len == stride, at most half the lanes) are instead reduced along the flat data with
// lane accumulators, a multiple of len wide so that lane l always holds column l % len; a
// row-by-row combine would spend its time in loop overhead.
template <ReduceOp kOp, typename T>
void reduce_rows(const T* in, T* acc, int64_t rows, int64_t len, int64_t stride) {
  constexpr int64_t kLanes = 256 / sizeof(T);
  if (len == stride && len <= kLanes / 2) {
    const int64_t width = len * (kLanes / len);
    T lanes[kLanes];
    std::fill(lanes, lanes + width, identity<kOp, T>());
    const int64_t n = rows * len;
    int64_t i = 0;
    for (; i + width <= n; i += width) {
#pragma omp simd
      for (int64_t l = 0; l < width; ++l) lanes[l] = combine<kOp>(lanes[l], in[i + l]);
    }
    std::fill(acc, acc + len, identity<kOp, T>());
    for (int64_t l = 0; l < width; ++l) acc[l % len] = combine<kOp>(acc[l % len], lanes[l]);
    for (; i < n; ++i) acc[i % len] = combine<kOp>(acc[i % len], in[i]);  // whole rows left
    return;
  }
  std::copy(in, in + len, acc);
  for (int64_t k = 1; k < rows; ++k) combine_row<kOp>(acc, in + k * stride, len);
}

// One pass: out[o, i] = combine over k of in[o, k, i] (NOTE [Reduction as outer x reduced x
// inner]).
template <ReduceOp kOp, typename T>
void reduce_step(const T* in, T* out, int64_t outer, int64_t r, int64_t inner) {
  const int64_t total = outer * r * inner;
  const int64_t threads = omp_get_max_threads();
  if (r == 0) {
    std::fill(out, out + outer * inner, identity<kOp, T>());
    return;
  }
  if (inner == 1) {
    if (outer < threads && r > kParallelGrain) {
      for (int64_t o = 0; o < outer; ++o) out[o] = reduce_all<kOp>(in + o * r, r);
      return;
    }
    parallel_for(outer, total > kParallelGrain,
                 [&](int64_t o) { out[o] = reduce_contiguous<kOp>(in + o * r, r); });
    return;
  }
  // Column reductions, in blocks of the inner dim that stay in L1 while r rows stream past.
  constexpr int64_t kBlock = 4096 / sizeof(T);
  const int64_t block = std::min(inner, kBlock);
  const int64_t blocks = (inner + block - 1) / block;
  const int64_t tasks = outer * blocks;
  if (total <= kParallelGrain || tasks >= threads) {
    parallel_for(tasks, total > kParallelGrain, [&](int64_t t) {
      const int64_t o = t / blocks;
      const int64_t b0 = (t % blocks) * block;
      reduce_rows<kOp>(in + o * r * inner + b0, out + o * inner + b0, r,
                       std::min(block, inner - b0), inner);
    });
    return;
  }
  // Few outputs and a long reduction: split r across threads into partial outputs.
  const int64_t parts = std::min(threads, r);
  const int64_t m = outer * inner;
  std::vector<T> partial(static_cast<size_t>(parts * m));
#pragma omp parallel for
  for (int64_t part = 0; part < parts; ++part) {
    const int64_t k0 = r * part / parts;
    const int64_t k1 = r * (part + 1) / parts;
    for (int64_t o = 0; o < outer; ++o) {
      for (int64_t b0 = 0; b0 < inner; b0 += block) {
        reduce_rows<kOp>(in + (o * r + k0) * inner + b0, partial.data() + part * m + o * inner + b0,
                         k1 - k0, std::min(block, inner - b0), inner);
      }
    }
  }
  std::copy(partial.begin(), partial.begin() + m, out);
  for (int64_t part = 1; part < parts; ++part) combine_row<kOp>(out, partial.data() + part * m, m);
}

struct Group {
  int64_t size;
  bool reduced;
};

template <ReduceOp kOp, typename T>
void reduce_groups(const T* in, std::vector<Group> groups, T* out) {
  std::vector<T> held;  // the current intermediate, when there is one
  const T* cur = in;
  while (true) {
    int64_t last = -1, reduced_groups = 0;
    for (size_t j = 0; j < groups.size(); ++j) {
      if (groups[j].reduced) {
        last = static_cast<int64_t>(j);
        ++reduced_groups;
      }
    }
    if (last < 0) {  // nothing (left) to reduce: only size-1 axes were named
      int64_t n = 1;
      for (const Group& g : groups) n *= g.size;
      std::copy(cur, cur + n, out);
      return;
    }
    int64_t outer = 1, inner = 1;
    for (int64_t j = 0; j < last; ++j) outer *= groups[static_cast<size_t>(j)].size;
    for (size_t j = static_cast<size_t>(last) + 1; j < groups.size(); ++j) inner *= groups[j].size;
    const int64_t r = groups[static_cast<size_t>(last)].size;
    if (reduced_groups == 1) {
      reduce_step<kOp>(cur, out, outer, r, inner);
      return;
    }
    std::vector<T> next(static_cast<size_t>(outer * inner));
    reduce_step<kOp>(cur, next.data(), outer, r, inner);
    held = std::move(next);
    cur = held.data();
    // Drop the reduced group; its kept neighbours become adjacent and merge.
    const size_t j = static_cast<size_t>(last);
    if (j > 0 && j + 1 < groups.size()) {
      groups[j - 1].size *= groups[j + 1].size;
      groups.erase(groups.begin() + static_cast<std::ptrdiff_t>(j),
                   groups.begin() + static_cast<std::ptrdiff_t>(j + 2));
    } else {
      groups.erase(groups.begin() + static_cast<std::ptrdiff_t>(j));
    }
  }
}

template <ReduceOp kOp>
void reduce_op(const Tensor& x, const std::vector<Group>& groups, const Tensor& out) {
  CLEAVE_DISPATCH_NUMERIC(x.dtype(), [&] {
    if (x.numel() == 0) {
      std::fill(out.data<T>(), out.data<T>() + out.numel(), identity<kOp, T>());
      return;
    }
    reduce_groups<kOp>(x.data<T>(), groups, out.data<T>());
  });
}

// Whether `v` replaces `best` as the running arg-max (arg-min): strictly better, or the first NaN.
template <bool kMax, typename T>
inline bool arg_better(T v, T best) {
  const bool strictly = kMax ? v > best : v < best;
  if constexpr (std::is_floating_point_v<T>) return strictly || (v != v && best == best);
  return strictly;
}

template <bool kMax, typename T>
void arg_reduce_typed(const T* in, int32_t* out, int64_t outer, int64_t r, int64_t inner) {
  const int64_t total = outer * r * inner;
  if (inner == 1) {
    // Two passes over each row: the vectorised max (min), which keeps NaN, then its first
    // position.
    constexpr ReduceOp kOp = kMax ? ReduceOp::kMax : ReduceOp::kMin;
    parallel_for(outer, total > kParallelGrain, [&](int64_t o) {
      const T* p = in + o * r;
      const T best = reduce_contiguous<kOp>(p, r);
      int64_t k = 0;
      if (best == best) {
        while (p[k] != best) ++k;
      } else {
        while (p[k] == p[k]) ++k;  // the first NaN
      }
      out[o] = static_cast<int32_t>(k);
    });
    return;
  }
  // NOTE [Serial fast path]: one range on this thread below the grain.
  range_for(outer, total > kParallelGrain, [&](int64_t begin, int64_t end) {
    if (begin == end) return;
    std::vector<T> best(static_cast<size_t>(inner));
    for (int64_t o = begin; o < end; ++o) {
      const T* p = in + o * r * inner;
      int32_t* index = out + o * inner;
      std::copy(p, p + inner, best.begin());
      std::fill(index, index + inner, 0);
      T* b = best.data();
      for (int64_t k = 1; k < r; ++k) {
        const T* row = p + k * inner;
        const int32_t kk = static_cast<int32_t>(k);
#pragma omp simd
        for (int64_t i = 0; i < inner; ++i) {
          const bool better = arg_better<kMax>(row[i], b[i]);
          b[i] = better ? row[i] : b[i];
          index[i] = better ? kk : index[i];
        }
      }
    }
  });
}

}  // namespace

void reduce(ReduceOp op, const Tensor& x, const std::vector<int64_t>& axes, const Tensor& out) {
  std::vector<Group> groups;
  for (int64_t d = 0; d < x.rank(); ++d) {
    const int64_t size = x.shape()[d];
    if (size == 1) continue;  // reduced or not, a size-1 dim changes nothing
    const bool reduced = std::find(axes.begin(), axes.end(), d) != axes.end();
    if (!groups.empty() && groups.back().reduced == reduced) {
      groups.back().size *= size;
    } else {
      groups.push_back({size, reduced});
    }
  }
  switch (op) {
    case ReduceOp::kSum:
      return reduce_op<ReduceOp::kSum>(x, groups, out);
    case ReduceOp::kProd:
      return reduce_op<ReduceOp::kProd>(x, groups, out);
    case ReduceOp::kMax:
      return reduce_op<ReduceOp::kMax>(x, groups, out);
    case ReduceOp::kMin:
      return reduce_op<ReduceOp::kMin>(x, groups, out);
  }
}

void arg_reduce(ArgReduceOp op, const Tensor& x, int64_t axis, const Tensor& out) {
  const Shape& s = x.shape();
  int64_t outer = 1, inner = 1;
  for (int64_t d = 0; d < axis; ++d) outer *= s[d];
  for (int64_t d = axis + 1; d < s.rank(); ++d) inner *= s[d];
  const int64_t r = s[axis];
  CLEAVE_ASSERT(r > 0, "arg_reduce over an empty axis");
  if (outer * inner == 0) return;
  CLEAVE_DISPATCH_NUMERIC(x.dtype(), [&] {
    if (op == ArgReduceOp::kArgMax) {
      arg_reduce_typed<true>(x.data<T>(), out.data<int32_t>(), outer, r, inner);
    } else {
      arg_reduce_typed<false>(x.data<T>(), out.data<int32_t>(), outer, r, inner);
    }
  });
}

}  // namespace cleave::kernels::cpu

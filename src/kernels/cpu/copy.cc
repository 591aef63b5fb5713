#include "copy.h"

#include <algorithm>
#include <cstring>
#include <numeric>
#include <utility>

#include "cleave/core/error.h"
#include "loops.h"
#include "parallel.h"

#if defined(__AVX__)
#include <immintrin.h>
#endif

namespace cleave::kernels::cpu {
namespace {

// Calls f.template operator()<W>() with W an unsigned integer type of `elem_size` bytes.
template <typename F>
void with_word(size_t elem_size, F&& f) {
  switch (elem_size) {
    case 1:
      return f.template operator()<uint8_t>();
    case 2:
      return f.template operator()<uint16_t>();
    case 4:
      return f.template operator()<uint32_t>();
    case 8:
      return f.template operator()<uint64_t>();
    default:
      break;
  }
  CLEAVE_ASSERT(false, "unsupported element size {}", elem_size);
}

// ---- boxes (NOTE [Coalesced copies]) ----

// A box after planning: merged dims, outer to inner, each with its element count and its step
// (in elements) on the strided side; the dense side is row-major over `counts`.
struct Walk {
  std::vector<int64_t> counts, steps;
  int64_t base = 0;   // strided-side offset of box element 0, in elements
  int64_t numel = 1;  // elements in the box
};

Walk plan_box(const Shape& full, const Box& box) {
  const std::vector<int64_t> full_strides = full.strides();
  Walk w;
  for (size_t d = 0; d < box.dims.size(); ++d) {
    w.base += box.begin[d] * full_strides[d];
    w.numel *= box.dims[d];
  }
  if (w.numel == 0) return w;
  for (size_t d = 0; d < box.dims.size(); ++d) {
    if (box.dims[d] == 1) continue;
    const int64_t step = box.strides[d] * full_strides[d];
    if (!w.counts.empty() && w.steps.back() == box.dims[d] * step) {
      w.counts.back() *= box.dims[d];
      w.steps.back() = step;
    } else {
      w.counts.push_back(box.dims[d]);
      w.steps.push_back(step);
    }
  }
  if (w.counts.empty()) {
    w.counts.push_back(1);
    w.steps.push_back(1);
  }
  return w;
}

enum class Direction { kGather, kScatter };

// Moves the box between `dense` (row-major over w.counts) and `strided`, one innermost run per
// row: a memcpy when the run is contiguous on the strided side.
template <typename W>
void copy_walk(const Walk& w, W* dense, W* strided, Direction dir) {
  if (w.numel == 0) return;
  const int64_t k = static_cast<int64_t>(w.counts.size());
  const int64_t run = w.counts[k - 1];
  const int64_t step = w.steps[k - 1];
  const int64_t rows = w.numel / run;
  parallel_for(rows, w.numel * static_cast<int64_t>(sizeof(W)) > kParallelBytes, [&](int64_t row) {
    int64_t off = w.base, rem = row;
    for (int64_t d = k - 2; d >= 0; --d) {
      off += (rem % w.counts[d]) * w.steps[d];
      rem /= w.counts[d];
    }
    W* pd = dense + row * run;
    W* ps = strided + off;
    if (step == 1) {
      if (dir == Direction::kGather) {
        std::memcpy(pd, ps, static_cast<size_t>(run) * sizeof(W));
      } else {
        std::memcpy(ps, pd, static_cast<size_t>(run) * sizeof(W));
      }
    } else if (dir == Direction::kGather) {
      for (int64_t i = 0; i < run; ++i) pd[i] = ps[i * step];
    } else {
      for (int64_t i = 0; i < run; ++i) ps[i * step] = pd[i];
    }
  });
}

// ---- transpose ----

// NOTE [Blocked transpose]
// After dropping size-1 dims and merging input dims that stay adjacent in the output, a
// permutation is either the identity (one memcpy), keeps the input's last dim last (a box walk of
// contiguous runs), or moves the input's last dim (call its output position q) away from the
// output's last position L. The last case is a batch of 2-D transposes of the (q, L) plane: for
// each index of the remaining ("outer") dims, out[i * out_step_q + j] = in[i + j * in_step_L]. The
// plane is cut into kTile x kTile tiles, so that both the rows read and the rows written by one
// tile stay in L1; tiles of all planes are spread over the threads. Inside a tile, 8x8 (4-byte
// elements) or 4x4 (8-byte) micro-blocks are transposed in AVX registers, a block row of the
// output at a time so that each output line is written whole before the next; edges and other
// element sizes use a scalar loop. Measurements (against a plain copy and a oneDNN reorder):
// bench/README.md, 'core'.
constexpr int64_t kTile = 32;

// Transposes one kMicro x kMicro block in registers: reads kMicro rows of `in` (row stride
// in_step), writes kMicro rows of `out` (row stride out_step); out[i][j] = in[j][i].
#if defined(__AVX__)
inline void micro_transpose(const uint32_t* in, int64_t in_step, uint32_t* out, int64_t out_step) {
  __m256 r[8], t[8], u[8];
  for (int k = 0; k < 8; ++k)
    r[k] = _mm256_loadu_ps(reinterpret_cast<const float*>(in + k * in_step));
  for (int k = 0; k < 8; k += 2) {
    t[k] = _mm256_unpacklo_ps(r[k], r[k + 1]);
    t[k + 1] = _mm256_unpackhi_ps(r[k], r[k + 1]);
  }
  for (int k = 0; k < 8; k += 4) {
    u[k] = _mm256_shuffle_ps(t[k], t[k + 2], _MM_SHUFFLE(1, 0, 1, 0));
    u[k + 1] = _mm256_shuffle_ps(t[k], t[k + 2], _MM_SHUFFLE(3, 2, 3, 2));
    u[k + 2] = _mm256_shuffle_ps(t[k + 1], t[k + 3], _MM_SHUFFLE(1, 0, 1, 0));
    u[k + 3] = _mm256_shuffle_ps(t[k + 1], t[k + 3], _MM_SHUFFLE(3, 2, 3, 2));
  }
  for (int k = 0; k < 4; ++k) {
    r[k] = _mm256_permute2f128_ps(u[k], u[k + 4], 0x20);
    r[k + 4] = _mm256_permute2f128_ps(u[k], u[k + 4], 0x31);
  }
  for (int k = 0; k < 8; ++k) _mm256_storeu_ps(reinterpret_cast<float*>(out + k * out_step), r[k]);
}

inline void micro_transpose(const uint64_t* in, int64_t in_step, uint64_t* out, int64_t out_step) {
  __m256d r[4], t[4];
  for (int k = 0; k < 4; ++k)
    r[k] = _mm256_loadu_pd(reinterpret_cast<const double*>(in + k * in_step));
  t[0] = _mm256_unpacklo_pd(r[0], r[1]);
  t[1] = _mm256_unpackhi_pd(r[0], r[1]);
  t[2] = _mm256_unpacklo_pd(r[2], r[3]);
  t[3] = _mm256_unpackhi_pd(r[2], r[3]);
  r[0] = _mm256_permute2f128_pd(t[0], t[2], 0x20);
  r[1] = _mm256_permute2f128_pd(t[1], t[3], 0x20);
  r[2] = _mm256_permute2f128_pd(t[0], t[2], 0x31);
  r[3] = _mm256_permute2f128_pd(t[1], t[3], 0x31);
  for (int k = 0; k < 4; ++k) _mm256_storeu_pd(reinterpret_cast<double*>(out + k * out_step), r[k]);
}

template <typename W>
constexpr int64_t kMicro = sizeof(W) == 4   ? 8
                           : sizeof(W) == 8 ? 4
                                            : 0;
#else
template <typename W>
constexpr int64_t kMicro = 0;
#endif

// out[i * out_step + j] = in[j * in_step + i] for i in [i0, i1), j in [j0, j1).
template <typename W>
void transpose_tile(const W* in, W* out, int64_t i0, int64_t i1, int64_t j0, int64_t j1,
                    int64_t in_step, int64_t out_step) {
  int64_t i_full = i0, j_full = j0;  // the register-blocked part is [i0, i_full) x [j0, j_full)
  if constexpr (kMicro < W >> 0) {
    constexpr int64_t m = kMicro<W>;
    i_full = i0 + (i1 - i0) / m * m;
    j_full = j0 + (j1 - j0) / m * m;
    for (int64_t i = i0; i < i_full; i += m) {
      for (int64_t j = j0; j < j_full; j += m) {
        micro_transpose(in + j * in_step + i, in_step, out + i * out_step + j, out_step);
      }
    }
  }
  // The edges: columns [j_full, j1) for the blocked rows, then the remaining rows.
  for (int64_t i = i0; i < i_full; ++i) {
    for (int64_t j = j_full; j < j1; ++j) out[i * out_step + j] = in[j * in_step + i];
  }
  for (int64_t i = i_full; i < i1; ++i) {
    for (int64_t j = j0; j < j1; ++j) out[i * out_step + j] = in[j * in_step + i];
  }
}

template <typename W>
void blocked_transpose(const W* in, W* out, const std::vector<int64_t>& counts,
                       const std::vector<int64_t>& in_steps, int64_t q) {
  const int64_t g = static_cast<int64_t>(counts.size());
  const int64_t last = g - 1;
  std::vector<int64_t> out_steps(static_cast<size_t>(g));
  int64_t acc = 1;
  for (int64_t i = g - 1; i >= 0; --i) {
    out_steps[i] = acc;
    acc *= counts[i];
  }
  const int64_t numel = acc;
  // The outer dims: every output position except q and last.
  std::vector<int64_t> outer_counts, outer_in, outer_out;
  for (int64_t i = 0; i < g; ++i) {
    if (i == q || i == last) continue;
    outer_counts.push_back(counts[i]);
    outer_in.push_back(in_steps[i]);
    outer_out.push_back(out_steps[i]);
  }
  const int64_t nq = counts[q], nl = counts[last];
  const int64_t tiles_q = (nq + kTile - 1) / kTile, tiles_l = (nl + kTile - 1) / kTile;
  const int64_t tasks = numel / (nq * nl) * tiles_q * tiles_l;
  const int64_t in_step_l = in_steps[last], out_step_q = out_steps[q];
  const int64_t k = static_cast<int64_t>(outer_counts.size());
  parallel_for(tasks, numel * static_cast<int64_t>(sizeof(W)) > kParallelBytes, [&](int64_t task) {
    const int64_t tile = task % (tiles_q * tiles_l);
    int64_t rem = task / (tiles_q * tiles_l);
    int64_t in_off = 0, out_off = 0;
    for (int64_t d = k - 1; d >= 0; --d) {
      const int64_t idx = rem % outer_counts[d];
      rem /= outer_counts[d];
      in_off += idx * outer_in[d];
      out_off += idx * outer_out[d];
    }
    const int64_t i0 = tile / tiles_l * kTile, j0 = tile % tiles_l * kTile;
    transpose_tile(in + in_off, out + out_off, i0, std::min(i0 + kTile, nq), j0,
                   std::min(j0 + kTile, nl), in_step_l, out_step_q);
  });
}

// ---- tile ----

struct TilePlan {
  std::vector<int64_t> dims, multiples;
  std::vector<size_t> in_stride;  // bytes
  std::vector<size_t> out_block;  // bytes of the tiled block spanned by dims >= d
};

// Fills `count` copies of the `block` bytes at dst (the first copy already written), doubling.
void replicate(std::byte* dst, size_t block, int64_t count) {
  const size_t total = block * static_cast<size_t>(count);
  size_t filled = block;
  while (filled < total) {
    const size_t n = std::min(filled, total - filled);
    std::memcpy(dst + filled, dst, n);
    filled += n;
  }
}

void tile_dim(const TilePlan& p, size_t d, const std::byte* src, std::byte* dst) {
  const size_t inner = p.out_block[d + 1];
  if (d + 1 == p.dims.size()) {
    std::memcpy(dst, src, static_cast<size_t>(p.dims[d]) * inner);
  } else {
    for (int64_t i = 0; i < p.dims[d]; ++i) {
      tile_dim(p, d + 1, src + static_cast<size_t>(i) * p.in_stride[d],
               dst + static_cast<size_t>(i) * inner);
    }
  }
  replicate(dst, static_cast<size_t>(p.dims[d]) * inner, p.multiples[d]);
}

}  // namespace

void transpose(const void* in, const Shape& in_shape, const std::vector<int64_t>& perm, void* out,
               size_t elem_size) {
  const int64_t numel = in_shape.numel();
  if (numel == 0) return;
  // Drop size-1 dims.
  std::vector<int64_t> kept_index(static_cast<size_t>(in_shape.rank()), -1), dims;
  for (int64_t d = 0; d < in_shape.rank(); ++d) {
    if (in_shape[d] == 1) continue;
    kept_index[d] = static_cast<int64_t>(dims.size());
    dims.push_back(in_shape[d]);
  }
  // Output order as runs [first, last] of consecutive kept input dims.
  std::vector<std::pair<int64_t, int64_t>> groups;
  for (int64_t a : perm) {
    const int64_t k = kept_index[a];
    if (k < 0) continue;
    if (!groups.empty() && groups.back().second + 1 == k) {
      groups.back().second = k;
    } else {
      groups.push_back({k, k});
    }
  }
  const int64_t g = static_cast<int64_t>(groups.size());
  if (g <= 1) {
    std::memcpy(out, in, static_cast<size_t>(numel) * elem_size);
    return;
  }
  // Merged input dims are the groups in input order; in_steps[i] is the input step of output
  // position i (= group i).
  std::vector<int64_t> by_input(static_cast<size_t>(g));
  std::iota(by_input.begin(), by_input.end(), 0);
  std::sort(by_input.begin(), by_input.end(),
            [&](int64_t a, int64_t b) { return groups[a].first < groups[b].first; });
  std::vector<int64_t> counts(static_cast<size_t>(g)), in_steps(static_cast<size_t>(g));
  for (int64_t i = 0; i < g; ++i) {
    counts[i] = 1;
    for (int64_t k = groups[i].first; k <= groups[i].second; ++k) counts[i] *= dims[k];
  }
  int64_t acc = 1;
  for (int64_t j = g - 1; j >= 0; --j) {
    in_steps[by_input[j]] = acc;
    acc *= counts[by_input[j]];
  }
  const int64_t q = by_input[g - 1];  // output position of the input's last (contiguous) dim
  with_word(elem_size, [&]<typename W>() {
    const W* src = static_cast<const W*>(in);
    W* dst = static_cast<W*>(out);
    if (q == g - 1) {
      Walk w;
      w.counts = counts;
      w.steps = in_steps;
      w.numel = numel;
      copy_walk(w, dst, const_cast<W*>(src), Direction::kGather);
    } else {
      blocked_transpose(src, dst, counts, in_steps, q);
    }
  });
}

void gather_box(const void* in, const Shape& full, const Box& box, void* out, size_t elem_size) {
  const Walk w = plan_box(full, box);
  with_word(elem_size, [&]<typename W>() {
    copy_walk(w, static_cast<W*>(out), const_cast<W*>(static_cast<const W*>(in)),
              Direction::kGather);
  });
}

void scatter_box(const void* in, const Box& box, void* out, const Shape& full, size_t elem_size) {
  const Walk w = plan_box(full, box);
  with_word(elem_size, [&]<typename W>() {
    copy_walk(w, const_cast<W*>(static_cast<const W*>(in)), static_cast<W*>(out),
              Direction::kScatter);
  });
}

void tile(const void* in, const Shape& in_shape, const std::vector<int64_t>& multiples, void* out,
          size_t elem_size) {
  const size_t r = static_cast<size_t>(in_shape.rank());
  CLEAVE_ASSERT(multiples.size() == r, "tile: {} multiples for rank {}", multiples.size(), r);
  TilePlan p{in_shape.dims(), multiples, std::vector<size_t>(r), std::vector<size_t>(r + 1)};
  p.out_block[r] = elem_size;
  size_t in_acc = elem_size;
  for (size_t d = r; d-- > 0;) {
    p.in_stride[d] = in_acc;
    in_acc *= static_cast<size_t>(p.dims[d]);
    p.out_block[d] = p.out_block[d + 1] * static_cast<size_t>(p.dims[d] * p.multiples[d]);
  }
  const size_t total = p.out_block[0];
  if (total == 0) return;
  const auto* src = static_cast<const std::byte*>(in);
  auto* dst = static_cast<std::byte*>(out);
  if (r == 0) {
    std::memcpy(dst, src, elem_size);
    return;
  }
  if (r == 1 || static_cast<int64_t>(total) <= kParallelBytes) {
    tile_dim(p, 0, src, dst);
    return;
  }
  // Large: the rows of dim 0 in parallel, then the copies of the whole block in parallel.
  const size_t inner = p.out_block[1];
  const size_t block = static_cast<size_t>(p.dims[0]) * inner;
#pragma omp parallel for
  for (int64_t i = 0; i < p.dims[0]; ++i) {
    tile_dim(p, 1, src + static_cast<size_t>(i) * p.in_stride[0],
             dst + static_cast<size_t>(i) * inner);
  }
#pragma omp parallel for
  for (int64_t m = 1; m < p.multiples[0]; ++m) {
    std::memcpy(dst + static_cast<size_t>(m) * block, dst, block);
  }
}

}  // namespace cleave::kernels::cpu

#include "matmul.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cstring>

#include "cleave/core/error.h"
#include "cleave/core/tensor.h"
#include "onednn.h"
#include "parallel.h"
#include "simd.h"

namespace cleave::kernels::cpu {
namespace {

// Below this many multiply-adds in total a batched product runs on one thread.
constexpr int64_t kParallelMacs = int64_t{1} << 18;
// oneDNN tensors have at most 12 dims: 10 batch dims plus the matrix.
constexpr size_t kMaxOneDnnBatchDims = 10;
// NOTE [Leading dimensions of 2 KiB]
constexpr int64_t kAliasingFloats = 512;
constexpr int64_t kPaddingFloats = 16;

// ---- batches ----

// Element offsets of each batch's A and B matrices, in C's (row-major) batch order.
struct BatchOffsets {
  int64_t count = 1;
  std::vector<int64_t> a;
  std::vector<int64_t> b;
};

BatchOffsets batch_offsets(const MatMulShape& s) {
  const size_t rank = s.batch_c.size();
  CLEAVE_ASSERT(s.batch_a.size() == rank && s.batch_b.size() == rank,
                "batch dims of A, B and C must have one length");
  BatchOffsets out;
  for (int64_t d : s.batch_c) out.count *= d;
  // Batch strides of A and B in elements; 0 on a broadcast dim.
  std::vector<int64_t> stride_a(rank), stride_b(rank);
  int64_t acc_a = s.m * s.k, acc_b = s.k * s.n;
  for (size_t i = rank; i-- > 0;) {
    stride_a[i] = s.batch_a[i] == 1 ? 0 : acc_a;
    stride_b[i] = s.batch_b[i] == 1 ? 0 : acc_b;
    acc_a *= s.batch_a[i];
    acc_b *= s.batch_b[i];
  }
  out.a.resize(static_cast<size_t>(out.count));
  out.b.resize(static_cast<size_t>(out.count));
  for (int64_t index = 0; index < out.count; ++index) {
    int64_t rem = index, off_a = 0, off_b = 0;
    for (size_t i = rank; i-- > 0;) {
      const int64_t coord = rem % s.batch_c[i];
      rem /= s.batch_c[i];
      off_a += coord * stride_a[i];
      off_b += coord * stride_b[i];
    }
    out.a[static_cast<size_t>(index)] = off_a;
    out.b[static_cast<size_t>(index)] = off_b;
  }
  return out;
}

// Element strides of op(A) (M, K) and op(B) (K, N) inside one stored matrix.
struct MatrixStrides {
  int64_t a_row, a_col, b_row, b_col;
};

MatrixStrides matrix_strides(const MatMulShape& s) {
  return {.a_row = s.transpose_a ? 1 : s.k,
          .a_col = s.transpose_a ? s.m : 1,
          .b_row = s.transpose_b ? 1 : s.n,
          .b_col = s.transpose_b ? s.k : 1};
}

// ---- small-matrix kernel ----

// NOTE [Small matmul]
// oneDNN's matmul has a fixed cost per call however small the product (argument maps, memory
// objects, its dispatch), which dominates the products of small models: x[16,32]·w[32,16] is
// 8192 multiply-adds, a fraction of a microsecond of arithmetic. Products of at most
// kSmallMatMulMacs (2^17) multiply-adds, counting N rounded up to a multiple of 8 as the kernel
// computes it, therefore run on this register-blocked kernel instead: one power of two below the
// measured one-thread crossover, since oneDNN also threads large products. Measurements:
// bench/README.md, 'core'.
//
// Terms: C is computed in tiles of MR rows × 8·NV columns held in MR·NV vector accumulators
// (6 × 16 = 12 AVX2 registers for the main tile). For each k, the tile's row of B is loaded as
// NV vectors and each of the MR values A[r, k] is broadcast and multiplied into them. B must have
// unit column stride and C's row length must be a multiple of 8, so a transposed B, or an N that
// is not a multiple of 8, is first packed into a zero-padded (K, N rounded up to 8) panel and C is
// computed into a padded buffer, then copied. A is read in place through its strides.

template <int MR, int NV>
inline void micro_tile(const float* a, int64_t a_row, int64_t a_col, const float* b, int64_t ldb,
                       float* c, int64_t ldc, int64_t k_size) {
  using simd::f32x8;
  // Narrow tiles are latency-bound on the FMA chain: give them two accumulator sets (even and
  // odd k) to keep two chains in flight.
  constexpr int kChains = MR * NV <= 4 ? 2 : 1;
  f32x8 acc[kChains][MR][NV] = {};
  int64_t k = 0;
  for (; k + kChains <= k_size; k += kChains) {
    for (int chain = 0; chain < kChains; ++chain) {
      const int64_t kk = k + chain;
      f32x8 bv[NV];
      for (int j = 0; j < NV; ++j) bv[j] = simd::load(b + kk * ldb + 8 * j);
      for (int r = 0; r < MR; ++r) {
        const float av = a[r * a_row + kk * a_col];
        for (int j = 0; j < NV; ++j) acc[chain][r][j] += av * bv[j];
      }
    }
  }
  for (; k < k_size; ++k) {
    f32x8 bv[NV];
    for (int j = 0; j < NV; ++j) bv[j] = simd::load(b + k * ldb + 8 * j);
    for (int r = 0; r < MR; ++r) {
      const float av = a[r * a_row + k * a_col];
      for (int j = 0; j < NV; ++j) acc[0][r][j] += av * bv[j];
    }
  }
  for (int r = 0; r < MR; ++r) {
    for (int j = 0; j < NV; ++j) {
      f32x8 sum = acc[0][r][j];
      if constexpr (kChains == 2) sum += acc[1][r][j];
      simd::store(c + r * ldc + 8 * j, sum);
    }
  }
}

// All rows of C for one column block of 8·NV columns.
template <int NV>
void column_block(const float* a, int64_t a_row, int64_t a_col, const float* b, int64_t ldb,
                  float* c, int64_t ldc, int64_t m_size, int64_t k_size) {
  constexpr int kRows = 6;
  int64_t m = 0;
  for (; m + kRows <= m_size; m += kRows) {
    micro_tile<kRows, NV>(a + m * a_row, a_row, a_col, b, ldb, c + m * ldc, ldc, k_size);
  }
  const float* at = a + m * a_row;
  float* ct = c + m * ldc;
  switch (m_size - m) {
    case 5:
      micro_tile<5, NV>(at, a_row, a_col, b, ldb, ct, ldc, k_size);
      break;
    case 4:
      micro_tile<4, NV>(at, a_row, a_col, b, ldb, ct, ldc, k_size);
      break;
    case 3:
      micro_tile<3, NV>(at, a_row, a_col, b, ldb, ct, ldc, k_size);
      break;
    case 2:
      micro_tile<2, NV>(at, a_row, a_col, b, ldb, ct, ldc, k_size);
      break;
    case 1:
      micro_tile<1, NV>(at, a_row, a_col, b, ldb, ct, ldc, k_size);
      break;
    default:
      break;
  }
}

// One 2-D product with the small kernel (NOTE [Small matmul]).
void small_matmul_2d(const float* a, const float* b, float* c, const MatMulShape& s) {
  const MatrixStrides st = matrix_strides(s);
  const int64_t n_padded = (s.n + 7) / 8 * 8;
  thread_local std::vector<float> b_panel, c_padded;

  const float* bp = b;
  int64_t ldb = s.n;
  if (s.transpose_b || n_padded != s.n) {
    b_panel.assign(static_cast<size_t>(s.k * n_padded), 0.0f);
    for (int64_t kk = 0; kk < s.k; ++kk) {
      float* row = b_panel.data() + kk * n_padded;
      for (int64_t j = 0; j < s.n; ++j) row[j] = b[kk * st.b_row + j * st.b_col];
    }
    bp = b_panel.data();
    ldb = n_padded;
  }
  float* cp = c;
  if (n_padded != s.n) {
    c_padded.resize(static_cast<size_t>(s.m * n_padded));
    cp = c_padded.data();
  }

  int64_t j = 0;
  for (; j + 16 <= n_padded; j += 16) {
    column_block<2>(a, st.a_row, st.a_col, bp + j, ldb, cp + j, n_padded, s.m, s.k);
  }
  if (j < n_padded) {
    column_block<1>(a, st.a_row, st.a_col, bp + j, ldb, cp + j, n_padded, s.m, s.k);
  }
  if (cp != c) {
    for (int64_t i = 0; i < s.m; ++i) {
      std::copy(cp + i * n_padded, cp + i * n_padded + s.n, c + i * s.n);
    }
  }
}

// ---- oneDNN ----

// A primitive with memory objects whose data handles are replaced on every call.
struct OneDnnMatMul {
  dnnl::matmul primitive;
  dnnl::memory a;
  dnnl::memory b;
  dnnl::memory c;
};

// Descriptor of a (batch..., rows, cols) operand stored row-major, or stored as
// (batch..., cols, rows) when `transposed`: the transpose is only a change of strides.
dnnl::memory::desc operand_desc(const std::vector<int64_t>& batch, int64_t rows, int64_t cols,
                                bool transposed, int64_t ld = 0) {
  dnnl::memory::dims dims(batch.begin(), batch.end());
  dims.push_back(rows);
  dims.push_back(cols);
  dnnl::memory::dims strides(dims.size());
  const size_t r = dims.size() - 2;
  strides[r] = transposed ? 1 : (ld > 0 ? ld : cols);
  strides[r + 1] = transposed ? (ld > 0 ? ld : rows) : 1;
  int64_t acc = rows * cols;
  for (size_t i = r; i-- > 0;) {
    strides[i] = acc;
    acc *= dims[i];
  }
  return dnnl::memory::desc(dims, dnnl::memory::data_type::f32, strides);
}

OneDnnMatMul& onednn_matmul(const std::vector<int64_t>& batch_a,
                            const std::vector<int64_t>& batch_b,
                            const std::vector<int64_t>& batch_c, const MatMulShape& s,
                            int64_t lda = 0, int64_t ldb = 0) {
  const std::string key =
      fmt::format("matmul f32 m{} n{} k{} ta{} tb{} a({}) b({}) c({}) lda{} ldb{}", s.m, s.n, s.k,
                  s.transpose_a, s.transpose_b, fmt::join(batch_a, ","), fmt::join(batch_b, ","),
                  fmt::join(batch_c, ","), lda, ldb);
  return cached_primitive<OneDnnMatMul>(key, [&] {
    const dnnl::memory::desc a = operand_desc(batch_a, s.m, s.k, s.transpose_a, lda);
    const dnnl::memory::desc b = operand_desc(batch_b, s.k, s.n, s.transpose_b, ldb);
    const dnnl::memory::desc c = operand_desc(batch_c, s.m, s.n, false);
    dnnl::engine& engine = onednn_engine();
    const dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(a, b, c), engine);
    return OneDnnMatMul{.primitive = dnnl::matmul(pd),
                        .a = dnnl::memory(a, engine, DNNL_MEMORY_NONE),
                        .b = dnnl::memory(b, engine, DNNL_MEMORY_NONE),
                        .c = dnnl::memory(c, engine, DNNL_MEMORY_NONE)};
  });
}

void run_onednn(OneDnnMatMul& p, const float* a, const float* b, float* c) {
  p.a.set_data_handle(const_cast<float*>(a));
  p.b.set_data_handle(const_cast<float*>(b));
  p.c.set_data_handle(c);
  dnnl::stream& stream = onednn_stream();
  p.primitive.execute(stream, {{DNNL_ARG_SRC, p.a}, {DNNL_ARG_WEIGHTS, p.b}, {DNNL_ARG_DST, p.c}});
  stream.wait();
}

// NOTE [Leading dimensions of 2 KiB]
// oneDNN's f32 matmul (its jit sgemm) often slows by a third to a half when it reads an operand
// across rows that lie a multiple of 2 KiB (512 floats) apart: B stored (K, N) untransposed with
// N a multiple of 512, and A stored (K, M) for a transposed A with M a multiple of 512 (the
// weight gradients X^T·dY of a batch of 512). One thread (bench/matmul_bench): (64 x 256)·
// (256 x 512) at 66 GFLOP/s against 95 for N = 520, 1024 columns at 45, the MLP's
// (256 x 512)·(512 x 512) at 65; a transposed B of the same rows, N = 768 and N = 1040 run at
// full speed. Most likely the rows of a packed panel fall into the same cache sets. A 2-D
// product with such an operand therefore copies it into rows kPaddingFloats longer and gives
// oneDNN the padded stride: 1.25-2x on those products, and the MLP's layers of 512 train 12-14%
// faster. Not every such shape is slow (784 x 256 x 512 with a transposed A ran at full speed
// unpadded); there the copy costs 1-3%. The copies come from the CPU allocation cache.
// Batched products keep their layout. Measurements: bench/README.md, "Matrix rows 2 KiB apart".
bool strided_by_2k(int64_t ld) { return ld % kAliasingFloats == 0; }

// A copy of the rows x cols row-major matrix `m` with rows `ld` floats apart, in `buffer` (from
// the CPU allocation cache).
const float* padded_copy(const float* m, int64_t rows, int64_t cols, int64_t ld, Tensor& buffer) {
  buffer = Tensor::empty(Shape({rows * ld}), DType::kFloat32);
  float* to = buffer.data<float>();
  for (int64_t r = 0; r < rows; ++r) {
    std::memcpy(to + r * ld, m + r * cols, static_cast<size_t>(cols) * sizeof(float));
  }
  return to;
}

// Runs a 2-D product with its 2 KiB-strided operands padded; false (nothing done) when it has
// none.
bool run_padded(const MatMulShape& s, const float* a, const float* b, float* c) {
  const bool pad_b = !s.transpose_b && strided_by_2k(s.n);
  const bool pad_a = s.transpose_a && strided_by_2k(s.m);
  if (!pad_a && !pad_b) return false;
  Tensor buffer_a, buffer_b;
  const int64_t lda = pad_a ? s.m + kPaddingFloats : 0, ldb = pad_b ? s.n + kPaddingFloats : 0;
  const float* pa = pad_a ? padded_copy(a, s.k, s.m, lda, buffer_a) : a;
  const float* pb = pad_b ? padded_copy(b, s.k, s.n, ldb, buffer_b) : b;
  run_onednn(onednn_matmul({}, {}, {}, s, lda, ldb), pa, pb, c);
  return true;
}

// ---- f64 reference ----

template <typename T>
void reference_matmul(const T* a, const T* b, T* c, const MatMulShape& s) {
  const BatchOffsets off = batch_offsets(s);
  const MatrixStrides st = matrix_strides(s);
  const int64_t rows = off.count * s.m;
  parallel_for(rows, rows * s.n * s.k > kParallelMacs, [&](int64_t row) {
    const int64_t batch = row / s.m, i = row % s.m;
    const T* ab = a + off.a[static_cast<size_t>(batch)];
    const T* bb = b + off.b[static_cast<size_t>(batch)];
    T* crow = c + row * s.n;
    std::fill(crow, crow + s.n, T(0));
    for (int64_t kk = 0; kk < s.k; ++kk) {
      const T av = ab[i * st.a_row + kk * st.a_col];
      const T* brow = bb + kk * st.b_row;
      for (int64_t j = 0; j < s.n; ++j) crow[j] += av * brow[j * st.b_col];
    }
  });
}

// Returns true when the product is empty or has K == 0, after writing C's zeros.
template <typename T>
bool handle_degenerate(T* c, const MatMulShape& s) {
  int64_t count = 1;
  for (int64_t d : s.batch_c) count *= d;
  if (count == 0 || s.m == 0 || s.n == 0) return true;
  if (s.k == 0) {
    std::fill(c, c + count * s.m * s.n, T(0));
    return true;
  }
  return false;
}

}  // namespace

bool matmul_f32_uses_small_kernel(const MatMulShape& shape) {
  // The work the kernel does: N is padded to a multiple of 8 (so a long dot product, N = 1, is
  // eight times the work and goes to oneDNN).
  return shape.m * shape.k * ((shape.n + 7) / 8 * 8) <= kSmallMatMulMacs;
}

void matmul_f32_small(const float* a, const float* b, float* c, const MatMulShape& shape) {
  if (handle_degenerate(c, shape)) return;
  int64_t count = 1;
  for (int64_t d : shape.batch_c) count *= d;
  if (count == 1) {  // no offset tables: this path is about per-call overhead
    small_matmul_2d(a, b, c, shape);
    return;
  }
  const BatchOffsets off = batch_offsets(shape);
  const int64_t macs = shape.m * shape.n * shape.k;
  parallel_for(off.count, off.count * macs > kParallelMacs, [&](int64_t i) {
    small_matmul_2d(a + off.a[static_cast<size_t>(i)], b + off.b[static_cast<size_t>(i)],
                    c + i * shape.m * shape.n, shape);
  });
}

void matmul_f32_onednn(const float* a, const float* b, float* c, const MatMulShape& shape,
                       bool pad_2k_strides) {
  if (handle_degenerate(c, shape)) return;
  const std::vector<int64_t>& batch_c = shape.batch_c;
  const bool broadcast = shape.batch_a != batch_c || shape.batch_b != batch_c;
  if (!broadcast) {
    // Equal batch dims fold into one: the same primitive serves every batch rank.
    int64_t count = 1;
    for (int64_t d : batch_c) count *= d;
    const std::vector<int64_t> batch =
        count == 1 ? std::vector<int64_t>{} : std::vector<int64_t>{count};
    if (count == 1 && pad_2k_strides && run_padded(shape, a, b, c)) return;
    run_onednn(onednn_matmul(batch, batch, batch, shape), a, b, c);
    return;
  }
  if (batch_c.size() <= kMaxOneDnnBatchDims) {
    run_onednn(onednn_matmul(shape.batch_a, shape.batch_b, batch_c, shape), a, b, c);
    return;
  }
  // More broadcast batch dims than oneDNN takes: one 2-D product per batch.
  const BatchOffsets off = batch_offsets(shape);
  OneDnnMatMul& p = onednn_matmul({}, {}, {}, shape);
  for (int64_t i = 0; i < off.count; ++i) {
    run_onednn(p, a + off.a[static_cast<size_t>(i)], b + off.b[static_cast<size_t>(i)],
               c + i * shape.m * shape.n);
  }
}

void matmul(const float* a, const float* b, float* c, const MatMulShape& shape) {
  if (matmul_f32_uses_small_kernel(shape)) {
    matmul_f32_small(a, b, c, shape);
  } else {
    matmul_f32_onednn(a, b, c, shape);
  }
}

void matmul(const double* a, const double* b, double* c, const MatMulShape& shape) {
  if (handle_degenerate(c, shape)) return;
  reference_matmul(a, b, c, shape);
}

}  // namespace cleave::kernels::cpu

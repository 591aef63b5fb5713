// Matrix products C = op(A)·op(B) on dense row-major buffers, batched with broadcasting.
#pragma once

#include <cstdint>
#include <vector>

namespace cleave::kernels::cpu {

// The problem: op(A) is (M, K), op(B) is (K, N), C is (M, N), each preceded by batch dims.
struct MatMulShape {
  int64_t m = 0;
  int64_t n = 0;
  int64_t k = 0;
  bool transpose_a = false;  // A is stored (K, M) and used transposed
  bool transpose_b = false;  // B is stored (N, K) and used transposed
  // Batch dims of A, B and C, all of one length (a missing leading dim given as 1). A dim of A or
  // B that is 1 where C's is larger is broadcast. Empty for a single 2-D product.
  std::vector<int64_t> batch_a;
  std::vector<int64_t> batch_b;
  std::vector<int64_t> batch_c;
};

// NOTE [Small matmul] (in matmul.cc) explains this threshold.
// Products with m·k·(n rounded up to a multiple of 8) at most this many multiply-adds use the
// hand-written kernel.
constexpr int64_t kSmallMatMulMacs = int64_t{1} << 17;

// C = op(A)·op(B) for every batch index; C is written, not accumulated into. f32 goes to the
// small-matrix kernel or oneDNN by size (NOTE [Small matmul]); f64 uses reference loops.
void matmul(const float* a, const float* b, float* c, const MatMulShape& shape);
void matmul(const double* a, const double* b, double* c, const MatMulShape& shape);

// The two f32 paths, callable directly so tests can compare them on the same problem.
void matmul_f32_small(const float* a, const float* b, float* c, const MatMulShape& shape);
// pad_2k_strides false gives oneDNN every operand as it lies, even where NOTE [Leading
// dimensions of 2 KiB] (matmul.cc) pads it (for tests and bench/matmul_bench).
void matmul_f32_onednn(const float* a, const float* b, float* c, const MatMulShape& shape,
                       bool pad_2k_strides = true);
// Whether matmul() takes the small-matrix path for `shape`.
bool matmul_f32_uses_small_kernel(const MatMulShape& shape);

}  // namespace cleave::kernels::cpu

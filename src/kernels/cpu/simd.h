// Eight-lane f32 vectors for the hand-written f32 kernels (small matmul, softmax).
//
// NOTE [Portable vectors]
// The vectors are GCC/Clang vector extensions rather than intrinsics: under the Release flags
// (-march=x86-64-v3) an f32x8 is one AVX2 register and `a * b + c` becomes one FMA; on a narrower
// target the compiler splits it into SSE halves, so the code stays correct everywhere. Loads and
// stores go through memcpy, which compiles to unaligned vector moves and has no aliasing or
// alignment requirements on the tensor buffers.
#pragma once

#include <cstdint>
#include <cstring>

namespace cleave::kernels::cpu::simd {

using f32x8 = float __attribute__((vector_size(32)));
using i32x8 = int32_t __attribute__((vector_size(32)));
constexpr int64_t kLanes = 8;

inline f32x8 load(const float* p) {
  f32x8 v;
  std::memcpy(&v, p, sizeof v);
  return v;
}
inline void store(float* p, f32x8 v) { std::memcpy(p, &v, sizeof v); }
// Every lane x (a sign of zero kept; one vbroadcastss, also straight from memory).
inline f32x8 broadcast(float x) { return f32x8{x, x, x, x, x, x, x, x}; }

// The first n (< kLanes) lanes from p, the others `fill`.
inline f32x8 load_partial(const float* p, int64_t n, float fill) {
  f32x8 v = broadcast(fill);
  for (int64_t i = 0; i < n; ++i) v[i] = p[i];
  return v;
}
inline void store_partial(float* p, f32x8 v, int64_t n) {
  for (int64_t i = 0; i < n; ++i) p[i] = v[i];
}

inline float reduce_add(f32x8 v) {
  float s = 0;
  for (int i = 0; i < kLanes; ++i) s += v[i];
  return s;
}
inline float reduce_max(f32x8 v) {
  float m = v[0];
  for (int i = 1; i < kLanes; ++i) m = v[i] > m ? v[i] : m;
  return m;
}

// e^x per lane (Cephes expf): x = n·ln2 + r with |r| <= ln2/2, e^r by a degree-6 polynomial,
// 2^n put into the exponent bits. Relative error about 2e-7 (within 2 ulp) on [-87.3, 88];
// x < -87.3 (including -inf) gives 0, x > 88 is clamped to e^88, NaN stays NaN.
inline f32x8 exp(f32x8 x) {
  const f32x8 lo = broadcast(-87.3365447505531f);
  const f32x8 hi = broadcast(88.0f);
  const f32x8 in = x;
  // Written so that a NaN lane fails both comparisons and stays NaN.
  x = x > hi ? hi : x;
  x = x < lo ? lo : x;
  // Round x·log2(e) to the nearest integer with the 1.5·2^23 trick (|value| < 2^22 here).
  const float kRound = 12582912.0f;
  const f32x8 n = (x * 1.44269504088896341f + kRound) - kRound;
  // r = x - n·ln2 with ln2 split in two for precision.
  f32x8 r = x - n * 0.693359375f;
  r = r + n * 2.12194440e-4f;
  f32x8 p = broadcast(1.9875691500e-4f);
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * r * r + r + 1.0f;
  const i32x8 bits = (__builtin_convertvector(n, i32x8) + 127) << 23;
  f32x8 scale;
  std::memcpy(&scale, &bits, sizeof scale);
  const f32x8 result = p * scale;
  return in < lo ? f32x8{} : result;
}

}  // namespace cleave::kernels::cpu::simd

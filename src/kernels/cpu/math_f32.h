// Branch-free Float32 math functions that the compiler vectorises inside `omp simd` loops, for
// functions where neither the C library (not vectorised without -ffast-math) nor oneDNN (no such
// algorithm, or too inaccurate) serves.
//
// NOTE [Vectorisable Float32 math]
// Each function is straight-line arithmetic, integer bit manipulation and selects, so a loop
// calling it if-converts into SIMD code. The kernels target is built with -fno-trapping-math
// (which changes no result, only which floating-point exception flags may be raised): without
// it GCC refuses to execute the arithmetic of both arms of a select unconditionally.
#pragma once

#include <algorithm>
#include <bit>
#include <cstdint>
#include <limits>

namespace cleave::kernels::cpu {

// erf(x) ~= x * P(x^2) / Q(x^2) on [-4, 4] (outside it erf is +-1 in Float32): the rational
// approximation Eigen and XLA use for Float32, within 3e-7 of the exact value everywhere when the
// multiply-adds are fused (x86-64-v3), 3.2e-7 when they are not.
inline float erf_f32(float x) {
  x = std::min(std::max(x, -4.0f), 4.0f);
  const float x2 = x * x;
  float p = x2 * -2.72614225801306e-10f + 2.77068142495902e-08f;
  p = x2 * p + -2.10102402082508e-06f;
  p = x2 * p + -5.69250639462346e-05f;
  p = x2 * p + -7.34990630326855e-04f;
  p = x2 * p + -2.95459980854025e-03f;
  p = x2 * p + -1.60960333262415e-02f;
  p = x * p;
  float q = x2 * -1.45660718464996e-05f + -2.13374055278905e-04f;
  q = x2 * q + -1.68282697438203e-03f;
  q = x2 * q + -7.37332916720468e-03f;
  q = x2 * q + -1.42647390514189e-02f;
  return p / q;
}

// Natural logarithm, within 1 ulp over all Float32 inputs (denormals included): Cephes' logf.
// x = m * 2^e with m in [sqrt(1/2), sqrt(2)); log(x) = log1p(m - 1) + e * log(2), with
// log1p(f) = f - f^2/2 + f^3 * P(f) and log(2) split in two parts for exactness.
// Specials as C: log(+-0) = -inf, log(x < 0) = NaN, log(inf) = inf, log(NaN) = NaN.
inline float log_f32(float x) {
  const int32_t xb = std::bit_cast<int32_t>(x);
  // Denormals (and, harmlessly, negatives) are scaled by 2^23 into the normal range; the scale
  // is built with integer arithmetic so that one unconditional multiply remains.
  const int32_t tiny = xb < 0x00800000;  // 0 or 1
  const float xs = x * std::bit_cast<float>(0x3f800000 + tiny * (23 << 23));
  const int32_t bits = std::bit_cast<int32_t>(xs);
  const int32_t mbits = (bits & 0x007fffff) | 0x3f000000;  // the mantissa as a float in [0.5, 1)
  const int32_t low = mbits < 0x3f3504f3;                  // below sqrt(1/2): use 2m and e - 1
  const float f = std::bit_cast<float>(mbits + low * 0x00800000) - 1.0f;
  const float e = static_cast<float>(((bits >> 23) & 0xff) - 126 - 23 * tiny - low);
  const float f2 = f * f;
  float p = 7.0376836292e-2f;
  p = p * f - 1.1514610310e-1f;
  p = p * f + 1.1676998740e-1f;
  p = p * f - 1.2420140846e-1f;
  p = p * f + 1.4249322787e-1f;
  p = p * f - 1.6668057665e-1f;
  p = p * f + 2.0000714765e-1f;
  p = p * f - 2.4999993993e-1f;
  p = p * f + 3.3333331174e-1f;
  float y = p * f * f2;
  y += -2.12194440e-4f * e;
  y += -0.5f * f2;
  const float r = f + y + 0.693359375f * e;
  // Special inputs, blended in with a bit mask rather than a select, which the compiler could
  // turn into a branch around the polynomial.
  const int32_t abs_bits = xb & 0x7fffffff;
  const int32_t special =
      -static_cast<int32_t>((abs_bits == 0) | (xb < 0) | (abs_bits >= 0x7f800000));
  const bool is_nan = abs_bits > 0x7f800000;
  const float special_value = abs_bits == 0         ? -std::numeric_limits<float>::infinity()
                              : (xb < 0 && !is_nan) ? std::numeric_limits<float>::quiet_NaN()
                                                    : x;
  return std::bit_cast<float>((std::bit_cast<int32_t>(r) & ~special) |
                              (std::bit_cast<int32_t>(special_value) & special));
}

}  // namespace cleave::kernels::cpu

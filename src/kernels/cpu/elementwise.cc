#include "elementwise.h"

#include <array>
#include <cmath>
#include <limits>
#include <type_traits>

#include "loops.h"
#include "math_f32.h"
#include "onednn.h"
#include "parallel.h"

namespace cleave::kernels::cpu {
namespace {

constexpr double kSqrt1_2 = 0.70710678118654752440;     // 1 / sqrt(2)
constexpr double kInvSqrt2Pi = 0.39894228040143267794;  // 1 / sqrt(2 pi)
constexpr double k2InvSqrtPi = 1.12837916709551257390;  // 2 / sqrt(pi)

// ---- oneDNN eltwise (Float32 only; NOTE [Float32 transcendental kernels]) ----

struct EltwiseForward {
  dnnl::eltwise_forward primitive;
  dnnl::memory::desc desc;
};

struct EltwiseBackward {
  dnnl::eltwise_backward primitive;
  dnnl::memory::desc desc;
};

dnnl::memory::desc flat_f32_desc(int64_t n) {
  return dnnl::memory::desc({n}, dnnl::memory::data_type::f32, dnnl::memory::format_tag::a);
}

// dst = alg(alpha, beta; src) over n contiguous floats; dst may equal src.
void onednn_eltwise(dnnl::algorithm alg, float alpha, float beta, const float* src, float* dst,
                    int64_t n) {
  const std::string key =
      fmt::format("eltwise_fwd/{}/{}/{}/{}", static_cast<int>(alg), alpha, beta, n);
  EltwiseForward& cached = cached_primitive<EltwiseForward>(key, [&] {
    const dnnl::memory::desc md = flat_f32_desc(n);
    const dnnl::eltwise_forward::desc desc(dnnl::prop_kind::forward_inference, alg, md, alpha,
                                           beta);
    return EltwiseForward{
        dnnl::eltwise_forward(dnnl::eltwise_forward::primitive_desc(desc, onednn_engine())), md};
  });
  dnnl::memory src_mem(cached.desc, onednn_engine(), const_cast<float*>(src));
  dnnl::memory dst_mem(cached.desc, onednn_engine(), dst);
  cached.primitive.execute(onednn_stream(), {{DNNL_ARG_SRC, src_mem}, {DNNL_ARG_DST, dst_mem}});
  onednn_stream().wait();
}

// diff_src = diff_dst * alg'(src) over n contiguous floats (algorithms that read the source).
void onednn_eltwise_backward(dnnl::algorithm alg, const float* diff_dst, const float* src,
                             float* diff_src, int64_t n) {
  const std::string key = fmt::format("eltwise_bwd/{}/{}", static_cast<int>(alg), n);
  EltwiseBackward& cached = cached_primitive<EltwiseBackward>(key, [&] {
    const dnnl::memory::desc md = flat_f32_desc(n);
    const dnnl::eltwise_forward::desc fwd(dnnl::prop_kind::forward_training, alg, md);
    const dnnl::eltwise_forward::primitive_desc fwd_pd(fwd, onednn_engine());
    const dnnl::eltwise_backward::desc bwd(alg, md, md);
    return EltwiseBackward{dnnl::eltwise_backward(dnnl::eltwise_backward::primitive_desc(
                               bwd, onednn_engine(), fwd_pd)),
                           md};
  });
  dnnl::memory dd(cached.desc, onednn_engine(), const_cast<float*>(diff_dst));
  dnnl::memory s(cached.desc, onednn_engine(), const_cast<float*>(src));
  dnnl::memory ds(cached.desc, onednn_engine(), diff_src);
  cached.primitive.execute(onednn_stream(),
                           {{DNNL_ARG_DIFF_DST, dd}, {DNNL_ARG_SRC, s}, {DNNL_ARG_DIFF_SRC, ds}});
  onednn_stream().wait();
}

// ---- scalar math shared by the loops ----

template <typename T>
T erf_any(T x) {
  if constexpr (std::is_same_v<T, float>) {
    return erf_f32(x);
  } else {
    return std::erf(x);
  }
}

template <typename T>
T gelu(T x) {
  return x * T(0.5) * (T(1) + erf_any(x * T(kSqrt1_2)));
}

template <typename T>
T sigmoid(T x) {
  return T(1) / (T(1) + std::exp(-x));
}

// Integer power by squaring in unsigned arithmetic (wraps on overflow instead of UB).
template <typename T>
T int_pow(T base, T exponent) {
  if (exponent < 0) {
    if (base == 1) return 1;
    if (base == -1) return (exponent & 1) ? -1 : 1;
    return 0;  // |1 / base^e| < 1 truncates to 0 (and 0 for base 0, by convention)
  }
  using U = std::make_unsigned_t<T>;
  U result = 1, b = static_cast<U>(base);
  for (T e = exponent; e != 0; e >>= 1) {
    if (e & 1) result *= b;
    b *= b;
  }
  return static_cast<T>(result);
}

// ---- unary ----

// Runs `op` through oneDNN when it has an algorithm for it; false otherwise.
bool unary_onednn(UnaryOp op, const float* x, float* y, int64_t n) {
  using dnnl::algorithm;
  switch (op) {
    case UnaryOp::kExp:
      onednn_eltwise(algorithm::eltwise_exp, 0, 0, x, y, n);
      return true;
    case UnaryOp::kSqrt:
      onednn_eltwise(algorithm::eltwise_sqrt, 0, 0, x, y, n);
      return true;
    case UnaryOp::kRsqrt:
      onednn_eltwise(algorithm::eltwise_sqrt, 0, 0, x, y, n);
      unary_loop(y, y, n, [](float v) { return 1.0f / v; });
      return true;
    case UnaryOp::kSigmoid:
      onednn_eltwise(algorithm::eltwise_logistic, 0, 0, x, y, n);
      return true;
    case UnaryOp::kTanh:
      onednn_eltwise(algorithm::eltwise_tanh, 0, 0, x, y, n);
      return true;
    case UnaryOp::kGelu:
      onednn_eltwise(algorithm::eltwise_gelu_erf, 0, 0, x, y, n);
      return true;
    default:
      return false;
  }
}

template <typename T>
void unary_floating(UnaryOp op, const T* x, T* y, int64_t n) {
  if constexpr (std::is_same_v<T, float>) {
    if (n >= kOneDnnMinElements && unary_onednn(op, x, y, n)) return;
  }
  switch (op) {
    case UnaryOp::kExp:
      return unary_loop(x, y, n, [](T v) { return std::exp(v); });
    case UnaryOp::kLog:
      if constexpr (std::is_same_v<T, float>) {
        return unary_loop(x, y, n, [](float v) { return log_f32(v); });
      } else {
        return unary_loop(x, y, n, [](T v) { return std::log(v); });
      }
    case UnaryOp::kSqrt:
      return unary_loop(x, y, n, [](T v) { return std::sqrt(v); });
    case UnaryOp::kRsqrt:
      return unary_loop(x, y, n, [](T v) { return T(1) / std::sqrt(v); });
    case UnaryOp::kRelu:
      // `v < 0 ? 0 : v` keeps NaN.
      return unary_loop(x, y, n, [](T v) { return v < T(0) ? T(0) : v; });
    case UnaryOp::kGelu:
      return unary_loop(x, y, n, [](T v) { return gelu(v); });
    case UnaryOp::kSigmoid:
      return unary_loop(x, y, n, [](T v) { return sigmoid(v); });
    case UnaryOp::kTanh:
      return unary_loop(x, y, n, [](T v) { return std::tanh(v); });
    case UnaryOp::kErf:
      return unary_loop(x, y, n, [](T v) { return erf_any(v); });
    default:
      break;
  }
  CLEAVE_ASSERT(false, "unary op {} is not a floating-only op", static_cast<int>(op));
}

// ---- Maximum / Minimum with NaN propagation ----

template <typename T>
T max_nan(T x, T y) {
  if constexpr (std::is_floating_point_v<T>) {
    return (x > y || x != x) ? x : y;
  } else {
    return x > y ? x : y;
  }
}

template <typename T>
T min_nan(T x, T y) {
  if constexpr (std::is_floating_point_v<T>) {
    return (x < y || x != x) ? x : y;
  } else {
    return x < y ? x : y;
  }
}

template <typename T>
void extremum_grad_typed(bool is_max, const Tensor& a, const Tensor& b, const Tensor& dy,
                         const Tensor& da, const Tensor& db) {
  const T* pa = a.data<T>();
  const T* pb = b.data<T>();
  const T* pdy = dy.data<T>();
  T* pda = da.data<T>();
  T* pdb = db.data<T>();
  for_each_broadcast_row<2>({a.shape(), b.shape()}, dy.shape(),
                            [&](int64_t o, const std::array<int64_t, 2>& off,
                                const std::array<int64_t, 2>& st, int64_t inner) {
                              const T* x = pa + off[0];
                              const T* y = pb + off[1];
                              const int64_t sx = st[0], sy = st[1];
                              for (int64_t i = 0; i < inner; ++i) {
                                const T u = x[i * sx], v = y[i * sy], g = pdy[o + i];
                                const bool a_wins = is_max ? u > v : u < v;
                                const bool b_wins = is_max ? v > u : v < u;
                                const T half = g * T(0.5);
                                pda[o + i] = a_wins ? g : (b_wins ? T(0) : half);
                                pdb[o + i] = b_wins ? g : (a_wins ? T(0) : half);
                              }
                            });
}

template <typename T>
void binary_typed(BinaryOp op, const Tensor& a, const Tensor& b, const Tensor& out) {
  const auto run = [&](auto f) {
    binary_loop(a.data<T>(), a.shape(), b.data<T>(), b.shape(), out.data<T>(), out.shape(), f);
  };
  switch (op) {
    case BinaryOp::kAdd:
      return run([](T x, T y) { return static_cast<T>(x + y); });
    case BinaryOp::kSub:
      return run([](T x, T y) { return static_cast<T>(x - y); });
    case BinaryOp::kMul:
      return run([](T x, T y) { return static_cast<T>(x * y); });
    case BinaryOp::kDiv:
      if constexpr (std::is_integral_v<T>) {
        const T* pb = b.data<T>();
        for (int64_t i = 0; i < b.numel(); ++i) {
          CLEAVE_CHECK_ARG(pb[i] != 0,
                           "Div: input 1 has a zero at flat index {}; integer division by zero "
                           "is undefined (cast to a floating dtype for inf/nan results)",
                           i);
        }
        using U = std::make_unsigned_t<T>;
        // x / -1 as a wrapping negation: INT_MIN / -1 would trap.
        return run([](T x, T y) {
          return y == -1 ? static_cast<T>(U(0) - static_cast<U>(x)) : static_cast<T>(x / y);
        });
      } else {
        return run([](T x, T y) { return x / y; });
      }
    case BinaryOp::kPow:
      if constexpr (std::is_integral_v<T>) {
        return run([](T x, T y) { return int_pow(x, y); });
      } else {
        if (b.numel() == 1) {
          const T e = b.data<T>()[0];
          if (e == T(2)) return run([](T x, T) { return x * x; });
          if (e == T(1)) return run([](T x, T) { return x; });
          if (e == T(-1)) return run([](T x, T) { return T(1) / x; });
        }
        return run([](T x, T y) { return std::pow(x, y); });
      }
    case BinaryOp::kMaximum:
      return run([](T x, T y) { return max_nan(x, y); });
    case BinaryOp::kMinimum:
      return run([](T x, T y) { return min_nan(x, y); });
  }
}

template <typename T>
void unary_grad_typed(UnaryGradOp op, const T* dy, const T* saved, T* dx, int64_t n) {
  const auto run = [&](auto f) {
    simd_for(n, n > kParallelGrain, [&](int64_t i) { dx[i] = f(dy[i], saved[i]); });
  };
  switch (op) {
    case UnaryGradOp::kReluFromX:
      return run([](T d, T x) { return x > T(0) ? d : T(0); });
    case UnaryGradOp::kAbsFromX:
      return run([](T d, T x) { return x > T(0) ? d : (x < T(0) ? -d : T(0)); });
    case UnaryGradOp::kGeluFromX:
      if constexpr (std::is_same_v<T, float>) {
        if (n >= kOneDnnMinElements) {
          return onednn_eltwise_backward(dnnl::algorithm::eltwise_gelu_erf, dy, saved, dx, n);
        }
      }
      return run([](T d, T x) {
        const T cdf = T(0.5) * (T(1) + erf_any(x * T(kSqrt1_2)));
        const T pdf = T(kInvSqrt2Pi) * std::exp(T(-0.5) * x * x);
        return d * (cdf + x * pdf);
      });
    case UnaryGradOp::kErfFromX:
      return run([](T d, T x) { return d * T(k2InvSqrtPi) * std::exp(-x * x); });
    case UnaryGradOp::kSigmoidFromY:
      return run([](T d, T y) { return d * y * (T(1) - y); });
    case UnaryGradOp::kTanhFromY:
      return run([](T d, T y) { return d * (T(1) - y * y); });
    case UnaryGradOp::kSqrtFromY:
      return run([](T d, T y) { return d * T(0.5) / y; });
    case UnaryGradOp::kRsqrtFromY:
      return run([](T d, T y) { return d * T(-0.5) * y * y * y; });
  }
}

template <typename T>
void fill_typed(T* p, int64_t n, T v) {
  simd_for(n, n > kParallelGrain, [&](int64_t i) { p[i] = v; });
}

}  // namespace

void unary(UnaryOp op, const Tensor& x, const Tensor& out) {
  const int64_t n = x.numel();
  switch (op) {
    case UnaryOp::kNeg:
      return CLEAVE_DISPATCH_NUMERIC(x.dtype(), [&] {
        unary_loop(x.data<T>(), out.data<T>(), n, [](T v) { return static_cast<T>(-v); });
      });
    case UnaryOp::kAbs:
      return CLEAVE_DISPATCH_NUMERIC(x.dtype(), [&] {
        unary_loop(x.data<T>(), out.data<T>(), n,
                   [](T v) { return static_cast<T>(v < T(0) ? -v : v); });
      });
    case UnaryOp::kSquare:
      return CLEAVE_DISPATCH_NUMERIC(x.dtype(), [&] {
        unary_loop(x.data<T>(), out.data<T>(), n, [](T v) { return static_cast<T>(v * v); });
      });
    default:
      return CLEAVE_DISPATCH_FLOAT(x.dtype(),
                                   [&] { unary_floating(op, x.data<T>(), out.data<T>(), n); });
  }
}

void unary_grad(UnaryGradOp op, const Tensor& dy, const Tensor& saved, const Tensor& dx) {
  CLEAVE_DISPATCH_FLOAT(dy.dtype(), [&] {
    unary_grad_typed(op, dy.data<T>(), saved.data<T>(), dx.data<T>(), dy.numel());
  });
}

void binary(BinaryOp op, const Tensor& a, const Tensor& b, const Tensor& out) {
  CLEAVE_DISPATCH_NUMERIC(a.dtype(), [&] { binary_typed<T>(op, a, b, out); });
}

void extremum_grad(BinaryOp op, const Tensor& a, const Tensor& b, const Tensor& dy,
                   const Tensor& da, const Tensor& db) {
  CLEAVE_ASSERT(op == BinaryOp::kMaximum || op == BinaryOp::kMinimum,
                "extremum_grad takes Maximum or Minimum");
  CLEAVE_DISPATCH_FLOAT(
      a.dtype(), [&] { extremum_grad_typed<T>(op == BinaryOp::kMaximum, a, b, dy, da, db); });
}

void fill(const Tensor& out, double value) {
  CLEAVE_DISPATCH_ALL(out.dtype(),
                      [&] { fill_typed(out.data<T>(), out.numel(), static_cast<T>(value)); });
}

}  // namespace cleave::kernels::cpu

#include "compare.h"

#include <array>

#include "loops.h"

namespace cleave::kernels::cpu {
namespace {

template <typename T>
void compare_typed(CompareOp op, const Tensor& a, const Tensor& b, const Tensor& out) {
  const auto run = [&](auto f) {
    binary_loop(a.data<T>(), a.shape(), b.data<T>(), b.shape(), out.data<bool>(), out.shape(), f);
  };
  switch (op) {
    case CompareOp::kEqual:
      return run([](T x, T y) { return x == y; });
    case CompareOp::kNotEqual:
      return run([](T x, T y) { return x != y; });
    case CompareOp::kGreater:
      return run([](T x, T y) { return x > y; });
    case CompareOp::kGreaterEqual:
      return run([](T x, T y) { return x >= y; });
    case CompareOp::kLess:
      return run([](T x, T y) { return x < y; });
    case CompareOp::kLessEqual:
      return run([](T x, T y) { return x <= y; });
  }
}

template <typename T>
void select_typed(const Tensor& condition, const Tensor& a, const Tensor& b, const Tensor& out) {
  const bool* pc = condition.data<bool>();
  const T* pa = a.data<T>();
  const T* pb = b.data<T>();
  T* po = out.data<T>();
  for_each_broadcast_row<3>({condition.shape(), a.shape(), b.shape()}, out.shape(),
                            [&](int64_t o, const std::array<int64_t, 3>& off,
                                const std::array<int64_t, 3>& st, int64_t inner) {
                              const bool* c = pc + off[0];
                              const T* x = pa + off[1];
                              const T* y = pb + off[2];
                              T* z = po + o;
                              if (st[0] == 1 && st[1] == 1 && st[2] == 1) {
#pragma omp simd
                                for (int64_t i = 0; i < inner; ++i) z[i] = c[i] ? x[i] : y[i];
                              } else {
                                for (int64_t i = 0; i < inner; ++i)
                                  z[i] = c[i * st[0]] ? x[i * st[1]] : y[i * st[2]];
                              }
                            });
}

}  // namespace

void compare(CompareOp op, const Tensor& a, const Tensor& b, const Tensor& out) {
  CLEAVE_DISPATCH_ALL(a.dtype(), [&] { compare_typed<T>(op, a, b, out); });
}

void logical(LogicOp op, const Tensor& a, const Tensor& b, const Tensor& out) {
  const bool* pa = a.data<bool>();
  const bool* pb = b.data<bool>();
  bool* po = out.data<bool>();
  if (op == LogicOp::kAnd) {
    binary_loop(pa, a.shape(), pb, b.shape(), po, out.shape(),
                [](bool x, bool y) { return x && y; });
  } else {
    binary_loop(pa, a.shape(), pb, b.shape(), po, out.shape(),
                [](bool x, bool y) { return x || y; });
  }
}

void logical_not(const Tensor& x, const Tensor& out) {
  unary_loop(x.data<bool>(), out.data<bool>(), x.numel(), [](bool v) { return !v; });
}

void select(const Tensor& condition, const Tensor& a, const Tensor& b, const Tensor& out) {
  CLEAVE_DISPATCH_ALL(a.dtype(), [&] { select_typed<T>(condition, a, b, out); });
}

}  // namespace cleave::kernels::cpu

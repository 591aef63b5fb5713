// Softmax and log-softmax over one axis, forward and backward.
#pragma once

#include <cstdint>

namespace cleave::kernels::cpu {

enum class SoftmaxKind { kSoftmax, kLogSoftmax };

// A contiguous tensor viewed as (outer, axis, inner), normalised over the middle dim.
struct SoftmaxShape {
  int64_t outer = 1;
  int64_t axis = 1;
  int64_t inner = 1;
};

// y = softmax(x) or log_softmax(x), computed stably (the max along the axis is subtracted first).
void softmax_forward(const float* x, float* y, const SoftmaxShape& shape, SoftmaxKind kind);
void softmax_forward(const double* x, double* y, const SoftmaxShape& shape, SoftmaxKind kind);

// dx from the forward output y and its gradient dy:
//   softmax:     dx = y · (dy - Σ_axis dy·y)
//   log_softmax: dx = dy - exp(y) · Σ_axis dy
void softmax_backward(const float* y, const float* dy, float* dx, const SoftmaxShape& shape,
                      SoftmaxKind kind);
void softmax_backward(const double* y, const double* dy, double* dx, const SoftmaxShape& shape,
                      SoftmaxKind kind);

// The hand-written f32 forward, callable directly so tests can compare it with the oneDNN path
// that softmax_forward takes for large inputs.
void softmax_forward_loops(const float* x, float* y, const SoftmaxShape& shape, SoftmaxKind kind);

}  // namespace cleave::kernels::cpu

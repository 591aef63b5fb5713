// CPU kernels of the optimizer update primitives (NOTE [In-place optimizer primitives] in
// src/ir/ops/optim.cc, where each update is stated): one fused pass over the n elements of the
// parameter, writing it and its state in place. Every element is independent, so the loop is
// an `omp simd` loop with the per-element state kept in registers, on this thread below the grain
// and split across the OpenMP team above it (range_for: NOTE [Serial fast path]). T is float or
// double; the buffers must not overlap.
#pragma once

#include <cstdint>

namespace cleave::kernels::cpu {

// ApplyMomentum: var and acc updated from grad.
template <typename T>
void apply_momentum(T* var, T* acc, const T* grad, int64_t n, T lr, T momentum, T weight_decay,
                    bool nesterov);

// SGD: param and acc updated from grad; `first` is the first step (stat != 0), on which the
// accumulation is the gradient itself.
template <typename T>
void sgd(T* param, const T* grad, T* acc, int64_t n, T lr, T momentum, T one_minus_dampening,
         T weight_decay, bool nesterov, bool first);

// The per-call scalars of one Adam update, computed in double whatever the dtype (1 - 0.999
// rounded in float would be off by 1e-5 relative) and then rounded once to T.
template <typename T>
struct AdamScalars {
  T beta1, one_minus_beta1, beta2, one_minus_beta2, eps;
  T l2;              // weight decay added to the gradient (Adam)
  T decay_factor;    // 1 - lr * weight_decay applied to the parameter (AdamW)
  T step_size;       // lr / (1 - beta1^t)
  T inv_sqrt_bias2;  // 1 / sqrt(1 - beta2^t)
};

// Adam / AdamW: param, m and v updated from grad with the scalars `s`.
template <typename T>
void adam(T* param, T* m, T* v, const T* grad, int64_t n, const AdamScalars<T> s);

}  // namespace cleave::kernels::cpu

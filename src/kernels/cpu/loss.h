// CPU kernels of the loss primitives: softmax cross entropy of logits (N, C) against dense
// probabilities or integer class ids. (MSE runs on the elementwise loops.)
#pragma once

#include <cstdint>

namespace cleave::kernels::cpu {

// NOTE [Cross entropy through log-softmax]
// With lse_i = log Σ_c exp(logits[i, c]) computed stably (max subtracted first), the per-sample
// loss is Σ_c labels[i, c] · (lse_i - logits[i, c]) = -Σ_c labels[i, c] · log_softmax[i, c], and
// its gradient with respect to the logits is (softmax[i, :] - labels[i, :]) · dloss[i]; the sparse
// form uses the one-hot row of the class id as labels.

// loss (N) from logits (N, C) and labels (N, C).
template <typename T>
void softmax_cross_entropy(const T* logits, const T* labels, T* loss, int64_t n, int64_t c);
// dlogits (N, C) = (softmax(logits) - labels) · dloss[:, None].
template <typename T>
void softmax_cross_entropy_backward(const T* logits, const T* labels, const T* dloss, T* dlogits,
                                    int64_t n, int64_t c);

// loss (N) from logits (N, C) and class ids (N), which must lie in [0, C) (callers check).
template <typename T, typename Label>
void sparse_softmax_cross_entropy(const T* logits, const Label* labels, T* loss, int64_t n,
                                  int64_t c);
// dlogits (N, C) = (softmax(logits) - one_hot(labels)) · dloss[:, None].
template <typename T, typename Label>
void sparse_softmax_cross_entropy_backward(const T* logits, const Label* labels, const T* dloss,
                                           T* dlogits, int64_t n, int64_t c);

}  // namespace cleave::kernels::cpu

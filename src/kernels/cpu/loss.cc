#include "loss.h"

#include <vector>

#include "loops.h"
#include "parallel.h"
#include "softmax.h"

namespace cleave::kernels::cpu {
namespace {

// log_softmax or softmax of the rows of logits into out (NOTE [Cross entropy through
// log-softmax]); the softmax kernels choose the fastest path.
template <typename T>
void row_softmax(const T* logits, T* out, int64_t n, int64_t c, SoftmaxKind kind) {
  softmax_forward(logits, out, SoftmaxShape{.outer = n, .axis = c, .inner = 1}, kind);
}

}  // namespace

template <typename T>
void softmax_cross_entropy(const T* logits, const T* labels, T* loss, int64_t n, int64_t c) {
  std::vector<T> log_probs(static_cast<size_t>(n * c));
  row_softmax(logits, log_probs.data(), n, c, SoftmaxKind::kLogSoftmax);
  parallel_for(n, n * c > kParallelGrain, [&](int64_t i) {
    const T* lp = log_probs.data() + i * c;
    const T* lab = labels + i * c;
    T sum = 0;
#pragma omp simd reduction(+ : sum)
    for (int64_t j = 0; j < c; ++j) sum += lab[j] * lp[j];
    loss[i] = -sum;
  });
}

template <typename T>
void softmax_cross_entropy_backward(const T* logits, const T* labels, const T* dloss, T* dlogits,
                                    int64_t n, int64_t c) {
  row_softmax(logits, dlogits, n, c, SoftmaxKind::kSoftmax);
  parallel_for(n, n * c > kParallelGrain, [&](int64_t i) {
    T* d = dlogits + i * c;
    const T* lab = labels + i * c;
    const T g = dloss[i];
#pragma omp simd
    for (int64_t j = 0; j < c; ++j) d[j] = (d[j] - lab[j]) * g;
  });
}

template <typename T, typename Label>
void sparse_softmax_cross_entropy(const T* logits, const Label* labels, T* loss, int64_t n,
                                  int64_t c) {
  std::vector<T> log_probs(static_cast<size_t>(n * c));
  row_softmax(logits, log_probs.data(), n, c, SoftmaxKind::kLogSoftmax);
  for (int64_t i = 0; i < n; ++i) loss[i] = -log_probs[static_cast<size_t>(i * c + labels[i])];
}

template <typename T, typename Label>
void sparse_softmax_cross_entropy_backward(const T* logits, const Label* labels, const T* dloss,
                                           T* dlogits, int64_t n, int64_t c) {
  row_softmax(logits, dlogits, n, c, SoftmaxKind::kSoftmax);
  parallel_for(n, n * c > kParallelGrain, [&](int64_t i) {
    T* d = dlogits + i * c;
    const T g = dloss[i];
    d[labels[i]] -= T(1);
#pragma omp simd
    for (int64_t j = 0; j < c; ++j) d[j] *= g;
  });
}

template void softmax_cross_entropy<float>(const float*, const float*, float*, int64_t, int64_t);
template void softmax_cross_entropy<double>(const double*, const double*, double*, int64_t,
                                            int64_t);
template void softmax_cross_entropy_backward<float>(const float*, const float*, const float*,
                                                    float*, int64_t, int64_t);
template void softmax_cross_entropy_backward<double>(const double*, const double*, const double*,
                                                     double*, int64_t, int64_t);

#define CLEAVE_INSTANTIATE_SPARSE(T, Label)                                                       \
  template void sparse_softmax_cross_entropy<T, Label>(const T*, const Label*, T*, int64_t,       \
                                                       int64_t);                                  \
  template void sparse_softmax_cross_entropy_backward<T, Label>(const T*, const Label*, const T*, \
                                                                T*, int64_t, int64_t);
CLEAVE_INSTANTIATE_SPARSE(float, int32_t)
CLEAVE_INSTANTIATE_SPARSE(float, int64_t)
CLEAVE_INSTANTIATE_SPARSE(double, int32_t)
CLEAVE_INSTANTIATE_SPARSE(double, int64_t)
#undef CLEAVE_INSTANTIATE_SPARSE

}  // namespace cleave::kernels::cpu

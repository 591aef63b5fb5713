// Float64 pooling: reference loops over each window's real cells [r0, r1) x [c0, c1).
#include "kernels/cpu/pool_paths.h"

namespace cleave::kernels::cpu::pool_paths {
namespace {

// Offset within one (h, w) plane of the first maximum of window (i, j).
template <typename T>
int64_t argmax_in_window(const Pool2DGeometry& g, const T* plane, int64_t i, int64_t j) {
  const Window win = window(g, i, j);
  int64_t best = win.r0 * g.w + win.c0;
  for (int64_t r = win.r0; r < win.r1; ++r) {
    for (int64_t c = win.c0; c < win.c1; ++c) {
      if (plane[r * g.w + c] > plane[best]) best = r * g.w + c;
    }
  }
  return best;
}

}  // namespace

template <typename T>
void reference_max_forward(const Pool2DGeometry& g, const T* x, T* y) {
  parallel_for(g.n * g.c, g.n * g.c * g.oh * g.ow * g.kh * g.kw > kParallelGrain, [&](int64_t p) {
    const T* plane = x + p * g.h * g.w;
    for (int64_t i = 0; i < g.oh; ++i) {
      for (int64_t j = 0; j < g.ow; ++j) {
        y[(p * g.oh + i) * g.ow + j] = plane[argmax_in_window(g, plane, i, j)];
      }
    }
  });
}

template <typename T>
void reference_max_backward(const Pool2DGeometry& g, const T* x, const T* dy, T* dx) {
  parallel_for(g.n * g.c, g.n * g.c * g.oh * g.ow * g.kh * g.kw > kParallelGrain, [&](int64_t p) {
    const T* plane = x + p * g.h * g.w;
    T* dplane = dx + p * g.h * g.w;
    std::fill(dplane, dplane + g.h * g.w, T(0));
    for (int64_t i = 0; i < g.oh; ++i) {
      for (int64_t j = 0; j < g.ow; ++j) {
        dplane[argmax_in_window(g, plane, i, j)] += dy[(p * g.oh + i) * g.ow + j];
      }
    }
  });
}

template <typename T>
void reference_avg_forward(const Pool2DGeometry& g, const T* x, T* y) {
  parallel_for(g.n * g.c, g.n * g.c * g.oh * g.ow * g.kh * g.kw > kParallelGrain, [&](int64_t p) {
    const T* plane = x + p * g.h * g.w;
    for (int64_t i = 0; i < g.oh; ++i) {
      for (int64_t j = 0; j < g.ow; ++j) {
        const Window win = window(g, i, j);
        T sum = 0;
        for (int64_t r = win.r0; r < win.r1; ++r) {
          for (int64_t c = win.c0; c < win.c1; ++c) sum += plane[r * g.w + c];
        }
        y[(p * g.oh + i) * g.ow + j] = sum / T((win.r1 - win.r0) * (win.c1 - win.c0));
      }
    }
  });
}

template <typename T>
void reference_avg_backward(const Pool2DGeometry& g, const T* dy, T* dx) {
  parallel_for(g.n * g.c, g.n * g.c * g.oh * g.ow * g.kh * g.kw > kParallelGrain, [&](int64_t p) {
    T* dplane = dx + p * g.h * g.w;
    std::fill(dplane, dplane + g.h * g.w, T(0));
    for (int64_t i = 0; i < g.oh; ++i) {
      for (int64_t j = 0; j < g.ow; ++j) {
        const Window win = window(g, i, j);
        const T share = dy[(p * g.oh + i) * g.ow + j] / T((win.r1 - win.r0) * (win.c1 - win.c0));
        for (int64_t r = win.r0; r < win.r1; ++r) {
          for (int64_t c = win.c0; c < win.c1; ++c) dplane[r * g.w + c] += share;
        }
      }
    }
  });
}

template void reference_max_forward<double>(const Pool2DGeometry&, const double*, double*);
template void reference_max_backward<double>(const Pool2DGeometry&, const double*, const double*,
                                             double*);
template void reference_avg_forward<double>(const Pool2DGeometry&, const double*, double*);
template void reference_avg_backward<double>(const Pool2DGeometry&, const double*, double*);

}  // namespace cleave::kernels::cpu::pool_paths

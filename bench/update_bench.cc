// Per-call time of the Float32 optimizer update kernel ApplyMomentum (src/kernels/cpu/optim.cc)
// against the same loop written out as a plain `omp simd` loop on one thread (what the memory
// system allows), and as the `omp parallel for simd if (n > grain)` loop the kernels had before
// NOTE [Serial fast path] reached them (src/kernels/cpu/parallel.h): the figures behind that
// note's optimizer lines (bench/README.md, 'search').
//
//   update_bench [THREADS]   prints one line per size: "apply_momentum n=<elements>
//   cleave=<us> simd_loop=<us> omp_if=<us>"
//
// Each figure is the median over 7 trials of the mean time per call (kernel_bench.h), on buffers
// that stay in cache between calls: the kernel's own cost, not the memory's.
#include <omp.h>

#include <cstdint>
#include <cstdio>
#include <vector>

#include "kernel_bench.h"
#include "kernels/cpu/loops.h"
#include "kernels/cpu/optim.h"

namespace {

using cleave::kernels::cpu::kParallelGrain;

__attribute__((noinline)) void simd_loop(float* __restrict var, float* __restrict acc,
                                         const float* __restrict grad, int64_t n, float lr,
                                         float momentum) {
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) {
    const float a = momentum * acc[i] + grad[i];
    acc[i] = a;
    var[i] -= lr * a;
  }
}

__attribute__((noinline)) void omp_if_loop(float* __restrict var, float* __restrict acc,
                                           const float* __restrict grad, int64_t n, float lr,
                                           float momentum) {
#pragma omp parallel for simd if (n > kParallelGrain)
  for (int64_t i = 0; i < n; ++i) {
    const float a = momentum * acc[i] + grad[i];
    acc[i] = a;
    var[i] -= lr * a;
  }
}

}  // namespace

int main(int argc, char** argv) {
  const int threads = threads_arg(argc, argv);
  omp_set_num_threads(threads);
  std::printf("# update_bench: %d thread(s); grain %lld elements\n", threads,
              static_cast<long long>(kParallelGrain));
  // LeNet's and the MLP's parameter slices, from a bias to a whole fc1.
  for (int64_t n : {120, 5040, 10080, 24000, 48000, 262144}) {
    std::vector<float> var(static_cast<size_t>(n), 1.0f), acc(static_cast<size_t>(n), 0.0f),
        grad(static_cast<size_t>(n), 1e-3f);
    const float lr = 1e-4f, momentum = 0.9f;
    const double cleave_us = median_us([&] {
      cleave::kernels::cpu::apply_momentum<float>(var.data(), acc.data(), grad.data(), n, lr,
                                                  momentum, 0.0f, false);
    });
    const double simd_us =
        median_us([&] { simd_loop(var.data(), acc.data(), grad.data(), n, lr, momentum); });
    const double omp_if_us =
        median_us([&] { omp_if_loop(var.data(), acc.data(), grad.data(), n, lr, momentum); });
    std::printf("apply_momentum n=%lld cleave=%.2f simd_loop=%.2f omp_if=%.2f\n",
                static_cast<long long>(n), cleave_us, simd_us, omp_if_us);
  }
  return 0;
}

// Per-call time of oneDNN's f32 matmul with and without the padded copies of NOTE [Leading
// dimensions of 2 KiB] (src/kernels/cpu/matmul.cc): the figures behind it (bench/README.md,
// 'core').
//
//   matmul_bench [THREADS]   one line per product: "M K N ta tb padded=<us> as_is=<us>
//                            ratio=<as_is / padded> gflops=<padded> gflops_as_is=<...>"
//
// Timing as kernel_bench.h says (median of 7 trials of at least 20 ms). The products: the MLP's
// (784-512-512-10, batch 64 and 256) forward and gradient shapes, neighbours of 512 columns that
// are not a multiple of it, and transposed A's of 512 and 1024 columns. "padded" is what the ops
// run; for a product without a 2 KiB-strided operand both columns run the same code.
#include <omp.h>

#include <cstdio>
#include <vector>

#include "cleave/cleave.h"
#include "kernel_bench.h"
#include "kernels/cpu/matmul.h"

using namespace cleave;
using kernels::cpu::MatMulShape;

int main(int argc, char** argv) {
  omp_set_num_threads(threads_arg(argc, argv));
  struct Case {
    int64_t m, k, n;
    bool ta, tb;
  };
  const std::vector<Case> cases = {
      // The MLP at batch 64 per rank: fc2's forward, input gradient and weight gradient.
      {64, 512, 512, false, true},
      {64, 512, 512, false, false},
      {512, 64, 512, true, false},
      // At batch 256.
      {256, 512, 512, false, false},
      {512, 256, 512, true, false},
      {784, 256, 512, true, false},
      // Columns near 512 and 1024.
      {64, 256, 512, false, false},
      {64, 256, 520, false, false},
      {64, 256, 768, false, false},
      {64, 256, 1024, false, false},
      {64, 256, 1040, false, false},
      // A transposed with 512 and 1024 columns.
      {512, 256, 256, true, false},
      {1024, 256, 256, true, false},
      {1040, 256, 256, true, false},
  };
  for (const Case& c : cases) {
    const MatMulShape s{.m = c.m, .n = c.n, .k = c.k, .transpose_a = c.ta, .transpose_b = c.tb};
    const Tensor a = Tensor::normal({c.m, c.k});
    const Tensor b = Tensor::normal({c.k, c.n});
    const Tensor out = Tensor::empty({c.m, c.n}, DType::kFloat32);
    const auto run = [&](bool pad) {
      kernels::cpu::matmul_f32_onednn(a.data<float>(), b.data<float>(), out.data<float>(), s, pad);
    };
    const double padded = median_us([&] { run(true); });
    const double as_is = median_us([&] { run(false); });
    const double flops = 2.0 * static_cast<double>(c.m * c.k * c.n);
    std::printf(
        "M %4lld K %4lld N %4lld ta %d tb %d  padded=%8.1f as_is=%8.1f ratio=%5.2f gflops=%5.1f "
        "gflops_as_is=%5.1f\n",
        static_cast<long long>(c.m), static_cast<long long>(c.k), static_cast<long long>(c.n),
        c.ta ? 1 : 0, c.tb ? 1 : 0, padded, as_is, as_is / padded, flops / padded / 1e3,
        flops / as_is / 1e3);
    std::fflush(stdout);
  }
  return 0;
}

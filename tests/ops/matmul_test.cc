// MatMul, BatchMatMul and BiasAdd: forward values, both f32 kernel paths against an independent
// f64 reference, gradients and bad-input errors.
#include "kernels/cpu/matmul.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cmath>

#include "cleave/ops/nn.h"
#include "testing/gradcheck.h"

namespace cleave {
namespace {

using testing::all_close;
using testing::gradcheck;
using testing::random_f64;

Tensor f32(const Tensor& t) { return ops::cast(t, DType::kFloat32); }

// Stored shape of an operand whose used shape is (rows, cols) after batch dims.
Shape stored(std::vector<int64_t> batch, int64_t rows, int64_t cols, bool transposed) {
  batch.push_back(transposed ? cols : rows);
  batch.push_back(transposed ? rows : cols);
  return Shape(batch);
}

// Naive f64 product with NumPy batch broadcasting, indexing the stored layouts directly.
Tensor reference_product(const Tensor& a, const Tensor& b, bool ta, bool tb) {
  const Shape &sa = a.shape(), &sb = b.shape();
  const int64_t m = ta ? sa.dim(-1) : sa.dim(-2), k = ta ? sa.dim(-2) : sa.dim(-1);
  const int64_t n = tb ? sb.dim(-2) : sb.dim(-1);
  const int64_t rank = std::max(sa.rank(), sb.rank()) - 2;
  auto batch_dim = [&](const Shape& s, int64_t i) {
    const int64_t lead = rank - (s.rank() - 2);
    return i < lead ? 1 : s[i - lead];
  };
  std::vector<int64_t> out_dims;
  for (int64_t i = 0; i < rank; ++i) {
    out_dims.push_back(std::max(batch_dim(sa, i), batch_dim(sb, i)));
  }
  int64_t batches = 1;
  for (int64_t d : out_dims) batches *= d;
  out_dims.push_back(m);
  out_dims.push_back(n);
  const std::vector<double> va = a.to_double_vector(), vb = b.to_double_vector();
  std::vector<double> out(static_cast<size_t>(batches * m * n));
  for (int64_t bi = 0; bi < batches; ++bi) {
    // Linear batch offsets of a and b for this output batch index.
    int64_t rem = bi, off_a = 0, off_b = 0, stride_a = 1, stride_b = 1;
    for (int64_t i = rank - 1; i >= 0; --i) {
      const int64_t coord = rem % out_dims[i];
      rem /= out_dims[i];
      const int64_t da = batch_dim(sa, i), db = batch_dim(sb, i);
      off_a += (da == 1 ? 0 : coord) * stride_a;
      off_b += (db == 1 ? 0 : coord) * stride_b;
      stride_a *= da;
      stride_b *= db;
    }
    for (int64_t i = 0; i < m; ++i) {
      for (int64_t j = 0; j < n; ++j) {
        double s = 0;
        for (int64_t kk = 0; kk < k; ++kk) {
          const double x = va[off_a * m * k + (ta ? kk * m + i : i * k + kk)];
          const double y = vb[off_b * k * n + (tb ? j * k + kk : kk * n + j)];
          s += x * y;
        }
        out[bi * m * n + i * n + j] = s;
      }
    }
  }
  return Tensor::from_vector(out, Shape(out_dims));
}

struct Case {
  int64_t m, k, n;
};

// ---- MatMul forward ----

TEST(MatMul, HandComputedValues) {
  for (DType dtype : {DType::kFloat32, DType::kFloat64}) {
    const Tensor a = ops::cast(Tensor::from_vector<double>({1, 2, 3, 4, 5, 6}, {2, 3}), dtype);
    const Tensor b = ops::cast(Tensor::from_vector<double>({7, 8, 9, 10, 11, 12}, {3, 2}), dtype);
    const Tensor expected = Tensor::from_vector<double>({58, 64, 139, 154}, {2, 2});
    const Tensor y = ops::matmul(a, b);
    EXPECT_EQ(y.dtype(), dtype);
    EXPECT_TRUE(all_close(y, expected));
    // The same product from transposed storage: a^T stored (3, 2), b^T stored (2, 3).
    const Tensor at = ops::cast(Tensor::from_vector<double>({1, 4, 2, 5, 3, 6}, {3, 2}), dtype);
    const Tensor bt = ops::cast(Tensor::from_vector<double>({7, 9, 11, 8, 10, 12}, {2, 3}), dtype);
    EXPECT_TRUE(all_close(ops::matmul(at, b, {.transpose_a = true}), expected));
    EXPECT_TRUE(all_close(ops::matmul(a, bt, {.transpose_b = true}), expected));
    EXPECT_TRUE(
        all_close(ops::matmul(at, bt, {.transpose_a = true, .transpose_b = true}), expected));
  }
}

TEST(MatMul, Float64MatchesNaiveReferenceForAllTransposes) {
  for (const Case& c : {Case{1, 1, 1}, Case{3, 5, 2}, Case{17, 9, 23}, Case{40, 64, 70}}) {
    for (int t = 0; t < 4; ++t) {
      const bool ta = t & 1, tb = t & 2;
      const Tensor a = random_f64(stored({}, c.m, c.k, ta), -1, 1, 11);
      const Tensor b = random_f64(stored({}, c.k, c.n, tb), -1, 1, 12);
      EXPECT_TRUE(all_close(ops::matmul(a, b, {.transpose_a = ta, .transpose_b = tb}),
                            reference_product(a, b, ta, tb), 1e-12, 1e-12))
          << c.m << "x" << c.k << "x" << c.n << " ta=" << ta << " tb=" << tb;
    }
  }
}

TEST(MatMul, Float32MatchesFloat64OnBothKernelPaths) {
  // Small-kernel shapes cover row remainders (M mod 6), column tails (N mod 16, N < 8) and the
  // motivating 16x32x16; the others exceed kSmallMatMulMacs and go to oneDNN.
  const std::vector<Case> cases = {{16, 32, 16}, {1, 7, 3},     {3, 20, 40},   {9, 3, 33},
                                   {5, 13, 9},   {7, 33, 17},   {13, 64, 24},  {2, 256, 250},
                                   {64, 96, 80}, {33, 300, 47}, {128, 64, 128}};
  int small_cases = 0;
  for (const Case& c : cases) {
    const bool small = kernels::cpu::matmul_f32_uses_small_kernel({.m = c.m, .n = c.n, .k = c.k});
    small_cases += small;
    for (int t = 0; t < 4; ++t) {
      const bool ta = t & 1, tb = t & 2;
      const Tensor a = random_f64(stored({}, c.m, c.k, ta), -1, 1, 21);
      const Tensor b = random_f64(stored({}, c.k, c.n, tb), -1, 1, 22);
      const ops::MatMulOptions o{.transpose_a = ta, .transpose_b = tb};
      const Tensor y = ops::matmul(f32(a), f32(b), o);
      EXPECT_EQ(y.dtype(), DType::kFloat32);
      EXPECT_TRUE(all_close(y, ops::matmul(a, b, o), 1e-4, 1e-4))
          << c.m << "x" << c.k << "x" << c.n << " ta=" << ta << " tb=" << tb
          << (small ? " (small kernel)" : " (oneDNN)");
    }
  }
  EXPECT_EQ(small_cases, 8);  // and 3 on oneDNN
}

TEST(MatMul, SmallKernelAndOneDnnAgreeOnTheSameProblems) {
  using kernels::cpu::MatMulShape;
  for (const Case& c : {Case{16, 32, 16}, Case{6, 5, 8}, Case{11, 40, 30}, Case{70, 50, 60}}) {
    for (int t = 0; t < 4; ++t) {
      const bool ta = t & 1, tb = t & 2;
      const Tensor a = f32(random_f64(stored({3}, c.m, c.k, ta), -1, 1, 31));
      const Tensor b = f32(random_f64(stored({3}, c.k, c.n, tb), -1, 1, 32));
      const MatMulShape s{.m = c.m,
                          .n = c.n,
                          .k = c.k,
                          .transpose_a = ta,
                          .transpose_b = tb,
                          .batch_a = {3},
                          .batch_b = {3},
                          .batch_c = {3}};
      Tensor small = Tensor::empty({3, c.m, c.n});
      Tensor onednn = Tensor::empty({3, c.m, c.n});
      kernels::cpu::matmul_f32_small(a.data<float>(), b.data<float>(), small.data<float>(), s);
      kernels::cpu::matmul_f32_onednn(a.data<float>(), b.data<float>(), onednn.data<float>(), s);
      EXPECT_TRUE(all_close(small, onednn, 1e-5, 1e-5))
          << c.m << "x" << c.k << "x" << c.n << " ta=" << ta << " tb=" << tb;
    }
  }
}

// NOTE [Leading dimensions of 2 KiB] in src/kernels/cpu/matmul.cc: an untransposed B of 512 or
// 1024 columns, a transposed A of 512 columns, and both, are copied with padded rows; the product
// equals the Float64 one and oneDNN's on the operands as they lie.
TEST(MatMul, OperandsWithRowsTwoKibApartArePaddedAndGiveTheSameProduct) {
  using kernels::cpu::MatMulShape;
  for (const Case& c : {Case{5, 64, 512}, Case{3, 50, 1024}, Case{512, 9, 40}, Case{512, 3, 512},
                        Case{512, 1, 512}}) {
    for (int t = 0; t < 4; ++t) {
      const bool ta = t & 1, tb = t & 2;
      const Tensor a64 = random_f64(stored({}, c.m, c.k, ta), -1, 1, 41);
      const Tensor b64 = random_f64(stored({}, c.k, c.n, tb), -1, 1, 42);
      const Tensor a = f32(a64), b = f32(b64);
      const MatMulShape s{.m = c.m, .n = c.n, .k = c.k, .transpose_a = ta, .transpose_b = tb};
      ASSERT_FALSE(kernels::cpu::matmul_f32_uses_small_kernel(s));
      Tensor padded = Tensor::full({c.m, c.n}, std::nanf(""));
      Tensor as_is = Tensor::full({c.m, c.n}, std::nanf(""));
      kernels::cpu::matmul_f32_onednn(a.data<float>(), b.data<float>(), padded.data<float>(), s);
      kernels::cpu::matmul_f32_onednn(a.data<float>(), b.data<float>(), as_is.data<float>(), s,
                                      /*pad_2k_strides=*/false);
      const std::string what = fmt::format("{}x{}x{} ta={} tb={}", c.m, c.k, c.n,
                                           static_cast<int>(ta), static_cast<int>(tb));
      EXPECT_TRUE(all_close(padded, as_is, 1e-5, 1e-5)) << what;
      EXPECT_TRUE(all_close(padded, reference_product(a64, b64, ta, tb), 1e-4, 1e-4)) << what;
      EXPECT_TRUE(
          all_close(ops::matmul(a, b, {.transpose_a = ta, .transpose_b = tb}), padded, 0, 0))
          << what << ": the op takes the padded path";
    }
  }
}

TEST(MatMul, PathChoiceFollowsTheThreshold) {
  using kernels::cpu::MatMulShape;
  EXPECT_TRUE(kernels::cpu::matmul_f32_uses_small_kernel(MatMulShape{.m = 16, .n = 16, .k = 32}));
  EXPECT_FALSE(kernels::cpu::matmul_f32_uses_small_kernel(MatMulShape{.m = 64, .n = 80, .k = 96}));
  // A long dot product is small in multiply-adds but padded eightfold by the small kernel.
  EXPECT_FALSE(
      kernels::cpu::matmul_f32_uses_small_kernel(MatMulShape{.m = 1, .n = 1, .k = 100000}));
}

TEST(MatMul, EmptyReductionGivesZerosAndEmptyRowsGiveEmpty) {
  for (DType dtype : {DType::kFloat32, DType::kFloat64}) {
    const Tensor y = ops::matmul(Tensor::zeros({3, 0}, dtype), Tensor::zeros({0, 4}, dtype));
    EXPECT_TRUE(all_close(y, Tensor::zeros({3, 4}, DType::kFloat64)));
    EXPECT_EQ(ops::matmul(Tensor::zeros({0, 5}, dtype), Tensor::ones({5, 2}, dtype)).shape(),
              Shape({0, 2}));
  }
}

// ---- MatMul gradients ----

TEST(MatMul, GradientsForAllTransposes) {
  for (const Case& c : {Case{1, 1, 1}, Case{1, 4, 1}, Case{3, 4, 5}, Case{6, 1, 2}}) {
    for (int t = 0; t < 4; ++t) {
      const bool ta = t & 1, tb = t & 2;
      const ops::MatMulOptions o{.transpose_a = ta, .transpose_b = tb};
      EXPECT_TRUE(
          gradcheck([&](const std::vector<Tensor>& in) { return ops::matmul(in[0], in[1], o); },
                    {random_f64(stored({}, c.m, c.k, ta), -1, 1, 41),
                     random_f64(stored({}, c.k, c.n, tb), -1, 1, 42)}))
          << c.m << "x" << c.k << "x" << c.n << " ta=" << ta << " tb=" << tb;
    }
  }
}

TEST(MatMul, Float32GradientsMatchFloat64) {
  const Tensor a = random_f64({7, 12}, -1, 1, 51), b = random_f64({9, 12}, -1, 1, 52);
  const Tensor dy = random_f64({7, 9}, -1, 1, 53);
  auto grads = [&](DType dtype) {
    Tensor x = ops::cast(a, dtype).set_requires_grad(true);
    Tensor w = ops::cast(b, dtype).set_requires_grad(true);
    return autodiff::grad(ops::matmul(x, w, {.transpose_b = true}), {x, w}, ops::cast(dy, dtype));
  };
  const std::vector<Tensor> g32 = grads(DType::kFloat32), g64 = grads(DType::kFloat64);
  EXPECT_TRUE(all_close(g32[0], g64[0], 1e-5, 1e-5));
  EXPECT_TRUE(all_close(g32[1], g64[1], 1e-5, 1e-5));
}

// ---- MatMul errors ----

TEST(MatMul, ReductionDimMismatchNamesBothShapes) {
  const Tensor a = Tensor::zeros({2, 5}), b = Tensor::zeros({3, 4});
  EXPECT_ERROR(ops::matmul(a, b), "MatMul", "input 1 has shape (3, 4)", "expected dim 0 to be 5",
               "input 0 dim 1, the reduction dim", "input 0 has shape (2, 5)");
  EXPECT_ERROR(ops::matmul(a, b, {.transpose_a = true, .transpose_b = true}),
               "input 1 has shape (3, 4)", "expected dim 1 to be 2", "input 0 dim 0",
               "transpose_a=true", "transpose_b=true");
}

TEST(MatMul, RejectsWrongRanksAndDtypes) {
  EXPECT_ERROR(ops::matmul(Tensor::zeros({2, 3, 4}), Tensor::zeros({4, 2})), "MatMul",
               "input 0 has shape (2, 3, 4)", "expected rank 2");
  EXPECT_ERROR(ops::matmul(Tensor::zeros({2, 3}), Tensor::zeros({3})), "MatMul",
               "input 1 has shape (3)", "expected rank 2");
  EXPECT_ERROR(ops::matmul(Tensor::zeros({2, 3}), Tensor::zeros({3, 2}, DType::kFloat64)), "MatMul",
               "input 0 has dtype Float32 but input 1 has dtype Float64");
  EXPECT_ERROR(ops::matmul(Tensor::zeros({2, 3}, DType::kInt32), Tensor::zeros({3, 2})), "MatMul",
               "input 0 has dtype Int32", "expected Float32 or Float64");
}

// ---- BatchMatMul ----

TEST(BatchMatMul, HandComputedValues) {
  // Two batches: the identity and twice the identity, times one shared (2, 2) matrix.
  const Tensor a = Tensor::from_vector<double>({1, 0, 0, 1, 2, 0, 0, 2}, {2, 2, 2});
  const Tensor b = Tensor::from_vector<double>({1, 2, 3, 4}, {2, 2});
  EXPECT_TRUE(all_close(ops::batch_matmul(a, b),
                        Tensor::from_vector<double>({1, 2, 3, 4, 2, 4, 6, 8}, {2, 2, 2})));
  EXPECT_TRUE(all_close(ops::batch_matmul(f32(a), f32(b), {.transpose_b = true}),
                        Tensor::from_vector<double>({1, 3, 2, 4, 2, 6, 4, 8}, {2, 2, 2})));
}

TEST(BatchMatMul, BroadcastsBatchDimsOnBothPathsAndDtypes) {
  struct BatchCase {
    std::vector<int64_t> batch_a, batch_b;
    Case c;
  };
  const std::vector<BatchCase> cases = {{{4}, {4}, {3, 5, 2}},
                                        {{2, 1}, {1, 3}, {4, 6, 5}},
                                        {{}, {3}, {5, 4, 7}},
                                        {{2, 3}, {}, {6, 8, 16}},
                                        {{1, 2, 1}, {3, 1, 2}, {2, 3, 3}},
                                        {{2, 1}, {1, 2}, {64, 60, 50}},
                                        {{3}, {3}, {70, 40, 60}},
                                        {{}, {2}, {80, 48, 40}}};
  for (const BatchCase& bc : cases) {
    for (int t = 0; t < 4; ++t) {
      const bool ta = t & 1, tb = t & 2;
      const Case& c = bc.c;
      const Tensor a = random_f64(stored(bc.batch_a, c.m, c.k, ta), -1, 1, 61);
      const Tensor b = random_f64(stored(bc.batch_b, c.k, c.n, tb), -1, 1, 62);
      const ops::MatMulOptions o{.transpose_a = ta, .transpose_b = tb};
      const Tensor expected = reference_product(a, b, ta, tb);
      EXPECT_TRUE(all_close(ops::batch_matmul(a, b, o), expected, 1e-12, 1e-12))
          << a.shape().to_string() << " x " << b.shape().to_string() << " t=" << t;
      EXPECT_TRUE(all_close(ops::batch_matmul(f32(a), f32(b), o), expected, 1e-4, 1e-4))
          << a.shape().to_string() << " x " << b.shape().to_string() << " t=" << t << " f32";
    }
  }
}

TEST(BatchMatMul, MoreBroadcastBatchDimsThanOneDnnTakes) {
  // 11 batch dims with broadcasting, and a product above the small-kernel threshold: oneDNN takes
  // at most 10 batch dims, so this runs one 2-D oneDNN product per batch.
  std::vector<int64_t> batch_a(11, 1), batch_b(11, 1);
  batch_a[0] = 2;
  batch_b[10] = 2;
  const Tensor a = random_f64(stored(batch_a, 64, 48, false), -1, 1, 65);
  const Tensor b = random_f64(stored(batch_b, 48, 50, true), -1, 1, 66);
  const Tensor y = ops::batch_matmul(f32(a), f32(b), {.transpose_b = true});
  EXPECT_EQ(y.rank(), 13);
  EXPECT_TRUE(all_close(y, reference_product(a, b, false, true), 1e-4, 1e-4));
}

TEST(BatchMatMul, GradientsWithBroadcastAndTransposes) {
  struct GradCase {
    Shape a, b;
    bool ta, tb;
  };
  const std::vector<GradCase> cases = {
      {{2, 3, 4}, {2, 4, 5}, false, false}, {{2, 4, 3}, {4, 5}, true, false},
      {{3, 4}, {2, 5, 4}, false, true},     {{2, 1, 4, 3}, {1, 3, 2, 4}, true, true},
      {{1, 1, 1}, {3, 1, 1}, false, false},
  };
  for (const GradCase& gc : cases) {
    const ops::MatMulOptions o{.transpose_a = gc.ta, .transpose_b = gc.tb};
    EXPECT_TRUE(
        gradcheck([&](const std::vector<Tensor>& in) { return ops::batch_matmul(in[0], in[1], o); },
                  {random_f64(gc.a, -1, 1, 71), random_f64(gc.b, -1, 1, 72)}))
        << gc.a.to_string() << " x " << gc.b.to_string();
  }
}

TEST(BatchMatMul, RejectsBadShapes) {
  EXPECT_ERROR(ops::batch_matmul(Tensor::zeros({2, 3, 4}), Tensor::zeros({3, 4, 5})), "BatchMatMul",
               "input 0 (shape (2, 3, 4))", "input 1 (shape (3, 4, 5))", "cannot be broadcast",
               "is 2 and 3");
  EXPECT_ERROR(ops::batch_matmul(Tensor::zeros({2, 3, 4}), Tensor::zeros({2, 5, 4})), "BatchMatMul",
               "input 1 has shape (2, 5, 4)", "expected dim 1 to be 4");
  EXPECT_ERROR(ops::batch_matmul(Tensor::zeros({4}), Tensor::zeros({4, 2})), "BatchMatMul",
               "input 0 has shape (4)", "expected rank >= 2");
  EXPECT_ERROR(ops::batch_matmul(Tensor::zeros({2, 2, 2}), Tensor::zeros({2, 2}, DType::kInt64)),
               "BatchMatMul", "input 1 has dtype Int64");
}

// ---- BiasAdd ----

TEST(BiasAdd, AddsAlongDimOne) {
  const Tensor x2 = Tensor::from_vector<double>({1, 2, 3, 4, 5, 6}, {2, 3});
  const Tensor b3 = Tensor::from_vector<double>({10, 20, 30});
  EXPECT_TRUE(all_close(ops::bias_add(x2, b3),
                        Tensor::from_vector<double>({11, 22, 33, 14, 25, 36}, {2, 3})));
  // NCHW: (1, 2, 2, 2), one bias per channel.
  const Tensor x4 = Tensor::from_vector<double>({1, 2, 3, 4, 5, 6, 7, 8}, {1, 2, 2, 2});
  const Tensor b2 = Tensor::from_vector<double>({100, -100});
  const Tensor expected =
      Tensor::from_vector<double>({101, 102, 103, 104, -95, -94, -93, -92}, {1, 2, 2, 2});
  EXPECT_TRUE(all_close(ops::bias_add(x4, b2), expected));
  EXPECT_TRUE(all_close(ops::bias_add(f32(x4), f32(b2)), expected));
}

TEST(BiasAdd, Gradients) {
  for (const Shape& shape : {Shape{4, 3}, Shape{1, 1}, Shape{2, 3, 5}, Shape{2, 3, 2, 2}}) {
    EXPECT_TRUE(gradcheck([](const std::vector<Tensor>& in) { return ops::bias_add(in[0], in[1]); },
                          {random_f64(shape, -1, 1, 81), random_f64({shape[1]}, -1, 1, 82)}))
        << shape.to_string();
  }
}

TEST(BiasAdd, RejectsBadInputs) {
  EXPECT_ERROR(ops::bias_add(Tensor::zeros({2, 3, 5, 5}), Tensor::zeros({4})), "BiasAdd",
               "input 1 (bias) has shape (4)", "expected (3)", "dim 1 (the channel dim)",
               "(2, 3, 5, 5)");
  EXPECT_ERROR(ops::bias_add(Tensor::zeros({3}), Tensor::zeros({3})), "BiasAdd",
               "input 0 has shape (3)", "expected rank >= 2");
  EXPECT_ERROR(ops::bias_add(Tensor::zeros({2, 3}), Tensor::zeros({1, 3})), "BiasAdd",
               "input 1 has shape (1, 3)", "expected rank 1");
  EXPECT_ERROR(ops::bias_add(Tensor::zeros({2, 3}), Tensor::zeros({3}, DType::kFloat64)), "BiasAdd",
               "input 0 has dtype Float32 but input 1 has dtype Float64");
}

}  // namespace
}  // namespace cleave

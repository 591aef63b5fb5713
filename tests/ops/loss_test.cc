// SoftmaxCrossEntropyWithLogits, SparseSoftmaxCrossEntropyWithLogits and MSE.
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

// Random probability rows (N, C): positive, each row summing to 1.
Tensor random_distribution(int64_t n, int64_t c, uint64_t seed) {
  Tensor t = random_f64({n, c}, 0.1, 1.0, seed);
  double* p = t.data<double>();
  for (int64_t i = 0; i < n; ++i) {
    double s = 0;
    for (int64_t j = 0; j < c; ++j) s += p[i * c + j];
    for (int64_t j = 0; j < c; ++j) p[i * c + j] /= s;
  }
  return t;
}

// ---- dense ----

TEST(SoftmaxCrossEntropy, HandComputedValues) {
  // log_softmax([1, 2, 3]) = [-2.40760596, -1.40760596, -0.40760596].
  const Tensor logits = Tensor::from_vector<double>({1, 2, 3, 1, 2, 3}, {2, 3});
  const Tensor labels = Tensor::from_vector<double>({0, 0, 1, 0.2, 0.3, 0.5}, {2, 3});
  const Tensor expected = Tensor::from_vector<double>({0.4076059644443806, 1.1076059644443806});
  EXPECT_TRUE(
      all_close(ops::softmax_cross_entropy_with_logits(logits, labels), expected, 1e-15, 1e-14));
  const Tensor loss32 = ops::softmax_cross_entropy_with_logits(f32(logits), f32(labels));
  EXPECT_EQ(loss32.dtype(), DType::kFloat32);
  EXPECT_TRUE(all_close(loss32, expected, 1e-6, 1e-6));
}

TEST(SoftmaxCrossEntropy, LargeLogitsStayFinite) {
  const Tensor logits = Tensor::from_vector<double>({1001, 1002, 1003, -5000, 0, 5000}, {2, 3});
  const Tensor labels = Tensor::from_vector<double>({0, 0, 1, 0, 1, 0}, {2, 3});
  const Tensor expected = Tensor::from_vector<double>({0.4076059644443806, 5000});
  EXPECT_TRUE(
      all_close(ops::softmax_cross_entropy_with_logits(logits, labels), expected, 1e-12, 1e-12));
  EXPECT_TRUE(all_close(ops::softmax_cross_entropy_with_logits(f32(logits), f32(labels)), expected,
                        1e-4, 1e-6));
}

TEST(SoftmaxCrossEntropy, Float32MatchesFloat64IncludingLargeBatches) {
  for (const Shape& shape : {Shape{4, 10}, Shape{256, 100}}) {
    const Tensor logits = random_f64(shape, -5, 5, 3);
    const Tensor labels = random_distribution(shape[0], shape[1], 4);
    const Tensor y64 = ops::softmax_cross_entropy_with_logits(logits, labels);
    EXPECT_TRUE(all_close(ops::softmax_cross_entropy_with_logits(f32(logits), f32(labels)), y64,
                          1e-5, 1e-5))
        << shape.to_string();
  }
}

TEST(SoftmaxCrossEntropy, GradientsWithRespectToLogitsAndLabels) {
  for (const Shape& shape : {Shape{1, 1}, Shape{1, 4}, Shape{3, 5}, Shape{6, 2}}) {
    EXPECT_TRUE(gradcheck(
        [](const std::vector<Tensor>& in) {
          return ops::softmax_cross_entropy_with_logits(in[0], in[1]);
        },
        {random_f64(shape, -3, 3, 5), random_distribution(shape[0], shape[1], 6)}))
        << shape.to_string();
  }
}

TEST(SoftmaxCrossEntropy, RejectsBadInputs) {
  EXPECT_ERROR(ops::softmax_cross_entropy_with_logits(Tensor::zeros({2, 3}), Tensor::zeros({2, 4})),
               "SoftmaxCrossEntropyWithLogits", "input 1 (labels) has shape (2, 4)",
               "expected (2, 3), the shape of input 0 (logits)");
  EXPECT_ERROR(ops::softmax_cross_entropy_with_logits(Tensor::zeros({6}), Tensor::zeros({6})),
               "SoftmaxCrossEntropyWithLogits", "input 0 has shape (6)", "expected rank 2");
  EXPECT_ERROR(ops::softmax_cross_entropy_with_logits(Tensor::zeros({2, 3}),
                                                      Tensor::zeros({2, 3}, DType::kFloat64)),
               "input 0 has dtype Float32 but input 1 has dtype Float64");
  EXPECT_ERROR(ops::softmax_cross_entropy_with_logits(Tensor::zeros({2, 3}, DType::kInt64),
                                                      Tensor::zeros({2, 3}, DType::kInt64)),
               "input 0 has dtype Int64", "expected Float32 or Float64");
}

// ---- sparse ----

TEST(SparseSoftmaxCrossEntropy, HandComputedValuesForBothLabelDtypes) {
  const Tensor logits = Tensor::from_vector<double>({1, 2, 3, 1, 1, 1}, {2, 3});
  const Tensor expected = Tensor::from_vector<double>({0.4076059644443806, std::log(3.0)});
  for (DType label_dtype : {DType::kInt32, DType::kInt64}) {
    const Tensor labels = ops::cast(Tensor::from_vector<double>({2, 0}), label_dtype);
    EXPECT_TRUE(all_close(ops::sparse_softmax_cross_entropy_with_logits(logits, labels), expected,
                          1e-15, 1e-14));
    EXPECT_TRUE(all_close(ops::sparse_softmax_cross_entropy_with_logits(f32(logits), labels),
                          expected, 1e-6, 1e-6));
  }
}

TEST(SparseSoftmaxCrossEntropy, EqualsDenseWithOneHotLabels) {
  const int64_t n = 50, c = 7;
  const Tensor logits = random_f64({n, c}, -10, 10, 7);
  std::vector<int64_t> ids(n);
  std::vector<double> one_hot(n * c, 0.0);
  for (int64_t i = 0; i < n; ++i) {
    ids[i] = (i * 5 + 3) % c;
    one_hot[i * c + ids[i]] = 1.0;
  }
  const Tensor labels = Tensor::from_vector(ids);
  const Tensor dense = Tensor::from_vector(one_hot, {n, c});
  EXPECT_TRUE(all_close(ops::sparse_softmax_cross_entropy_with_logits(logits, labels),
                        ops::softmax_cross_entropy_with_logits(logits, dense), 1e-14, 1e-13));
  // So are the gradients with respect to the logits.
  const Tensor dy = random_f64({n}, -1, 1, 8);
  Tensor x1 = logits.clone().set_requires_grad(true);
  Tensor x2 = logits.clone().set_requires_grad(true);
  const Tensor g1 =
      autodiff::grad(ops::sparse_softmax_cross_entropy_with_logits(x1, labels), {x1}, dy)[0];
  const Tensor g2 = autodiff::grad(ops::softmax_cross_entropy_with_logits(x2, dense), {x2}, dy)[0];
  EXPECT_TRUE(all_close(g1, g2, 1e-14, 1e-13));
}

TEST(SparseSoftmaxCrossEntropy, GradientsWithRespectToLogits) {
  for (DType label_dtype : {DType::kInt32, DType::kInt64}) {
    for (const Shape& shape : {Shape{1, 1}, Shape{1, 5}, Shape{4, 3}, Shape{7, 10}}) {
      std::vector<double> ids;
      for (int64_t i = 0; i < shape[0]; ++i) ids.push_back(static_cast<double>(i % shape[1]));
      const Tensor labels = ops::cast(Tensor::from_vector(ids), label_dtype);
      EXPECT_TRUE(gradcheck(
          [](const std::vector<Tensor>& in) {
            return ops::sparse_softmax_cross_entropy_with_logits(in[0], in[1]);
          },
          {random_f64(shape, -3, 3, 9), labels}))
          << shape.to_string() << " " << dtype_name(label_dtype);
    }
  }
}

TEST(SparseSoftmaxCrossEntropy, Float32GradientsMatchFloat64) {
  const Tensor logits = random_f64({64, 100}, -4, 4, 10);
  std::vector<int32_t> ids(64);
  for (int i = 0; i < 64; ++i) ids[i] = (i * 37) % 100;
  const Tensor labels = Tensor::from_vector(ids);
  const Tensor dy = random_f64({64}, -1, 1, 11);
  auto grad = [&](DType dtype) {
    Tensor x = ops::cast(logits, dtype).set_requires_grad(true);
    return autodiff::grad(ops::sparse_softmax_cross_entropy_with_logits(x, labels), {x},
                          ops::cast(dy, dtype))[0];
  };
  EXPECT_TRUE(all_close(grad(DType::kFloat32), grad(DType::kFloat64), 1e-6, 1e-5));
}

TEST(SparseSoftmaxCrossEntropy, LabelOutOfRangeNamesSampleLabelAndClassCount) {
  const Tensor logits = Tensor::zeros({4, 5});
  EXPECT_ERROR(ops::sparse_softmax_cross_entropy_with_logits(
                   logits, Tensor::from_vector<int32_t>({0, 4, 1, 5})),
               "SparseSoftmaxCrossEntropyWithLogits", "holds 5 for sample 3",
               "expected a class id in [0, 5)", "C = 5");
  EXPECT_ERROR(ops::sparse_softmax_cross_entropy_with_logits(
                   logits, Tensor::from_vector<int64_t>({0, -1, 1, 2})),
               "holds -1 for sample 1", "[0, 5)");
  // The backward primitive checks too: it can be reached from a graph without the forward.
  EXPECT_ERROR(ir::call("SparseSoftmaxCrossEntropyWithLogitsGrad",
                        {logits, Tensor::from_vector<int32_t>({0, 9, 1, 2}), Tensor::ones({4})}),
               "SparseSoftmaxCrossEntropyWithLogitsGrad", "holds 9 for sample 1");
}

TEST(SparseSoftmaxCrossEntropy, RejectsBadShapesAndDtypes) {
  EXPECT_ERROR(ops::sparse_softmax_cross_entropy_with_logits(Tensor::zeros({4, 5}),
                                                             Tensor::zeros({3}, DType::kInt32)),
               "input 1 (labels) has shape (3)", "expected (4)");
  EXPECT_ERROR(
      ops::sparse_softmax_cross_entropy_with_logits(Tensor::zeros({4, 5}), Tensor::zeros({4})),
      "SparseSoftmaxCrossEntropyWithLogits", "input 1 has dtype Float32",
      "expected one of Int32, Int64");
  EXPECT_ERROR(ops::sparse_softmax_cross_entropy_with_logits(Tensor::zeros({4, 5}),
                                                             Tensor::zeros({4, 1}, DType::kInt32)),
               "input 1 has shape (4, 1)", "expected rank 1");
  EXPECT_ERROR(ops::sparse_softmax_cross_entropy_with_logits(Tensor::zeros({4, 5, 1}),
                                                             Tensor::zeros({4}, DType::kInt32)),
               "input 0 has shape (4, 5, 1)", "expected rank 2");
}

// ---- MSE ----

TEST(Mse, HandComputedValuesWithBroadcast) {
  const Tensor a = Tensor::from_vector<double>({1, 2, 3});
  const Tensor b = Tensor::from_vector<double>({0, 2, 5});
  EXPECT_TRUE(all_close(ops::mse(a, b), Tensor::from_vector<double>({1, 0, 4})));
  EXPECT_TRUE(all_close(ops::mse(f32(a), f32(b)), Tensor::from_vector<double>({1, 0, 4})));
  const Tensor col = Tensor::from_vector<double>({1, -1}, {2, 1});
  EXPECT_TRUE(
      all_close(ops::mse(col, a), Tensor::from_vector<double>({0, 1, 4, 4, 9, 16}, {2, 3})));
}

TEST(Mse, GradientsIncludingBroadcast) {
  struct Pair {
    Shape a, b;
  };
  for (const Pair& p :
       std::vector<Pair>{{{3}, {3}}, {{2, 3}, {3}}, {{2, 1}, {1, 4}}, {{1}, {2, 2}}, {{}, {3}}}) {
    EXPECT_TRUE(gradcheck([](const std::vector<Tensor>& in) { return ops::mse(in[0], in[1]); },
                          {random_f64(p.a, -2, 2, 12), random_f64(p.b, -2, 2, 13)}))
        << p.a.to_string() << " vs " << p.b.to_string();
  }
}

TEST(Mse, RejectsBadInputs) {
  EXPECT_ERROR(ops::mse(Tensor::zeros({3}), Tensor::zeros({3}, DType::kFloat64)), "MSE",
               "input 0 has dtype Float32 but input 1 has dtype Float64");
  EXPECT_ERROR(ops::mse(Tensor::zeros({3}, DType::kInt32), Tensor::zeros({3}, DType::kInt32)),
               "MSE", "input 0 has dtype Int32");
  EXPECT_ERROR(ops::mse(Tensor::zeros({3}), Tensor::zeros({4})), "MSE", "(3) and (4)",
               "cannot be broadcast");
}

}  // namespace
}  // namespace cleave

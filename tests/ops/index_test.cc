// Gather, UnsortedSegmentSum and OneHot: forward values, gradients and bad-input errors.
#include <gtest/gtest.h>

#include "cleave/ops/shape.h"
#include "testing/gradcheck.h"

namespace cleave {
namespace {

using testing::all_close;
using testing::gradcheck;
using testing::random_f64;

Tensor iota(const Shape& shape, DType dtype = DType::kFloat64) {
  return ops::reshape(Tensor::arange(0, static_cast<double>(shape.numel()), 1, dtype), shape);
}

Tensor vec(std::vector<double> v, const Shape& shape) { return Tensor::from_vector(v, shape); }

Tensor ids32(std::vector<int32_t> v, const Shape& shape) { return Tensor::from_vector(v, shape); }
Tensor ids64(std::vector<int64_t> v, const Shape& shape) { return Tensor::from_vector(v, shape); }

// ---- Gather ----

TEST(Gather, RowsAlongAxisZero) {
  Tensor params = iota({4, 3});
  Tensor y = ops::gather(params, ids32({2, 0, 2}, {3}));
  EXPECT_TRUE(all_close(y, vec({6, 7, 8, 0, 1, 2, 6, 7, 8}, {3, 3})));
  // 2-D indices: out shape params[:0] + (2, 2) + params[1:].
  Tensor z = ops::gather(params, ids64({3, 1, 1, 0}, {2, 2}));
  EXPECT_EQ(z.shape(), (Shape{2, 2, 3}));
  EXPECT_EQ(z.at({0, 0, 2}), 11);
  EXPECT_EQ(z.at({1, 1, 1}), 1);
  // A scalar index drops the axis.
  EXPECT_TRUE(all_close(ops::gather(params, ids64({1}, {})), vec({3, 4, 5}, {3})));
}

TEST(Gather, InnerAxes) {
  Tensor params = iota({2, 3, 4});
  Tensor y = ops::gather(params, ids32({3, 0}, {2}), -1);
  EXPECT_EQ(y.shape(), (Shape{2, 3, 2}));
  EXPECT_EQ(y.at({1, 2, 0}), 23);
  EXPECT_EQ(y.at({1, 2, 1}), 20);
  Tensor z = ops::gather(params, ids32({2, 2, 1}, {3, 1}), 1);
  EXPECT_EQ(z.shape(), (Shape{2, 3, 1, 4}));
  EXPECT_EQ(z.at({1, 2, 0, 3}), 12 + 4 + 3);
  // Integer and Bool params.
  Tensor ints = ops::gather(Tensor::from_vector<int64_t>({10, 20, 30}), ids32({2, 2, 0}, {3}));
  EXPECT_EQ(ints.to_vector<int64_t>(), (std::vector<int64_t>{30, 30, 10}));
  Tensor bools = ops::gather(ops::cast(vec({1, 0, 1}, {3}), DType::kBool), ids32({1, 2}, {2}));
  EXPECT_TRUE(all_close(ops::cast(bools, DType::kFloat64), vec({0, 1}, {2})));
}

TEST(Gather, LargeMatchesOneHotMatMulDefinition) {
  // Large enough to run in parallel; checked against row-by-row slices.
  Tensor params = iota({500, 130}, DType::kFloat32);
  std::vector<int64_t> idx;
  for (int i = 0; i < 700; ++i) idx.push_back((i * 37) % 500);
  Tensor y = ops::gather(params, ids64(idx, {700}));
  ASSERT_EQ(y.shape(), (Shape{700, 130}));
  for (int i : {0, 1, 350, 699}) {
    EXPECT_TRUE(
        all_close(ops::slice(y, {i, 0}, {1, -1}), ops::slice(params, {idx[i], 0}, {1, -1})));
  }
}

TEST(Gather, IndexOutOfRangeIsReported) {
  Tensor params = iota({5, 2});
  EXPECT_ERROR(ops::gather(params, ids32({1, 7, 2}, {3})), "Gather", "index 7", "flat position 1",
               "axis 0 of input 0 (shape (5, 2))", "[0, 5)");
  EXPECT_ERROR(ops::gather(params, ids64({-1}, {1}), 1), "index -1", "axis 1", "[0, 2)");
}

TEST(Gather, BadInputs) {
  EXPECT_ERROR(ops::gather(iota({5, 2}), vec({1}, {1})), "Gather", "input 1 has dtype Float64",
               "Int32, Int64");
  EXPECT_ERROR(ops::gather(iota({5, 2}), ids32({1}, {1}), 2), "axis 2 is out of range", "[-2, 1]");
  EXPECT_ERROR(ops::gather(Tensor::scalar(1), ids32({0}, {1})), "expected rank >= 1");
}

TEST(Gather, Gradient) {
  // Repeated indices accumulate.
  Tensor rows = ids32({2, 0, 2, 2}, {4});
  EXPECT_TRUE(gradcheck([&](auto& in) { return ops::gather(in[0], rows); }, {random_f64({3, 2})}));
  Tensor grid = ids64({1, 1, 0, 3, 1, 0}, {2, 3});
  EXPECT_TRUE(
      gradcheck([&](auto& in) { return ops::gather(in[0], grid, 1); }, {random_f64({2, 4, 3})}));
  EXPECT_TRUE(
      gradcheck([&](auto& in) { return ops::gather(in[0], rows, -1); }, {random_f64({2, 3})}));
  Tensor one = ids64({2}, {});
  EXPECT_TRUE(
      gradcheck([&](auto& in) { return ops::gather(in[0], one, 1); }, {random_f64({2, 3, 2})}));
}

TEST(Gather, RepeatedIndicesAccumulateExactly) {
  Tensor params = Tensor::zeros({3}, DType::kFloat64).set_requires_grad(true);
  Tensor y = ops::gather(params, ids32({1, 1, 1, 2}, {4}));
  autodiff::backward(ops::reduce_sum(y));
  EXPECT_TRUE(all_close(params.grad(), vec({0, 3, 1}, {3})));
}

// ---- UnsortedSegmentSum ----

TEST(UnsortedSegmentSum, HandChecked) {
  Tensor x = vec({1, 2, 3, 4, 5, 6}, {3, 2});
  Tensor y = ops::unsorted_segment_sum(x, ids32({2, 0, 2}, {3}), 4);
  EXPECT_TRUE(all_close(y, vec({3, 4, 0, 0, 6, 8, 0, 0}, {4, 2})));
  Tensor ints =
      ops::unsorted_segment_sum(Tensor::from_vector<int32_t>({1, 2, 3}), ids64({0, 0, 1}, {3}), 2);
  EXPECT_EQ(ints.to_vector<int32_t>(), (std::vector<int32_t>{3, 3}));
}

TEST(UnsortedSegmentSum, BadInputs) {
  Tensor x = iota({3, 2});
  EXPECT_ERROR(ops::unsorted_segment_sum(x, ids32({0, 1}, {2}), 2), "UnsortedSegmentSum",
               "input 1 (segment ids) has shape (2)", "leading dims to equal (2)");
  EXPECT_ERROR(ops::unsorted_segment_sum(x, ids32({0, 5, 1}, {3}), 2), "index 5", "num_segments 2",
               "[0, 2)");
  EXPECT_ERROR(ops::unsorted_segment_sum(x, ids32({0, 0, 1}, {3}), -1), "num_segments is -1");
}

TEST(UnsortedSegmentSum, Gradient) {
  Tensor ids = ids32({1, 0, 1, 1}, {2, 2});
  EXPECT_TRUE(gradcheck([&](auto& in) { return ops::unsorted_segment_sum(in[0], ids, 3); },
                        {random_f64({2, 2, 3})}));
}

// ---- OneHot ----

TEST(OneHot, HandChecked) {
  Tensor y = ops::one_hot(ids32({0, 2, 1}, {3}), {.depth = 3});
  EXPECT_EQ(y.dtype(), DType::kFloat32);
  EXPECT_TRUE(all_close(y, ops::cast(vec({1, 0, 0, 0, 0, 1, 0, 1, 0}, {3, 3}), DType::kFloat32)));
  // axis 0, custom values, an index outside [0, depth) gives an all-off line.
  Tensor z = ops::one_hot(
      ids64({1, 5}, {2}),
      {.depth = 3, .on_value = 2.5, .off_value = -1, .axis = 0, .dtype = DType::kFloat64});
  EXPECT_TRUE(all_close(z, vec({-1, -1, 2.5, -1, -1, -1}, {3, 2})));
  Tensor ints =
      ops::one_hot(ids32({1, 0, 1, 1}, {2, 2}), {.depth = 2, .axis = 1, .dtype = DType::kInt32});
  EXPECT_EQ(ints.shape(), (Shape{2, 2, 2}));
  EXPECT_EQ(ints.to_vector<int32_t>(), (std::vector<int32_t>{0, 1, 1, 0, 0, 0, 1, 1}));
  Tensor b = ops::one_hot(ids32({1}, {1}), {.depth = 2, .dtype = DType::kBool});
  EXPECT_EQ(b.dtype(), DType::kBool);
  EXPECT_EQ(b.at({0, 1}), 1);
}

TEST(OneHot, BadInputs) {
  EXPECT_ERROR(ops::one_hot(ids32({0}, {1}), {.depth = 0}), "OneHot", "depth is 0",
               "expected depth > 0");
  EXPECT_ERROR(ops::one_hot(vec({0}, {1}), {.depth = 2}), "OneHot", "input 0 has dtype Float64",
               "Int32, Int64");
  EXPECT_ERROR(ops::one_hot(ids32({0}, {1}), {.depth = 2, .axis = 2}), "axis 2 is out of range",
               "[0, 1]");
}

}  // namespace
}  // namespace cleave

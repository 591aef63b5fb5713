// Reshape-like views (ExpandDims, Squeeze, Flatten), Transpose and Tile: forward values,
// gradients, storage sharing and bad-input errors.
#include "cleave/ops/shape.h"

#include <gtest/gtest.h>

#include "testing/gradcheck.h"

namespace cleave {
namespace {

using testing::all_close;
using testing::gradcheck;
using testing::random_f64;

Tensor iota(const Shape& shape, DType dtype = DType::kFloat64) {
  return ops::reshape(Tensor::arange(0, static_cast<double>(shape.numel()), 1, dtype), shape);
}

// Reference transpose by multi-index arithmetic (one element at a time).
Tensor reference_transpose(const Tensor& x, const std::vector<int64_t>& perm) {
  const Shape& in = x.shape();
  std::vector<int64_t> out_dims(perm.size());
  for (size_t i = 0; i < perm.size(); ++i) out_dims[i] = in[perm[i]];
  const Shape out_shape(out_dims);
  const std::vector<double> src = x.to_double_vector();
  const std::vector<int64_t> in_strides = in.strides();
  std::vector<double> dst(static_cast<size_t>(out_shape.numel()));
  for (int64_t o = 0; o < out_shape.numel(); ++o) {
    int64_t rem = o, off = 0;
    for (int64_t i = out_shape.rank() - 1; i >= 0; --i) {
      off += rem % out_shape[i] * in_strides[perm[i]];
      rem /= out_shape[i];
    }
    dst[o] = src[off];
  }
  return ops::cast(Tensor::from_vector(dst, out_shape), x.dtype());
}

// ---- views ----

TEST(ExpandDims, InsertsAxisAndSharesStorage) {
  Tensor x = iota({2, 3});
  EXPECT_EQ(ops::expand_dims(x, 0).shape(), (Shape{1, 2, 3}));
  EXPECT_EQ(ops::expand_dims(x, 1).shape(), (Shape{2, 1, 3}));
  EXPECT_EQ(ops::expand_dims(x, 2).shape(), (Shape{2, 3, 1}));
  EXPECT_EQ(ops::expand_dims(x, -1).shape(), (Shape{2, 3, 1}));
  EXPECT_EQ(ops::expand_dims(x, -3).shape(), (Shape{1, 2, 3}));
  Tensor y = ops::expand_dims(x, 1);
  EXPECT_TRUE(y.shares_storage_with(x));
  x.data<double>()[4] = 40;
  EXPECT_EQ(y.at({1, 0, 1}), 40);
}

TEST(ExpandDims, AxisOutOfRange) {
  EXPECT_ERROR(ops::expand_dims(iota({2, 3}), 3), "ExpandDims", "axis 3", "shape (2, 3)",
               "[-3, 2]");
  EXPECT_ERROR(ops::expand_dims(iota({2, 3}), -4), "axis -4", "[-3, 2]");
}

TEST(ExpandDims, Gradient) {
  for (int64_t axis : {0, 1, -1}) {
    EXPECT_TRUE(gradcheck([axis](auto& in) { return ops::expand_dims(in[0], axis); },
                          {random_f64({2, 3})}));
  }
}

TEST(Squeeze, RemovesSizeOneAxes) {
  Tensor x = iota({1, 3, 1, 2});
  EXPECT_EQ(ops::squeeze(x).shape(), (Shape{3, 2}));
  EXPECT_EQ(ops::squeeze(x, {0}).shape(), (Shape{3, 1, 2}));
  EXPECT_EQ(ops::squeeze(x, {-2}).shape(), (Shape{1, 3, 2}));
  EXPECT_EQ(ops::squeeze(x, {0, 2}).shape(), (Shape{3, 2}));
  EXPECT_EQ(ops::squeeze(iota({1, 1})).shape(), Shape{});
  Tensor y = ops::squeeze(x);
  EXPECT_TRUE(y.shares_storage_with(x));
  EXPECT_EQ(y.at({2, 1}), 5);
}

TEST(Squeeze, RejectsAxisOfSizeOtherThanOne) {
  EXPECT_ERROR(ops::squeeze(iota({1, 3}), {1}), "Squeeze", "axis 1", "shape (1, 3)", "size 3",
               "only axes of size 1");
  EXPECT_ERROR(ops::squeeze(iota({1, 3}), {2}), "axis 2 is out of range", "[-2, 1]");
}

TEST(Squeeze, Gradient) {
  EXPECT_TRUE(gradcheck([](auto& in) { return ops::squeeze(in[0]); }, {random_f64({1, 3, 1})}));
  EXPECT_TRUE(
      gradcheck([](auto& in) { return ops::squeeze(in[0], {-1}); }, {random_f64({2, 3, 1})}));
}

TEST(Flatten, MergesTrailingDims) {
  Tensor x = iota({2, 3, 4});
  Tensor y = ops::flatten(x);
  EXPECT_EQ(y.shape(), (Shape{2, 12}));
  EXPECT_TRUE(y.shares_storage_with(x));
  EXPECT_EQ(y.at({1, 5}), 17);
  EXPECT_EQ(ops::flatten(iota({5})).shape(), (Shape{5, 1}));
  EXPECT_EQ(ops::flatten(iota({0, 3})).shape(), (Shape{0, 3}));
  EXPECT_ERROR(ops::flatten(Tensor::scalar(1)), "Flatten", "input 0 has shape ()",
               "expected rank >= 1");
}

TEST(Flatten, Gradient) {
  EXPECT_TRUE(gradcheck([](auto& in) { return ops::flatten(in[0]); }, {random_f64({2, 3, 2})}));
}

TEST(Reshape, SharesStorage) {
  Tensor x = iota({2, 3});
  Tensor y = ops::reshape(x, {3, -1});
  EXPECT_EQ(y.shape(), (Shape{3, 2}));
  EXPECT_TRUE(y.shares_storage_with(x));
}

// ---- Transpose ----

TEST(Transpose, TwoDimensional) {
  Tensor y = ops::transpose(iota({2, 3}), {1, 0});
  EXPECT_TRUE(all_close(y, Tensor::from_vector<double>({0, 3, 1, 4, 2, 5}, {3, 2})));
  EXPECT_FALSE(y.shares_storage_with(iota({2, 3})));
}

TEST(Transpose, ThreeDimensionalHandChecked) {
  // x[i][j][k] = 100 i + 10 j + k; y = x.transpose(2, 0, 1): y[k][i][j] = x[i][j][k].
  std::vector<double> v;
  for (int i = 0; i < 2; ++i)
    for (int j = 0; j < 3; ++j)
      for (int k = 0; k < 4; ++k) v.push_back(100 * i + 10 * j + k);
  Tensor y = ops::transpose(Tensor::from_vector(v, {2, 3, 4}), {2, 0, 1});
  ASSERT_EQ(y.shape(), (Shape{4, 2, 3}));
  EXPECT_EQ(y.at({3, 1, 2}), 123);
  EXPECT_EQ(y.at({0, 1, 0}), 100);
  EXPECT_EQ(y.at({2, 0, 1}), 12);
  // Negative perm entries count from the end.
  EXPECT_TRUE(all_close(ops::transpose(Tensor::from_vector(v, {2, 3, 4}), {-1, 0, -2}), y));
}

TEST(Transpose, MatchesReferenceOnBlockedAndMergedLayouts) {
  struct Case {
    Shape shape;
    std::vector<int64_t> perm;
  };
  // Sizes around the 8x8 micro-kernel and 32x32 tile edges, NCHW <-> NHWC, size-1 dims and
  // permutations that merge to a copy of contiguous runs.
  const std::vector<Case> cases = {{{37, 45}, {1, 0}},
                                   {{64, 64}, {1, 0}},
                                   {{8, 9}, {1, 0}},
                                   {{2, 3, 33, 17}, {0, 2, 3, 1}},
                                   {{2, 33, 17, 3}, {0, 3, 1, 2}},
                                   {{3, 1, 5, 7}, {2, 3, 1, 0}},
                                   {{4, 5, 6}, {1, 0, 2}},
                                   {{4, 5, 6, 7}, {2, 3, 0, 1}},
                                   {{1, 1, 4}, {2, 1, 0}},
                                   {{300, 200}, {1, 0}},
                                   {{2, 3, 4, 5, 6}, {4, 2, 0, 3, 1}}};
  for (DType dtype : {DType::kFloat32, DType::kFloat64, DType::kInt32, DType::kInt64}) {
    for (const Case& c : cases) {
      Tensor x = iota(c.shape, dtype);
      EXPECT_TRUE(all_close(ops::transpose(x, c.perm), reference_transpose(x, c.perm)))
          << dtype_name(dtype) << " " << c.shape.to_string();
    }
  }
}

TEST(Transpose, BoolAndEmpty) {
  Tensor b = ops::cast(Tensor::from_vector<double>({1, 0, 0, 1, 1, 0}, {2, 3}), DType::kBool);
  Tensor t = ops::transpose(b, {1, 0});
  EXPECT_EQ(t.dtype(), DType::kBool);
  EXPECT_TRUE(all_close(ops::cast(t, DType::kFloat64),
                        Tensor::from_vector<double>({1, 1, 0, 1, 0, 0}, {3, 2})));
  EXPECT_EQ(ops::transpose(Tensor::zeros({0, 3}), {1, 0}).shape(), (Shape{3, 0}));
  EXPECT_EQ(ops::transpose(Tensor::scalar(2), {}).item(), 2);
}

TEST(Transpose, Gradient) {
  EXPECT_TRUE(gradcheck(
      [](auto& in) {
        return ops::transpose(in[0], {1, 0});
      },
      {random_f64({3, 4})}));
  EXPECT_TRUE(gradcheck(
      [](auto& in) {
        return ops::transpose(in[0], {2, 0, 1});
      },
      {random_f64({2, 3, 4})}));
  EXPECT_TRUE(gradcheck(
      [](auto& in) {
        return ops::transpose(in[0], {0, -2, -1, 1});
      },
      {random_f64({2, 1, 3, 4})}));
}

TEST(Transpose, BadPerm) {
  Tensor x = iota({2, 3});
  EXPECT_ERROR(ops::transpose(x, {0, 1, 2}), "Transpose", "perm (0, 1, 2) has 3 entries",
               "shape (2, 3) (rank 2)");
  EXPECT_ERROR(ops::transpose(x, {0, 0}), "perm (0, 0) names dim 0 twice", "permutation");
  EXPECT_ERROR(ops::transpose(x, {0, -2}), "names dim 0 twice");
  EXPECT_ERROR(ops::transpose(x, {0, 2}), "perm (0, 2) has entry 2, out of range", "[-2, 1]");
}

// ---- Tile ----

TEST(Tile, HandChecked) {
  Tensor x = Tensor::from_vector<double>({1, 2, 3, 4}, {2, 2});
  EXPECT_TRUE(all_close(ops::tile(x, {1, 2}),
                        Tensor::from_vector<double>({1, 2, 1, 2, 3, 4, 3, 4}, {2, 4})));
  EXPECT_TRUE(all_close(ops::tile(x, {2, 1}),
                        Tensor::from_vector<double>({1, 2, 3, 4, 1, 2, 3, 4}, {4, 2})));
  // More multiples than dims: the input gains leading 1-dims (NumPy tile).
  Tensor y = ops::tile(Tensor::from_vector<double>({5, 6}), {2, 2});
  EXPECT_TRUE(all_close(y, Tensor::from_vector<double>({5, 6, 5, 6, 5, 6, 5, 6}, {2, 4})));
  // Fewer multiples than dims: the multiples gain leading 1s.
  EXPECT_EQ(ops::tile(x, {3}).shape(), (Shape{2, 6}));
  EXPECT_EQ(ops::tile(x, {0, 2}).shape(), (Shape{0, 4}));
  Tensor ints = ops::tile(Tensor::from_vector<int32_t>({7, 8}), {3});
  EXPECT_EQ(ints.to_vector<int32_t>(), (std::vector<int32_t>{7, 8, 7, 8, 7, 8}));
}

TEST(Tile, LargeMatchesBroadcastDefinition) {
  // Tile == broadcast of (1, d0, 1, d1) to (m0, d0, m1, d1), reshaped; big enough to run in
  // parallel.
  Tensor x = iota({64, 33}, DType::kFloat32);
  Tensor y = ops::tile(x, {40, 3});
  Tensor expected = ops::reshape(
      ops::broadcast_to(ops::reshape(x, {1, 64, 1, 33}), {40, 64, 3, 33}), {40 * 64, 99});
  EXPECT_TRUE(all_close(y, expected));
  Tensor z = ops::tile(iota({3, 1, 5}, DType::kInt64), {2, 7, 1});
  EXPECT_TRUE(all_close(
      ops::cast(z, DType::kFloat64),
      ops::reshape(ops::broadcast_to(ops::reshape(iota({3, 1, 5}), {1, 3, 1, 5}), {2, 3, 7, 5}),
                   {6, 7, 5})));
}

TEST(Tile, NegativeMultiple) {
  EXPECT_ERROR(ops::tile(iota({2, 2}), {2, -1}), "Tile", "multiples (2, -1)", "negative entry -1",
               "position 1", "expected multiples >= 0");
}

TEST(Tile, Gradient) {
  EXPECT_TRUE(gradcheck([](auto& in) { return ops::tile(in[0], {2, 3}); }, {random_f64({2, 3})}));
  EXPECT_TRUE(gradcheck(
      [](auto& in) {
        return ops::tile(in[0], {3, 1, 2});
      },
      {random_f64({2, 1})}));
  EXPECT_TRUE(gradcheck([](auto& in) { return ops::tile(in[0], {1, 1}); }, {random_f64({3, 2})}));
  EXPECT_TRUE(gradcheck([](auto& in) { return ops::tile(in[0], {2}); }, {random_f64({2, 1, 3})}));
}

}  // namespace
}  // namespace cleave

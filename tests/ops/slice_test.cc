// Concat, Split, Slice and StridedSlice: forward values, gradients and bad-input errors.
#include <gtest/gtest.h>

#include "cleave/ops/shape.h"
#include "testing/gradcheck.h"

namespace cleave {
namespace {

using testing::all_close;
using testing::gradcheck;
using testing::GradcheckOptions;
using testing::random_f64;

Tensor iota(const Shape& shape, DType dtype = DType::kFloat64) {
  return ops::reshape(Tensor::arange(0, static_cast<double>(shape.numel()), 1, dtype), shape);
}

Tensor vec(std::vector<double> v, const Shape& shape) { return Tensor::from_vector(v, shape); }

// ---- Concat ----

TEST(Concat, HandChecked) {
  Tensor a = vec({1, 2}, {1, 2});
  Tensor b = vec({3, 4, 5, 6}, {2, 2});
  EXPECT_TRUE(all_close(ops::concat({a, b}, 0), vec({1, 2, 3, 4, 5, 6}, {3, 2})));
  Tensor c = vec({7, 8}, {2, 1});
  EXPECT_TRUE(all_close(ops::concat({b, c, b}, -1), vec({3, 4, 7, 3, 4, 5, 6, 8, 5, 6}, {2, 5})));
  EXPECT_TRUE(all_close(ops::concat({b}, 1), b));
  Tensor ints =
      ops::concat({Tensor::from_vector<int64_t>({1}), Tensor::from_vector<int64_t>({2, 3})});
  EXPECT_EQ(ints.to_vector<int64_t>(), (std::vector<int64_t>{1, 2, 3}));
  Tensor bools = ops::concat(
      {ops::cast(vec({1, 0}, {2}), DType::kBool), ops::cast(vec({0, 1}, {2}), DType::kBool)});
  EXPECT_TRUE(all_close(ops::cast(bools, DType::kFloat64), vec({1, 0, 0, 1}, {4})));
}

TEST(Concat, MiddleAxisMatchesPieces) {
  Tensor a = iota({3, 2, 5}), b = iota({3, 4, 5});
  Tensor y = ops::concat({a, b}, 1);
  ASSERT_EQ(y.shape(), (Shape{3, 6, 5}));
  EXPECT_EQ(y.at({2, 1, 4}), a.at({2, 1, 4}));
  EXPECT_EQ(y.at({2, 2, 0}), b.at({2, 0, 0}));
  EXPECT_EQ(y.at({1, 5, 3}), b.at({1, 3, 3}));
}

TEST(Concat, BadInputs) {
  Tensor a = iota({2, 3});
  EXPECT_ERROR(ops::concat({a, iota({2, 3, 1})}, 0), "Concat", "input 1 has shape (2, 3, 1)",
               "rank 3", "same rank");
  EXPECT_ERROR(ops::concat({a, a, iota({2, 4})}, 0), "input 2 has shape (2, 4)",
               "expected dim 1 to be 3", "only the concat axis 0 may differ");
  EXPECT_ERROR(ops::concat({a, iota({2, 3}, DType::kFloat32)}, 0), "input 0 has dtype Float64",
               "input 1 has dtype Float32");
  EXPECT_ERROR(ops::concat({a, a}, 2), "axis 2 is out of range", "[-2, 1]");
  EXPECT_ERROR(ops::concat({Tensor::scalar(1), Tensor::scalar(2)}), "expected rank >= 1");
  EXPECT_ERROR(ops::concat({}), "Concat: no inputs given");
}

TEST(Concat, Gradient) {
  // Equal pieces and unequal ones (both Split), negative axis.
  EXPECT_TRUE(gradcheck(
      [](auto& in) {
        return ops::concat({in[0], in[1]}, 1);
      },
      {random_f64({2, 3}, -1, 1, 1), random_f64({2, 3}, -1, 1, 2)}));
  EXPECT_TRUE(gradcheck(
      [](auto& in) {
        return ops::concat({in[0], in[1], in[2]}, -2);
      },
      {random_f64({1, 3}, -1, 1, 1), random_f64({4, 3}, -1, 1, 2), random_f64({2, 3}, -1, 1, 3)}));
  // Only some inputs need a gradient.
  EXPECT_TRUE(gradcheck(
      [](auto& in) {
        return ops::concat({in[0], in[1]}, 0);
      },
      {random_f64({2, 2}, -1, 1, 1), random_f64({2, 2}, -1, 1, 2)},
      GradcheckOptions{.inputs_to_check = {1}}));
}

// ---- Split ----

TEST(Split, HandChecked) {
  std::vector<Tensor> parts = ops::split(iota({2, 4}), 1, 2);
  ASSERT_EQ(parts.size(), 2u);
  EXPECT_TRUE(all_close(parts[0], vec({0, 1, 4, 5}, {2, 2})));
  EXPECT_TRUE(all_close(parts[1], vec({2, 3, 6, 7}, {2, 2})));
  parts = ops::split(iota({6}, DType::kInt32), -1, 3);
  ASSERT_EQ(parts.size(), 3u);
  EXPECT_EQ(parts[2].to_vector<int32_t>(), (std::vector<int32_t>{4, 5}));
  EXPECT_EQ(ops::split(iota({3, 2}), 0, 1)[0].shape(), (Shape{3, 2}));
}

TEST(Split, SizeSplitsHandChecked) {
  std::vector<Tensor> parts = ops::split(iota({2, 6}), 1, std::vector<int64_t>{1, 0, 3, 2});
  ASSERT_EQ(parts.size(), 4u);
  EXPECT_TRUE(all_close(parts[0], vec({0, 6}, {2, 1})));
  EXPECT_EQ(parts[1].shape(), (Shape{2, 0}));
  EXPECT_TRUE(all_close(parts[2], vec({1, 2, 3, 7, 8, 9}, {2, 3})));
  EXPECT_TRUE(all_close(parts[3], vec({4, 5, 10, 11}, {2, 2})));
  parts = ops::split(iota({5}, DType::kInt32), 0, std::vector<int64_t>{5});
  EXPECT_EQ(parts[0].to_vector<int32_t>(), (std::vector<int32_t>{0, 1, 2, 3, 4}));
}

TEST(Split, BadInputs) {
  EXPECT_ERROR(ops::split(iota({5, 2}), 0, 2), "Split", "shape (5, 2) has size 5 along axis 0",
               "output_num 2 does not divide");
  EXPECT_ERROR(ops::split(iota({4}), 0, 0), "output_num is 0", "expected output_num >= 1");
  EXPECT_ERROR(ops::split(iota({4}), 1, 2), "axis 1 is out of range", "[-1, 0]");
  EXPECT_ERROR(ops::split(iota({5, 2}), 0, std::vector<int64_t>{2, 2}), "size_splits (2, 2)",
               "shape (5, 2) along axis 0", "adding up to 5");
  EXPECT_ERROR(ops::split(iota({5}), 0, std::vector<int64_t>{6, -1}), "size_splits (6, -1)",
               "sizes >= 0");
  EXPECT_ERROR(ops::split(iota({5}), 0, std::vector<int64_t>{}), "output_num is 0");
}

TEST(Split, Gradient) {
  // Every output used, with different weights.
  EXPECT_TRUE(gradcheck(
      [](auto& in) {
        std::vector<Tensor> p = ops::split(in[0], -1, 3);
        return ops::concat({p[2], ops::mul(p[0], 2.0), p[1]}, 0);
      },
      {random_f64({2, 6})}));
  // Only one output used: the others get zero gradient.
  EXPECT_TRUE(gradcheck([](auto& in) { return ops::split(in[0], 0, 3)[1]; }, {random_f64({6, 2})}));
  // Sizes of their own (size_splits), one part unused.
  EXPECT_TRUE(gradcheck(
      [](auto& in) {
        std::vector<Tensor> p = ops::split(in[0], 1, std::vector<int64_t>{1, 3, 2});
        return ops::concat({ops::mul(p[2], 3.0), p[0]}, 1);
      },
      {random_f64({2, 6})}));
}

// ---- Slice ----

TEST(Slice, HandChecked) {
  Tensor x = iota({3, 4});
  EXPECT_TRUE(all_close(ops::slice(x, {1, 1}, {2, 2}), vec({5, 6, 9, 10}, {2, 2})));
  EXPECT_TRUE(all_close(ops::slice(x, {0, 2}, {-1, -1}), vec({2, 3, 6, 7, 10, 11}, {3, 2})));
  EXPECT_EQ(ops::slice(x, {3, 0}, {0, 4}).shape(), (Shape{0, 4}));
  Tensor ints = ops::slice(iota({5}, DType::kInt64), {1}, {3});
  EXPECT_EQ(ints.to_vector<int64_t>(), (std::vector<int64_t>{1, 2, 3}));
  // A box in the middle of a 4-D tensor.
  Tensor y = ops::slice(iota({2, 3, 4, 5}), {1, 0, 2, 1}, {1, 3, 2, 3});
  ASSERT_EQ(y.shape(), (Shape{1, 3, 2, 3}));
  EXPECT_EQ(y.at({0, 2, 1, 2}), 60 + 40 + 15 + 3);
}

TEST(Slice, OutOfBounds) {
  Tensor x = iota({2, 3});
  EXPECT_ERROR(ops::slice(x, {0, 4}, {1, 1}), "Slice", "begin[1] = 4 is out of bounds",
               "shape (2, 3)", "[0, 3]");
  EXPECT_ERROR(ops::slice(x, {0, -1}, {1, 1}), "begin[1] = -1 is out of bounds");
  EXPECT_ERROR(ops::slice(x, {0, 1}, {1, 3}), "size[1] = 3 with begin[1] = 1 is out of bounds",
               "[0, 2] or -1");
  EXPECT_ERROR(ops::slice(x, {0}, {1}), "begin (0) and size (1)", "rank 2");
}

TEST(Slice, Gradient) {
  EXPECT_TRUE(gradcheck(
      [](auto& in) {
        return ops::slice(in[0], {1, 0}, {2, -1});
      },
      {random_f64({3, 4})}));
  EXPECT_TRUE(gradcheck(
      [](auto& in) {
        return ops::slice(in[0], {0, 1, 1}, {2, 1, 2});
      },
      {random_f64({2, 3, 4})}));
}

// ---- StridedSlice ----

Tensor ss(const Tensor& x, std::vector<int64_t> begin, std::vector<int64_t> end,
          std::vector<int64_t> strides, int64_t begin_mask = 0, int64_t end_mask = 0,
          int64_t shrink = 0) {
  return ops::strided_slice(x, {.begin = std::move(begin),
                                .end = std::move(end),
                                .strides = std::move(strides),
                                .begin_mask = begin_mask,
                                .end_mask = end_mask,
                                .shrink_axis_mask = shrink});
}

std::vector<double> values(const Tensor& t) { return t.to_double_vector(); }

TEST(StridedSlice, PythonSlicingSemantics) {
  Tensor x = iota({10});
  using V = std::vector<double>;
  EXPECT_EQ(values(ss(x, {1}, {8}, {2})), (V{1, 3, 5, 7}));                           // x[1:8:2]
  EXPECT_EQ(values(ss(x, {0}, {0}, {-1}, 1, 1)), (V{9, 8, 7, 6, 5, 4, 3, 2, 1, 0}));  // x[::-1]
  EXPECT_EQ(values(ss(x, {8}, {2}, {-2})), (V{8, 6, 4}));                             // x[8:2:-2]
  EXPECT_EQ(values(ss(x, {-3}, {0}, {1}, 0, 1)), (V{7, 8, 9}));                       // x[-3:]
  EXPECT_EQ(values(ss(x, {-100}, {100}, {3})), (V{0, 3, 6, 9}));                      // clamped
  EXPECT_EQ(values(ss(x, {100}, {-100}, {-4})), (V{9, 5, 1}));      // clamped, reversed
  EXPECT_EQ(values(ss(x, {5}, {2}, {1})), V{});                     // empty
  EXPECT_EQ(values(ss(x, {-1}, {-4}, {-1})), (V{9, 8, 7}));         // x[-1:-4:-1]
  EXPECT_EQ(values(ss(x, {3}, {0}, {-1}, 0, 1)), (V{3, 2, 1, 0}));  // x[3::-1]
}

TEST(StridedSlice, ShrinkAndTrailingDims) {
  Tensor x = iota({3, 4});
  // x[1, ::-2] -> (1, 3), (1, 1)
  Tensor y = ss(x, {1, 0}, {0, 0}, {1, -2}, 0b10, 0b10, 0b01);
  EXPECT_EQ(y.shape(), (Shape{2}));
  EXPECT_EQ(values(y), (std::vector<double>{7, 5}));
  // x[-1] -> the last row; trailing dims are taken whole.
  Tensor last = ss(x, {-1}, {0}, {1}, 0, 0, 1);
  EXPECT_EQ(values(last), (std::vector<double>{8, 9, 10, 11}));
  // x[::2] over a 3-D int tensor.
  Tensor z = ss(iota({4, 2, 3}, DType::kInt32), {0}, {4}, {2});
  EXPECT_EQ(z.shape(), (Shape{2, 2, 3}));
  EXPECT_EQ(z.at({1, 1, 2}), 17);
  // x[:, 1] on a column: shrinks dim 1.
  EXPECT_EQ(values(ss(x, {0, 1}, {3, 2}, {1, 1}, 0, 0, 0b10)), (std::vector<double>{1, 5, 9}));
}

TEST(StridedSlice, BadInputs) {
  Tensor x = iota({3, 4});
  EXPECT_ERROR(ss(x, {0}, {3}, {0}), "StridedSlice", "strides (0) has 0 at position 0", "non-zero");
  EXPECT_ERROR(ss(x, {3}, {0}, {1}, 0, 0, 1), "shrink_axis_mask", "begin[0] = 3", "out of bounds",
               "shape (3, 4)", "[-3, 2]");
  EXPECT_ERROR(ss(x, {-4}, {0}, {1}, 0, 0, 1), "begin[0] = -4");
  EXPECT_ERROR(ss(x, {0, 0, 0}, {1, 1, 1}, {1, 1, 1}), "3 entries", "rank 2", "at most 2");
  EXPECT_ERROR(ss(x, {0, 0}, {1}, {1, 1}), "have 2, 1 and 2 entries");
}

TEST(StridedSlice, Gradient) {
  EXPECT_TRUE(gradcheck([](auto& in) { return ss(in[0], {1}, {8}, {3}); }, {random_f64({9})}));
  EXPECT_TRUE(gradcheck(
      [](auto& in) {
        return ss(in[0], {0, -1}, {0, 0}, {-1, -2}, 1, 0b11);
      },
      {random_f64({3, 5})}));
  EXPECT_TRUE(gradcheck(
      [](auto& in) {
        return ss(in[0], {1, 3}, {0, -5}, {1, -1}, 0, 0, 1);
      },
      {random_f64({3, 4, 2})}));
  EXPECT_TRUE(gradcheck(
      [](auto& in) {
        return ss(in[0], {-100, 1}, {100, 3}, {2, 1});
      },
      {random_f64({5, 4, 1})}));
}

TEST(StridedSlice, LargeBoxMatchesSlice) {
  // A unit-stride strided slice is a Slice; big enough to run in parallel.
  Tensor x = iota({300, 400}, DType::kFloat32);
  EXPECT_TRUE(all_close(ss(x, {10, 3}, {290, 399}, {1, 1}), ops::slice(x, {10, 3}, {280, 396})));
  Tensor every_other = ss(x, {0, 1}, {300, 400}, {1, 2});
  EXPECT_EQ(every_other.shape(), (Shape{300, 200}));
  EXPECT_EQ(every_other.at({299, 199}), 299 * 400 + 399);
}

// ---- backward-only primitives ----

TEST(SliceGrad, ScattersIntoZeros) {
  Tensor dx =
      ir::call1(ir::Registry::global().get("SliceGrad"), {vec({1, 2, 3, 4}, {2, 2})},
                {{"begin", std::vector<int64_t>{1, 0}}, {"shape", std::vector<int64_t>{3, 3}}});
  EXPECT_TRUE(all_close(dx, vec({0, 0, 0, 1, 2, 0, 3, 4, 0}, {3, 3})));
  EXPECT_ERROR(
      ir::call1(ir::Registry::global().get("SliceGrad"), {vec({1, 2, 3, 4}, {2, 2})},
                {{"begin", std::vector<int64_t>{2, 0}}, {"shape", std::vector<int64_t>{3, 3}}}),
      "SliceGrad", "does not fit in shape (3, 3)");
}

TEST(StridedSliceGrad, ScattersIntoZeros) {
  const ir::OpDef& op = ir::Registry::global().get("StridedSliceGrad");
  const ir::Attrs attrs{{"begin", std::vector<int64_t>{4}},
                        {"end", std::vector<int64_t>{0}},
                        {"strides", std::vector<int64_t>{-2}},
                        {"shape", std::vector<int64_t>{6}}};
  // x[4:0:-2] reads elements 4 and 2.
  EXPECT_TRUE(all_close(ir::call1(op, {vec({1, 2}, {2})}, attrs), vec({0, 0, 2, 0, 1, 0}, {6})));
  EXPECT_ERROR(ir::call1(op, {vec({1, 2, 3}, {3})}, attrs), "StridedSliceGrad",
               "input 0 has shape (3)", "expected (2)");
}

}  // namespace
}  // namespace cleave

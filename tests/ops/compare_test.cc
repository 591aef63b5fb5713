// Comparisons, logic and Select: forward values, Select's gradient, errors.
#include <gtest/gtest.h>

#include <array>
#include <cmath>

#include "cleave/ops/elementwise.h"
#include "cleave/ops/reduce.h"
#include "testing/gradcheck.h"

namespace cleave {
namespace {

using testing::all_close;
using testing::random_f64;

Tensor f64(const std::vector<double>& v, const Shape& shape) {
  return Tensor::from_vector<double>(v, shape);
}
Tensor f64(const std::vector<double>& v) { return Tensor::from_vector<double>(v); }
Tensor bools(const std::vector<bool>& v, const Shape& shape) {
  Tensor t = Tensor::empty(shape, DType::kBool);
  for (size_t i = 0; i < v.size(); ++i) t.data<bool>()[i] = v[i];
  return t;
}
Tensor bools(const std::vector<bool>& v) { return bools(v, Shape{static_cast<int64_t>(v.size())}); }
std::vector<bool> values(const Tensor& t) {
  EXPECT_EQ(t.dtype(), DType::kBool);
  return std::vector<bool>(t.data<bool>(), t.data<bool>() + t.numel());
}

TEST(Compare, HandComputedValues) {
  const Tensor a = f64({1, 2, 3});
  const Tensor b = f64({2, 2, 2});
  using V = std::vector<bool>;
  EXPECT_EQ(values(ops::equal(a, b)), (V{false, true, false}));
  EXPECT_EQ(values(ops::not_equal(a, b)), (V{true, false, true}));
  EXPECT_EQ(values(ops::greater(a, b)), (V{false, false, true}));
  EXPECT_EQ(values(ops::greater_equal(a, b)), (V{false, true, true}));
  EXPECT_EQ(values(ops::less(a, b)), (V{true, false, false}));
  EXPECT_EQ(values(ops::less_equal(a, b)), (V{true, true, false}));
}

TEST(Compare, BroadcastsAndTakesEveryDtype) {
  // (2, 1) against (3) -> (2, 3).
  const Tensor a = Tensor::from_vector<int32_t>({1, 3}, {2, 1});
  const Tensor b = Tensor::from_vector<int32_t>({0, 1, 2});
  const Tensor gt = ops::greater(a, b);
  EXPECT_EQ(gt.shape(), Shape({2, 3}));
  EXPECT_EQ(values(gt), (std::vector<bool>{true, false, false, true, true, true}));
  const Tensor c = Tensor::from_vector<int64_t>({5, -5});
  EXPECT_EQ(values(ops::less_equal(c, Tensor::from_vector<int64_t>({5}))),
            (std::vector<bool>{true, true}));
  const Tensor x = Tensor::from_vector<float>({1.5f, NAN});
  EXPECT_EQ(values(ops::equal(x, x)), (std::vector<bool>{true, false}));  // NaN != NaN
  EXPECT_EQ(values(ops::not_equal(x, x)), (std::vector<bool>{false, true}));
  EXPECT_EQ(values(ops::equal(bools({true, false}), bools({true, true}))),
            (std::vector<bool>{true, false}));
}

TEST(Compare, OutputsAreNotRecorded) {
  const Tensor x = f64({1, 2}).set_requires_grad(true);
  EXPECT_FALSE(ops::greater(x, f64({1.5})).requires_grad());
}

TEST(Logic, TruthTablesWithBroadcasting) {
  const Tensor a = bools({false, false, true, true});
  const Tensor b = bools({false, true, false, true});
  EXPECT_EQ(values(ops::logical_and(a, b)), (std::vector<bool>{false, false, false, true}));
  EXPECT_EQ(values(ops::logical_or(a, b)), (std::vector<bool>{false, true, true, true}));
  EXPECT_EQ(values(ops::logical_not(a)), (std::vector<bool>{true, true, false, false}));
  const Tensor col = bools({true, false}, {2, 1});
  const Tensor both = ops::logical_and(col, bools({true, false, true}));
  EXPECT_EQ(both.shape(), Shape({2, 3}));
  EXPECT_EQ(values(both), (std::vector<bool>{true, false, true, false, false, false}));
}

TEST(Select, BroadcastsAllThree) {
  // condition (2, 1), a (3), b scalar -> (2, 3).
  const Tensor c = bools({true, false}, {2, 1});
  const Tensor out = ops::select(c, f64({1, 2, 3}), f64({-1}, {}));
  EXPECT_TRUE(all_close(out, f64({1, 2, 3, -1, -1, -1}, {2, 3})));
  // condition (3), a (2, 1), b (2, 3).
  const Tensor out2 = ops::select(bools({true, false, true}), f64({10, 20}, {2, 1}),
                                  f64({1, 2, 3, 4, 5, 6}, {2, 3}));
  EXPECT_TRUE(all_close(out2, f64({10, 2, 10, 20, 5, 20}, {2, 3})));
  const Tensor i = ops::select(bools({false, true}), Tensor::from_vector<int32_t>({1, 2}),
                               Tensor::from_vector<int32_t>({3, 4}));
  EXPECT_EQ(i.to_vector<int32_t>(), (std::vector<int32_t>{3, 2}));
}

TEST(Select, LargeSameShapeAndBroadcastPaths) {
  // Above the parallel grain: the flat path and the row path.
  const Tensor a = random_f64({300, 200}, -1, 1, 1);
  const Tensor b = random_f64({300, 200}, -1, 1, 2);
  const Tensor c = ops::greater(a, b);
  EXPECT_TRUE(all_close(ops::select(c, a, b), ops::maximum(a, b), 0, 0));
  const Tensor row = random_f64({200}, -1, 1, 3);
  EXPECT_TRUE(all_close(ops::select(ops::greater(a, row), a, row), ops::maximum(a, row), 0, 0));
}

TEST(Select, Gradcheck) {
  const std::vector<std::array<Shape, 3>> shapes = {
      {Shape{2, 3}, Shape{2, 3}, Shape{2, 3}},
      {Shape{2, 1}, Shape{3}, Shape{}},
      {Shape{3}, Shape{2, 1}, Shape{2, 3}},
      {Shape{2, 1, 3}, Shape{4, 1}, Shape{1}},
  };
  for (const auto& s : shapes) {
    const Tensor cond =
        ops::greater(random_f64(s[0], -1, 1, 4), Tensor::scalar(0, DType::kFloat64));
    const auto fn = [&](const std::vector<Tensor>& in) { return ops::select(cond, in[0], in[1]); };
    EXPECT_TRUE(testing::gradcheck(fn, {random_f64(s[1], -1, 1, 5), random_f64(s[2], -1, 1, 6)}))
        << s[0].to_string() << " " << s[1].to_string() << " " << s[2].to_string();
  }
}

TEST(Compare, Errors) {
  const Tensor f = Tensor::ones({2});
  const Tensor d = Tensor::ones({2}, DType::kFloat64);
  const Tensor b = Tensor::ones({2}, DType::kBool);
  EXPECT_ERROR(ops::equal(f, d),
               "Equal: input 0 has dtype Float32 but input 1 has dtype Float64; they must match");
  EXPECT_ERROR(ops::greater(b, b), "Greater: input 0 has dtype Bool; expected one of");
  EXPECT_ERROR(ops::less(f, Tensor::ones({3})), "Less: shapes (2) and (3) cannot be broadcast");
  EXPECT_ERROR(ops::logical_and(b, f), "LogicalAnd: input 1 has dtype Float32; expected Bool");
  EXPECT_ERROR(ops::logical_or(f, b), "LogicalOr: input 0 has dtype Float32; expected Bool");
  EXPECT_ERROR(ops::logical_not(Tensor::ones({2}, DType::kInt32)),
               "LogicalNot: input 0 has dtype Int32; expected Bool");
  EXPECT_ERROR(ops::select(f, f, f), "Select: input 0 has dtype Float32; expected Bool");
  EXPECT_ERROR(ops::select(b, d, f),
               "Select: input 1 has dtype Float64 but input 2 has dtype Float32");
  EXPECT_ERROR(ops::select(Tensor::ones({4}, DType::kBool), Tensor::ones({2, 1}), f),
               "Select: shapes (4) (condition), (2, 1) (input 1) and (2) (input 2) cannot be "
               "broadcast together");
  EXPECT_ERROR(ops::select(b, Tensor::ones({3}), f), "Select", "cannot be broadcast together");
}

}  // namespace
}  // namespace cleave

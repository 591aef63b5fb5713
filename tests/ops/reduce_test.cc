// Reductions, ArgMax/ArgMin and sum_to: forward values against hand-computed values and a
// naive reference over every kernel path, gradients, errors.
#include "cleave/ops/reduce.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "cleave/ops/elementwise.h"
#include "cleave/ops/shape.h"
#include "testing/gradcheck.h"

namespace cleave {
namespace {

using ops::ReduceOptions;
using testing::all_close;
using testing::gradcheck;
using testing::random_f64;

using ReduceFn = Tensor (*)(const Tensor&, const ReduceOptions&);

Tensor f64(const std::vector<double>& v, const Shape& shape) {
  return Tensor::from_vector<double>(v, shape);
}
Tensor f64(const std::vector<double>& v) { return Tensor::from_vector<double>(v); }

// 0, 1, ..., 23 as (2, 3, 4).
Tensor iota234() { return Tensor::arange(0, 24, 1, DType::kFloat64).view({2, 3, 4}); }

enum class Kind { kSum, kMean, kMax, kMin, kProd };

// The naive reduction: every element visits its output slot, accumulated in double.
Tensor reference(Kind kind, const Tensor& x, std::vector<int64_t> axes, bool keep) {
  const int64_t rank = x.rank();
  if (axes.empty()) {
    for (int64_t d = 0; d < rank; ++d) axes.push_back(d);
  }
  std::vector<bool> reduced(static_cast<size_t>(rank), false);
  for (int64_t a : axes) reduced[static_cast<size_t>(a < 0 ? a + rank : a)] = true;
  std::vector<int64_t> out_dims, kept_dims;
  for (int64_t d = 0; d < rank; ++d) {
    kept_dims.push_back(reduced[d] ? 1 : x.shape()[d]);
    if (!reduced[d]) out_dims.push_back(x.shape()[d]);
  }
  const Shape kept(kept_dims);
  const double init = kind == Kind::kMax    ? -INFINITY
                      : kind == Kind::kMin  ? INFINITY
                      : kind == Kind::kProd ? 1.0
                                            : 0.0;
  std::vector<double> acc(static_cast<size_t>(kept.numel()), init);
  const std::vector<double> v = x.to_double_vector();
  const std::vector<int64_t> in_strides = x.shape().strides();
  const std::vector<int64_t> out_strides = kept.strides();
  for (int64_t i = 0; i < x.numel(); ++i) {
    int64_t o = 0;
    for (int64_t d = 0; d < rank; ++d) {
      const int64_t idx = (i / in_strides[d]) % x.shape()[d];
      if (!reduced[d]) o += idx * out_strides[d];
    }
    double& a = acc[static_cast<size_t>(o)];
    switch (kind) {
      case Kind::kSum:
      case Kind::kMean:
        a += v[i];
        break;
      case Kind::kProd:
        a *= v[i];
        break;
      case Kind::kMax:
        a = std::max(a, v[i]);
        break;
      case Kind::kMin:
        a = std::min(a, v[i]);
        break;
    }
  }
  if (kind == Kind::kMean) {
    const double count = static_cast<double>(x.numel()) / static_cast<double>(kept.numel());
    for (double& a : acc) a /= count;
  }
  return Tensor::from_vector<double>(acc, keep ? kept : Shape(out_dims));
}

struct ReduceCase {
  const char* name;
  Kind kind;
  ReduceFn fn;
};

std::vector<ReduceCase> reduce_cases() {
  return {{"ReduceSum", Kind::kSum, ops::reduce_sum},
          {"ReduceMean", Kind::kMean, ops::reduce_mean},
          {"ReduceMax", Kind::kMax, ops::reduce_max},
          {"ReduceMin", Kind::kMin, ops::reduce_min},
          {"ReduceProd", Kind::kProd, ops::reduce_prod}};
}

// Every subset of the axes of x.
std::vector<std::vector<int64_t>> axis_subsets(int64_t rank) {
  std::vector<std::vector<int64_t>> out;
  for (int64_t mask = 0; mask < (int64_t{1} << rank); ++mask) {
    std::vector<int64_t> axes;
    for (int64_t d = 0; d < rank; ++d) {
      if (mask & (int64_t{1} << d)) axes.push_back(d);
    }
    out.push_back(axes);
  }
  return out;
}

TEST(Reduce, HandComputedValues) {
  const Tensor x = iota234();
  EXPECT_TRUE(all_close(ops::reduce_sum(x), f64({276}, {})));
  EXPECT_TRUE(
      all_close(ops::reduce_sum(x, {.axes = {1}}), f64({12, 15, 18, 21, 48, 51, 54, 57}, {2, 4})));
  EXPECT_TRUE(all_close(ops::reduce_mean(x, {.axes = {-1}}),
                        f64({1.5, 5.5, 9.5, 13.5, 17.5, 21.5}, {2, 3})));
  EXPECT_TRUE(all_close(ops::reduce_max(x, {.axes = {0, 2}, .keep_dims = true}),
                        f64({15, 19, 23}, {1, 3, 1})));
  EXPECT_TRUE(all_close(ops::reduce_min(x, {.axes = {0}}),
                        f64({0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11}, {3, 4})));
  EXPECT_TRUE(
      all_close(ops::reduce_prod(f64({1, 2, 3, 4, 5, 6}, {2, 3}), {.axes = {1}}), f64({6, 120})));
  EXPECT_TRUE(all_close(ops::reduce_mean(x, {.keep_dims = true}), f64({11.5}, {1, 1, 1})));
}

TEST(Reduce, IntegerDtypes) {
  const Tensor i = Tensor::from_vector<int32_t>({3, -1, 4, 1, -5, 9}, {2, 3});
  EXPECT_EQ(ops::reduce_sum(i, {.axes = {1}}).to_vector<int32_t>(), (std::vector<int32_t>{6, 5}));
  EXPECT_EQ(ops::reduce_max(i, {.axes = {0}}).to_vector<int32_t>(),
            (std::vector<int32_t>{3, -1, 9}));
  EXPECT_EQ(ops::reduce_min(i).to_vector<int32_t>(), (std::vector<int32_t>{-5}));
  EXPECT_EQ(ops::reduce_prod(i, {.axes = {-1}}).to_vector<int32_t>(),
            (std::vector<int32_t>{-12, -45}));
  const Tensor l = Tensor::from_vector<int64_t>({int64_t{1} << 40, 3});
  EXPECT_EQ(ops::reduce_sum(l).to_vector<int64_t>()[0], (int64_t{1} << 40) + 3);
  EXPECT_EQ(ops::reduce_sum(l).dtype(), DType::kInt64);
}

TEST(Reduce, EveryAxisSubsetMatchesReference) {
  // Sizes 1 in the middle exercise the group merging (NOTE [Reduction as outer x reduced x
  // inner]); all 32 subsets cover reduce-all, last axis, leading axis and the multi-pass cases.
  const Tensor x = random_f64({3, 1, 5, 4, 2}, 0.5, 1.5, 7);
  for (const ReduceCase& c : reduce_cases()) {
    for (const std::vector<int64_t>& axes : axis_subsets(x.rank())) {
      for (bool keep : {false, true}) {
        const Tensor got = c.fn(x, {.axes = axes, .keep_dims = keep});
        EXPECT_TRUE(all_close(got, reference(c.kind, x, axes, keep), 1e-12, 1e-12))
            << c.name << " axes " << Shape(axes).to_string() << " keep " << keep;
      }
    }
  }
}

TEST(Reduce, LargeShapesTakeEveryParallelPath) {
  // reduce all; last axis with few long rows / many rows; leading axis with wide rows (blocked)
  // and with few columns (split into partials); a middle axis; two separated groups.
  const std::vector<std::pair<Shape, std::vector<int64_t>>> cases = {
      {{70001}, {}},          {{3, 40000}, {1}},      {{4000, 17}, {1}},
      {{300, 1000}, {0}},     {{40000, 3}, {0}},      {{3, 20000, 2}, {1}},
      {{64, 40, 33}, {0, 2}}, {{7, 9000, 3}, {0, 2}}, {{2, 3, 1, 9000}, {0, 1, 3}},
  };
  for (const auto& [shape, axes] : cases) {
    const Tensor x = random_f64(shape, 0.9, 1.1, 8);
    const Tensor x32 = ops::cast(x, DType::kFloat32);
    for (const ReduceCase& c : reduce_cases()) {
      if (c.kind == Kind::kProd) continue;  // overflows at these sizes
      const Tensor expected = reference(c.kind, x, axes, false);
      EXPECT_TRUE(all_close(c.fn(x, {.axes = axes}), expected, 1e-9, 1e-11))
          << c.name << " " << shape.to_string();
      EXPECT_TRUE(all_close(c.fn(x32, {.axes = axes}), expected, 1e-5, 1e-5))
          << c.name << " Float32 " << shape.to_string();
    }
    const Tensor i = ops::cast(ops::mul(x, 100.0), DType::kInt64);
    const Tensor expected = reference(Kind::kSum, i, axes, false);
    EXPECT_TRUE(all_close(ops::reduce_sum(i, {.axes = axes}), expected, 0, 0))
        << "Int64 " << shape.to_string();
  }
}

TEST(Reduce, EmptyInputs) {
  const Tensor e = Tensor::zeros({2, 0, 3}, DType::kFloat64);
  EXPECT_TRUE(all_close(ops::reduce_sum(e, {.axes = {1}}), Tensor::zeros({2, 3}, DType::kFloat64)));
  EXPECT_TRUE(all_close(ops::reduce_prod(e, {.axes = {1}}), Tensor::ones({2, 3}, DType::kFloat64)));
  EXPECT_TRUE(std::isnan(ops::reduce_mean(e).item()));
  EXPECT_EQ(ops::reduce_max(e, {.axes = {0}}).shape(), Shape({0, 3}));
  // Reducing a rank-0 tensor over "all" (no) axes is the identity.
  EXPECT_TRUE(all_close(ops::reduce_sum(f64({2.5}, {})), f64({2.5}, {})));
}

TEST(Reduce, MaxMinPropagateNaN) {
  const Tensor x = Tensor::from_vector<float>({1, NAN, 3, 2}, {2, 2});
  EXPECT_TRUE(std::isnan(ops::reduce_max(x).item()));
  EXPECT_TRUE(std::isnan(ops::reduce_min(x).item()));
  const Tensor rows = ops::reduce_max(x, {.axes = {1}});
  EXPECT_TRUE(std::isnan(rows.at({0})));
  EXPECT_EQ(rows.at({1}), 3.0);
}

TEST(Reduce, Gradcheck) {
  const std::vector<ReduceOptions> options = {
      {},
      {.keep_dims = true},
      {.axes = {1}},
      {.axes = {-1}, .keep_dims = true},
      {.axes = {0, 2}},
      {.axes = {2, 0}, .keep_dims = true},
      {.axes = {-3}},
  };
  for (const ReduceCase& c : reduce_cases()) {
    for (const ReduceOptions& o : options) {
      // Distinct values (no ties for max/min), away from 0 (prod).
      const Tensor x = random_f64({2, 3, 4}, 0.5, 1.5, 9);
      EXPECT_TRUE(gradcheck([&](const std::vector<Tensor>& in) { return c.fn(in[0], o); }, {x}))
          << c.name << " axes " << Shape(o.axes).to_string() << " keep " << o.keep_dims;
    }
    EXPECT_TRUE(gradcheck([&](const std::vector<Tensor>& in) { return c.fn(in[0], {}); },
                          {random_f64({5}, 0.5, 1.5, 10)}))
        << c.name;
  }
}

TEST(Reduce, MaxMinGradientSplitsAmongTies) {
  // NOTE [Gradient of ReduceMax and ReduceMin].
  const Tensor x = f64({1, 3, 3, 2, 2, 0}, {2, 3}).set_requires_grad(true);
  EXPECT_TRUE(all_close(autodiff::grad(ops::reduce_sum(ops::reduce_max(x, {.axes = {1}})), {x})[0],
                        f64({0, 0.5, 0.5, 0.5, 0.5, 0}, {2, 3})));
  EXPECT_TRUE(
      all_close(autodiff::grad(ops::reduce_min(x), {x})[0], f64({0, 0, 0, 0, 0, 1}, {2, 3})));
}

TEST(Reduce, ProdGradientWithZeros) {
  // NOTE [Gradient of ReduceProd]: rows with no zero, one zero, two zeros.
  const Tensor x = f64({2, 4, 3, 2, 0, 3, 0, 5, 0}, {3, 3}).set_requires_grad(true);
  const Tensor g = autodiff::grad(ops::reduce_sum(ops::reduce_prod(x, {.axes = {1}})), {x})[0];
  EXPECT_TRUE(all_close(g, f64({12, 6, 8, 0, 6, 0, 0, 0, 0}, {3, 3})));
  // Gradcheck at a point holding one zero per group.
  const Tensor z = f64({0, 0.5, 1.5, 0.7, 0, 1.2}, {2, 3});
  EXPECT_TRUE(gradcheck(
      [](const std::vector<Tensor>& in) { return ops::reduce_prod(in[0], {.axes = {0}}); }, {z}));
}

TEST(Reduce, Errors) {
  const Tensor x = Tensor::ones({2, 3, 4});
  EXPECT_ERROR(ops::reduce_sum(x, {.axes = {3}}),
               "ReduceSum: axis 3 is out of range for input 0 of shape (2, 3, 4) (rank 3); "
               "expected axes in [-3, 2]");
  EXPECT_ERROR(ops::reduce_max(x, {.axes = {-4}}), "ReduceMax: axis -4 is out of range");
  EXPECT_ERROR(ops::reduce_mean(x, {.axes = {1, -2}}),
               "ReduceMean: axis 1 is given twice in axis (1, -2)");
  EXPECT_ERROR(ops::reduce_mean(Tensor::ones({2}, DType::kInt32)),
               "ReduceMean: input 0 has dtype Int32; expected Float32 or Float64");
  EXPECT_ERROR(ops::reduce_sum(Tensor::ones({2}, DType::kBool)),
               "ReduceSum: input 0 has dtype Bool; expected one of");
  EXPECT_ERROR(ops::reduce_max(Tensor::ones({2, 0})),
               "ReduceMax: axis 1 of input 0 (shape (2, 0)) is empty; the maximum of no "
               "elements is undefined");
  EXPECT_ERROR(ops::reduce_min(Tensor::ones({0, 2}), {.axes = {0}}),
               "ReduceMin: axis 0 of input 0 (shape (0, 2)) is empty; the minimum");
}

// ---- ArgMax / ArgMin ----

TEST(ArgReduce, HandComputedValues) {
  const Tensor x = f64({3, 7, 7, 1, 9, 0}, {2, 3});
  const Tensor am = ops::argmax(x);
  EXPECT_EQ(am.dtype(), DType::kInt32);
  EXPECT_EQ(am.shape(), Shape({2}));
  EXPECT_EQ(am.to_vector<int32_t>(), (std::vector<int32_t>{1, 1}));  // first of the tied 7s
  EXPECT_EQ(ops::argmin(x, 1).to_vector<int32_t>(), (std::vector<int32_t>{0, 2}));
  EXPECT_EQ(ops::argmax(x, 0).to_vector<int32_t>(), (std::vector<int32_t>{0, 1, 0}));
  EXPECT_EQ(ops::argmin(x, -2).to_vector<int32_t>(), (std::vector<int32_t>{1, 0, 1}));
  // A middle axis of an integer tensor.
  const Tensor i = Tensor::from_vector<int64_t>({1, 5, 4, 2, 4, 9, 0, 0}, {2, 2, 2});
  EXPECT_EQ(ops::argmax(i, 1).to_vector<int32_t>(), (std::vector<int32_t>{1, 0, 0, 0}));
  EXPECT_EQ(ops::argmin(i, 1).to_vector<int32_t>(), (std::vector<int32_t>{0, 1, 1, 1}));
}

TEST(ArgReduce, LargeMatchesReduceMaxMin) {
  for (const auto& [shape, axis] : std::vector<std::pair<Shape, int64_t>>{
           {{500, 101}, 1}, {{101, 500}, 0}, {{20, 50, 40}, 1}}) {
    const Tensor x = random_f64(shape, -1, 1, 13);
    for (bool is_max : {true, false}) {
      const Tensor idx = is_max ? ops::argmax(x, axis) : ops::argmin(x, axis);
      const Tensor ext =
          is_max ? ops::reduce_max(x, {.axes = {axis}}) : ops::reduce_min(x, {.axes = {axis}});
      // The value at each index is the extremum.
      const std::vector<int32_t> iv = idx.to_vector<int32_t>();
      const std::vector<double> xv = x.to_double_vector();
      const std::vector<double> ev = ext.to_double_vector();
      const int64_t r = shape[axis];
      int64_t inner = 1;
      for (int64_t d = axis + 1; d < shape.rank(); ++d) inner *= shape[d];
      for (size_t j = 0; j < iv.size(); ++j) {
        const int64_t o = static_cast<int64_t>(j) / inner, in = static_cast<int64_t>(j) % inner;
        ASSERT_EQ(xv[static_cast<size_t>((o * r + iv[j]) * inner + in)], ev[j]);
      }
    }
  }
}

TEST(ArgReduce, NaNWins) {
  const Tensor x = Tensor::from_vector<float>({1, NAN, 5});
  EXPECT_EQ(ops::argmax(x).to_vector<int32_t>()[0], 1);
  EXPECT_EQ(ops::argmin(x).to_vector<int32_t>()[0], 1);
}

TEST(ArgReduce, Errors) {
  EXPECT_ERROR(ops::argmax(Tensor::ones({2, 0})),
               "ArgMax: axis 1 of input 0 (shape (2, 0)) is empty; there is no element");
  EXPECT_ERROR(ops::argmin(Tensor::ones({2, 3}), 2),
               "ArgMin: axis 2 is out of range for input 0 of shape (2, 3) (rank 2); expected an "
               "axis in [-2, 1]");
  EXPECT_ERROR(ops::argmax(Tensor::ones({2}, DType::kBool)), "ArgMax: input 0 has dtype Bool");
}

// ---- sum_to ----

TEST(SumTo, SumsBroadcastDims) {
  const Tensor x = iota234();
  EXPECT_TRUE(all_close(ops::sum_to(x, {3, 1}), f64({60, 92, 124}, {3, 1})));
  EXPECT_TRUE(all_close(ops::sum_to(x, {4}), f64({60, 66, 72, 78})));
  EXPECT_TRUE(all_close(ops::sum_to(x, {}), f64({276}, {})));
  EXPECT_TRUE(all_close(ops::sum_to(x, {2, 1, 1}), f64({66, 210}, {2, 1, 1})));
  EXPECT_TRUE(ops::sum_to(x, x.shape()).shares_storage_with(x));
  EXPECT_TRUE(gradcheck(
      [](const std::vector<Tensor>& in) {
        return ops::sum_to(in[0], {3, 1});
      },
      {iota234()}));
}

TEST(SumTo, Errors) {
  const Tensor x = Tensor::ones({2, 3});
  EXPECT_ERROR(ops::sum_to(x, {1, 2, 3}), "sum_to: cannot sum shape (2, 3) to the larger rank");
  EXPECT_ERROR(ops::sum_to(x, {4}),
               "sum_to: cannot sum shape (2, 3) to (4): target dim 0 is 4 but the source has 3");
}

}  // namespace
}  // namespace cleave

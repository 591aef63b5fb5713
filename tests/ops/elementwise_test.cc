// Unary math, binary arithmetic, Cast and fills: forward values, gradients, errors.
#include "cleave/ops/elementwise.h"

#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <limits>

#include "cleave/ops/reduce.h"
#include "testing/gradcheck.h"

namespace cleave {
namespace {

using testing::all_close;
using testing::gradcheck;
using testing::random_f64;

using UnaryFn = Tensor (*)(const Tensor&);
using BinaryFn = Tensor (*)(const Tensor&, const Tensor&);

Tensor f64(const std::vector<double>& v, const Shape& shape) {
  return Tensor::from_vector<double>(v, shape);
}
Tensor f64(const std::vector<double>& v) { return Tensor::from_vector<double>(v); }
Tensor f32(const std::vector<float>& v) { return Tensor::from_vector<float>(v); }
std::vector<bool> bool_values(const Tensor& t) {
  return std::vector<bool>(t.data<bool>(), t.data<bool>() + t.numel());
}

// Uniform in [-1, 1] pushed away from 0 by `gap`: clear of the kinks of ReLU and Abs.
Tensor away_from_zero(const Shape& shape, uint64_t seed, double gap = 0.1) {
  Tensor t = random_f64(shape, -1.0, 1.0, seed);
  double* p = t.data<double>();
  for (int64_t i = 0; i < t.numel(); ++i) p[i] += p[i] >= 0 ? gap : -gap;
  return t;
}

// ---- unary ----

struct UnaryCase {
  const char* name;
  UnaryFn fn;
  double (*reference)(double);
  double low, high;  // a domain where the op is smooth
};

double ref_rsqrt(double x) { return 1 / std::sqrt(x); }
double ref_relu(double x) { return x > 0 ? x : 0; }
double ref_gelu(double x) { return 0.5 * x * (1 + std::erf(x / std::sqrt(2.0))); }
double ref_sigmoid(double x) { return 1 / (1 + std::exp(-x)); }
double ref_neg(double x) { return -x; }
double ref_square(double x) { return x * x; }

std::vector<UnaryCase> unary_cases() {
  return {
      {"Neg", ops::neg, ref_neg, -3, 3},
      {"Exp", ops::exp, [](double x) { return std::exp(x); }, -3, 3},
      {"Log", ops::log, [](double x) { return std::log(x); }, 0.2, 5},
      {"Sqrt", ops::sqrt, [](double x) { return std::sqrt(x); }, 0.2, 5},
      {"Rsqrt", ops::rsqrt, ref_rsqrt, 0.2, 5},
      {"Abs", ops::abs, [](double x) { return std::abs(x); }, -3, 3},
      {"Square", ops::square, ref_square, -3, 3},
      {"ReLU", ops::relu, ref_relu, -3, 3},
      {"GeLU", ops::gelu, ref_gelu, -4, 4},
      {"Sigmoid", ops::sigmoid, ref_sigmoid, -6, 6},
      {"Tanh", ops::tanh, [](double x) { return std::tanh(x); }, -3, 3},
      {"Erf", ops::erf, [](double x) { return std::erf(x); }, -3, 3},
  };
}

TEST(Unary, HandComputedValues) {
  const double e = std::exp(1.0);
  EXPECT_TRUE(all_close(ops::neg(f64({1, -2, 0})), f64({-1, 2, 0})));
  EXPECT_TRUE(all_close(ops::exp(f64({0, 1, -1})), f64({1, e, 1 / e})));
  EXPECT_TRUE(all_close(ops::log(f64({1, e, 0.5})), f64({0, 1, -0.69314718055994531})));
  EXPECT_TRUE(all_close(ops::sqrt(f64({4, 2.25, 0})), f64({2, 1.5, 0})));
  EXPECT_TRUE(all_close(ops::rsqrt(f64({4, 0.25})), f64({0.5, 2})));
  EXPECT_TRUE(all_close(ops::abs(f64({-2, 0, 3})), f64({2, 0, 3})));
  EXPECT_TRUE(all_close(ops::square(f64({-3, 0.5})), f64({9, 0.25})));
  EXPECT_TRUE(all_close(ops::relu(f64({-1, 0, 2})), f64({0, 0, 2})));
  EXPECT_TRUE(all_close(ops::gelu(f64({1, -1, 0, 2})),
                        f64({0.8413447460685429, -0.15865525393145707, 0, 1.9544997361036416})));
  EXPECT_TRUE(all_close(ops::sigmoid(f64({0, 2, -2})),
                        f64({0.5, 0.8807970779778823, 0.11920292202211755})));
  EXPECT_TRUE(all_close(ops::tanh(f64({0, 0.5})), f64({0, 0.46211715726000974})));
  EXPECT_TRUE(all_close(ops::erf(f64({0.5, -1, 2})),
                        f64({0.5204998778130465, -0.8427007929497149, 0.9953222650189527})));
}

TEST(Unary, Float32MatchesFloat64SmallAndLarge) {
  // 37 elements take the C++ library path; 5003 (>= kOneDnnMinElements) the oneDNN path for
  // the transcendental ops (NOTE [Float32 transcendental kernels]).
  for (const UnaryCase& c : unary_cases()) {
    for (int64_t n : {37, 5003}) {
      const Tensor x = random_f64({n}, c.low, c.high, 3);
      const Tensor expected = c.fn(x);
      const Tensor got = c.fn(ops::cast(x, DType::kFloat32));
      ASSERT_EQ(got.dtype(), DType::kFloat32);
      EXPECT_TRUE(all_close(got, expected, 1e-6, 2e-6)) << c.name << " n=" << n;
    }
  }
}

TEST(Unary, ReferenceValuesOnAGrid) {
  for (const UnaryCase& c : unary_cases()) {
    const Tensor x = Tensor::arange(c.low, c.high, (c.high - c.low) / 50, DType::kFloat64);
    Tensor expected = Tensor::empty(x.shape(), DType::kFloat64);
    for (int64_t i = 0; i < x.numel(); ++i) {
      expected.data<double>()[i] = c.reference(x.data<double>()[i]);
    }
    EXPECT_TRUE(all_close(c.fn(x), expected, 1e-12, 1e-12)) << c.name;
  }
}

TEST(Unary, Float32ErfIsAccurateEverywhere) {
  // The rational approximation (NOTE [Float32 transcendental kernels] in
  // src/kernels/cpu/elementwise.h) over and beyond its clamped range: within 3e-7 where the
  // compiler fuses its multiply-adds (the x86-64-v3 Release build), 3.2e-7 (about 5 ulp of values
  // near 1) without FMA (the sanitizer builds target baseline x86-64).
  const Tensor x = Tensor::arange(-6, 6, 0.001, DType::kFloat64);
  EXPECT_TRUE(all_close(ops::erf(ops::cast(x, DType::kFloat32)), ops::erf(x), 4e-7, 0));
}

TEST(Unary, Float32LogIsAccurateEverywhere) {
  // The vectorised log (NOTE [Vectorisable Float32 math]) from denormals to the largest float,
  // within 1 ulp of the exact value, and its special values.
  std::vector<float> xs;
  for (double v = std::numeric_limits<float>::denorm_min(); v < 3e38; v *= 1.37) {
    xs.push_back(static_cast<float>(v));
  }
  for (float v = 0.5f; v < 2.0f; v += 0.001f) xs.push_back(v);
  const Tensor x = Tensor::from_vector<float>(xs);
  const std::vector<float> got = ops::log(x).to_vector<float>();
  for (size_t i = 0; i < xs.size(); ++i) {
    const double exact = std::log(static_cast<double>(xs[i]));
    const double ulp =
        std::abs(std::nextafter(static_cast<float>(exact), INFINITY) - static_cast<float>(exact));
    ASSERT_LE(std::abs(got[i] - exact), ulp) << "log(" << xs[i] << ")";
  }
  const Tensor special = ops::log(f32({0.0f, -0.0f, -1.0f, INFINITY, -INFINITY, NAN, 1.0f}));
  const std::vector<float> s = special.to_vector<float>();
  EXPECT_EQ(s[0], -INFINITY);
  EXPECT_EQ(s[1], -INFINITY);
  EXPECT_TRUE(std::isnan(s[2]));
  EXPECT_EQ(s[3], INFINITY);
  EXPECT_TRUE(std::isnan(s[4]));
  EXPECT_TRUE(std::isnan(s[5]));
  EXPECT_EQ(s[6], 0.0f);
}

TEST(Unary, IntegerNegAbsSquare) {
  const Tensor x = Tensor::from_vector<int32_t>({-3, 0, 4});
  EXPECT_EQ(ops::neg(x).to_vector<int32_t>(), (std::vector<int32_t>{3, 0, -4}));
  EXPECT_EQ(ops::abs(x).to_vector<int32_t>(), (std::vector<int32_t>{3, 0, 4}));
  const Tensor y = Tensor::from_vector<int64_t>({-3, 5});
  EXPECT_EQ(ops::square(y).to_vector<int64_t>(), (std::vector<int64_t>{9, 25}));
  EXPECT_EQ(ops::abs(y).dtype(), DType::kInt64);
}

TEST(Unary, ReluKeepsNaN) {
  const Tensor y = ops::relu(f32({NAN, -1.0f}));
  EXPECT_TRUE(std::isnan(y.at({0})));
  EXPECT_EQ(y.at({1}), 0.0);
}

TEST(Unary, Gradcheck) {
  for (const UnaryCase& c : unary_cases()) {
    for (const Shape& shape : {Shape{3, 4}, Shape{}, Shape{2, 1, 3}}) {
      // ReLU and Abs have a kink at 0: stay clear of it.
      const bool kink = std::string(c.name) == "ReLU" || std::string(c.name) == "Abs";
      const Tensor x = kink ? away_from_zero(shape, 5) : random_f64(shape, c.low, c.high, 5);
      EXPECT_TRUE(gradcheck([&](const std::vector<Tensor>& in) { return c.fn(in[0]); }, {x}))
          << c.name << " shape " << shape.to_string();
    }
  }
}

TEST(Unary, GradientAtTheKinksIsZero) {
  const Tensor x = f64({0.0, 2.0, -2.0}).set_requires_grad(true);
  EXPECT_TRUE(all_close(autodiff::grad(ops::reduce_sum(ops::abs(x)), {x})[0], f64({0, 1, -1})));
  EXPECT_TRUE(all_close(autodiff::grad(ops::reduce_sum(ops::relu(x)), {x})[0], f64({0, 1, 0})));
}

TEST(Unary, BackwardPrimitivesFloat32MatchFloat64) {
  // The fused backward primitives (NOTE [Unary backward primitives]) on both Float32 paths.
  const std::vector<std::pair<const char*, std::pair<double, double>>> prims = {
      {"ReluGrad", {-2, 2}},  {"AbsGrad", {-2, 2}},    {"GeLUGrad", {-4, 4}},
      {"ErfGrad", {-3, 3}},   {"SigmoidGrad", {0, 1}}, {"TanhGrad", {-1, 1}},
      {"SqrtGrad", {0.2, 3}}, {"RsqrtGrad", {0.2, 3}},
  };
  for (const auto& [name, range] : prims) {
    for (int64_t n : {29, 4099}) {
      const Tensor dy = random_f64({n}, -1, 1, 11);
      const Tensor saved = random_f64({n}, range.first, range.second, 12);
      const Tensor expected = ir::call(name, {dy, saved})[0];
      const Tensor got =
          ir::call(name, {ops::cast(dy, DType::kFloat32), ops::cast(saved, DType::kFloat32)})[0];
      EXPECT_TRUE(all_close(got, expected, 1e-6, 1e-5)) << name << " n=" << n;
    }
  }
}

TEST(Unary, Errors) {
  const Tensor i = Tensor::from_vector<int32_t>({1, 2});
  EXPECT_ERROR(ops::exp(i), "Exp: input 0 has dtype Int32; expected Float32 or Float64");
  EXPECT_ERROR(ops::log(i), "Log: input 0 has dtype Int32");
  EXPECT_ERROR(ops::sqrt(i), "Sqrt: input 0 has dtype Int32");
  EXPECT_ERROR(ops::relu(i), "ReLU: input 0 has dtype Int32");
  EXPECT_ERROR(ops::gelu(i), "GeLU: input 0 has dtype Int32");
  EXPECT_ERROR(ops::sigmoid(i), "Sigmoid: input 0 has dtype Int32");
  EXPECT_ERROR(ops::tanh(i), "Tanh: input 0 has dtype Int32");
  EXPECT_ERROR(ops::erf(i), "Erf: input 0 has dtype Int32");
  EXPECT_ERROR(ops::rsqrt(i), "Rsqrt: input 0 has dtype Int32");
  const Tensor b = Tensor::ones({2}, DType::kBool);
  EXPECT_ERROR(ops::neg(b),
               "Neg: input 0 has dtype Bool; expected one of Float32, Float64, "
               "Int32, Int64");
  EXPECT_ERROR(ir::call("ReluGrad", {Tensor::ones({2}), Tensor::ones({3})}),
               "ReluGrad: input 0 (dy) has shape (2) but input 1 has shape (3)");
}

// ---- binary ----

struct BinaryCase {
  const char* name;
  BinaryFn fn;
};

TEST(Binary, HandComputedValues) {
  const Tensor a = f64({1, -2, 3, 4}, {2, 2});
  const Tensor b = f64({2, 4});
  EXPECT_TRUE(all_close(ops::add(a, b), f64({3, 2, 5, 8}, {2, 2})));
  EXPECT_TRUE(all_close(ops::sub(a, b), f64({-1, -6, 1, 0}, {2, 2})));
  EXPECT_TRUE(all_close(ops::mul(a, b), f64({2, -8, 6, 16}, {2, 2})));
  EXPECT_TRUE(all_close(ops::div(a, b), f64({0.5, -0.5, 1.5, 1}, {2, 2})));
  EXPECT_TRUE(all_close(ops::pow(a, b), f64({1, 16, 9, 256}, {2, 2})));
  EXPECT_TRUE(all_close(ops::maximum(a, b), f64({2, 4, 3, 4}, {2, 2})));
  EXPECT_TRUE(all_close(ops::minimum(a, b), f64({1, -2, 2, 4}, {2, 2})));
  // Column broadcast (2, 1) x (1, 3) -> (2, 3).
  EXPECT_TRUE(all_close(ops::sub(f64({10, 20}, {2, 1}), f64({1, 2, 3}, {1, 3})),
                        f64({9, 8, 7, 19, 18, 17}, {2, 3})));
  EXPECT_TRUE(all_close(ops::pow(f64({4, 9}), f64({0.5})), f64({2, 3})));
  EXPECT_TRUE(all_close(ops::pow(f64({4, 0.5}), f64({-1})), f64({0.25, 2})));
}

TEST(Binary, ScalarOverloadsAndOperators) {
  const Tensor x = f64({1, 2, 4});
  EXPECT_TRUE(all_close(ops::add(x, 1.5), f64({2.5, 3.5, 5.5})));
  EXPECT_TRUE(all_close(ops::sub(x, 1), f64({0, 1, 3})));
  EXPECT_TRUE(all_close(ops::mul(x, -2), f64({-2, -4, -8})));
  EXPECT_TRUE(all_close(ops::div(x, 4), f64({0.25, 0.5, 1})));
  EXPECT_TRUE(all_close(ops::pow(x, 3), f64({1, 8, 64})));
  EXPECT_TRUE(all_close(ops::pow(x, 2), f64({1, 4, 16})));
  EXPECT_TRUE(all_close(x + x, f64({2, 4, 8})));
  EXPECT_TRUE(all_close(x - f64({1}), f64({0, 1, 3})));
  EXPECT_TRUE(all_close(x * x, f64({1, 4, 16})));
  EXPECT_TRUE(all_close(x / x, f64({1, 1, 1})));
  EXPECT_TRUE(all_close(-x, f64({-1, -2, -4})));
  EXPECT_TRUE(all_close(x + 1, f64({2, 3, 5})));
  EXPECT_TRUE(all_close(x - 1, f64({0, 1, 3})));
  EXPECT_TRUE(all_close(x * 3, f64({3, 6, 12})));
  EXPECT_TRUE(all_close(x / 2, f64({0.5, 1, 2})));
  EXPECT_TRUE(all_close(3 * x, f64({3, 6, 12})));
  EXPECT_TRUE(all_close(1 + x, f64({2, 3, 5})));
  EXPECT_TRUE(all_close(1 - x, f64({0, -1, -3})));
  EXPECT_TRUE(all_close(8 / x, f64({8, 4, 2})));
  // The scalar takes the tensor's dtype.
  const Tensor i = Tensor::from_vector<int32_t>({1, 2});
  EXPECT_EQ((i + 1).dtype(), DType::kInt32);
  EXPECT_EQ((i * 3).to_vector<int32_t>(), (std::vector<int32_t>{3, 6}));
}

TEST(Binary, IntegerArithmetic) {
  const Tensor a = Tensor::from_vector<int32_t>({7, -7, 2, 3, -1, 5});
  const Tensor b = Tensor::from_vector<int32_t>({2, 2, 10, 0, -3, -1});
  EXPECT_EQ(ops::add(a, b).to_vector<int32_t>(), (std::vector<int32_t>{9, -5, 12, 3, -4, 4}));
  EXPECT_EQ(ops::mul(a, b).to_vector<int32_t>(), (std::vector<int32_t>{14, -14, 20, 0, 3, -5}));
  // Powers: 7^2, (-7)^2, 2^10, 3^0, (-1)^-3, 5^-1 (truncates to 0).
  EXPECT_EQ(ops::pow(a, b).to_vector<int32_t>(), (std::vector<int32_t>{49, 49, 1024, 1, -1, 0}));
  EXPECT_EQ(ops::maximum(a, b).to_vector<int32_t>(), (std::vector<int32_t>{7, 2, 10, 3, -1, 5}));
  EXPECT_EQ(ops::minimum(a, b).to_vector<int32_t>(), (std::vector<int32_t>{2, -7, 2, 0, -3, -1}));
  // Division truncates toward zero.
  const Tensor c = Tensor::from_vector<int64_t>({7, -7, 9, INT64_MIN});
  const Tensor d = Tensor::from_vector<int64_t>({2, 2, -4, -1});
  EXPECT_EQ(ops::div(c, d).to_vector<int64_t>(), (std::vector<int64_t>{3, -3, -2, INT64_MIN}));
  EXPECT_EQ(ops::sub(c, d).to_vector<int64_t>()[0], 5);
}

TEST(Binary, MaximumMinimumPropagateNaN) {
  const Tensor a = f32({NAN, 1.0f, 2.0f});
  const Tensor b = f32({1.0f, NAN, 3.0f});
  const Tensor mx = ops::maximum(a, b);
  const Tensor mn = ops::minimum(a, b);
  EXPECT_TRUE(std::isnan(mx.at({0})) && std::isnan(mx.at({1})));
  EXPECT_TRUE(std::isnan(mn.at({0})) && std::isnan(mn.at({1})));
  EXPECT_EQ(mx.at({2}), 3.0);
  EXPECT_EQ(mn.at({2}), 2.0);
}

TEST(Binary, Float32LargeMatchesFloat64) {
  const Tensor a = random_f64({70, 300}, 0.5, 2, 21);
  const Tensor b = random_f64({300}, -1, 1.5, 22);
  const Tensor a32 = ops::cast(a, DType::kFloat32), b32 = ops::cast(b, DType::kFloat32);
  for (BinaryFn fn :
       {BinaryFn(ops::add), BinaryFn(ops::sub), BinaryFn(ops::mul), BinaryFn(ops::div),
        BinaryFn(ops::pow), BinaryFn(ops::maximum), BinaryFn(ops::minimum)}) {
    EXPECT_TRUE(all_close(fn(a32, b32), fn(a, b), 1e-6, 1e-5));
    EXPECT_TRUE(all_close(fn(b32, a32), fn(b, a), 1e-6, 1e-5));
  }
}

// Pairs of input shapes that broadcast: equal, trailing vector, both sides, scalar, size 1.
std::vector<std::pair<Shape, Shape>> broadcast_pairs() {
  return {{{2, 3}, {2, 3}}, {{2, 3}, {3}}, {{2, 1, 4}, {3, 1}},
          {{}, {2, 2}},     {{1}, {3}},    {{4, 1}, {1}}};
}

TEST(Binary, GradcheckWithBroadcasting) {
  const std::vector<BinaryCase> cases = {
      {"Add", ops::add}, {"Sub", ops::sub},         {"Mul", ops::mul},        {"Div", ops::div},
      {"Pow", ops::pow}, {"Maximum", ops::maximum}, {"Minimum", ops::minimum}};
  for (const BinaryCase& c : cases) {
    const std::string name = c.name;
    for (const auto& [sa, sb] : broadcast_pairs()) {
      // Div needs b away from 0; Pow needs a > 0 (b * a^(b-1) and log(a)).
      Tensor a = name == "Pow" ? random_f64(sa, 0.5, 2, 31) : random_f64(sa, -1, 1, 31);
      Tensor b = name == "Div" ? away_from_zero(sb, 32, 0.5) : random_f64(sb, -1, 1, 32);
      EXPECT_TRUE(
          gradcheck([&](const std::vector<Tensor>& in) { return c.fn(in[0], in[1]); }, {a, b}))
          << c.name << " " << sa.to_string() << " x " << sb.to_string();
    }
  }
}

TEST(Binary, GradcheckScalarOverloads) {
  const Tensor x = random_f64({2, 3}, 0.5, 2, 41);
  const auto check = [&](std::function<Tensor(const Tensor&)> fn) {
    return gradcheck([&](const std::vector<Tensor>& in) { return fn(in[0]); }, {x});
  };
  EXPECT_TRUE(check([](const Tensor& t) { return ops::pow(t, 3.0); }));
  EXPECT_TRUE(check([](const Tensor& t) { return ops::pow(t, -0.5); }));
  EXPECT_TRUE(check([](const Tensor& t) { return ops::div(t, 3.0); }));
  EXPECT_TRUE(check([](const Tensor& t) { return 2.0 / t - t * 0.5 + 1.0; }));
}

TEST(Binary, PowGradientAtZeroBase) {
  // d(a^b)/db = a^b log a, taken as 0 at a == 0; d/da = b a^(b-1) stays finite there.
  const Tensor a = f64({0, 2}).set_requires_grad(true);
  const Tensor b = f64({2, 3}).set_requires_grad(true);
  const std::vector<Tensor> g = autodiff::grad(ops::reduce_sum(ops::pow(a, b)), {a, b});
  EXPECT_TRUE(all_close(g[0], f64({0, 12})));
  EXPECT_TRUE(all_close(g[1], f64({0, 8 * std::log(2.0)})));
}

TEST(Binary, ExtremumTiesSplitTheGradient) {
  // NOTE [Extremum ties]: where a == b each input gets half.
  const Tensor a = f64({1, 2, 5}).set_requires_grad(true);
  const Tensor b = f64({1, 3, 4}).set_requires_grad(true);
  std::vector<Tensor> g = autodiff::grad(ops::reduce_sum(ops::maximum(a, b)), {a, b});
  EXPECT_TRUE(all_close(g[0], f64({0.5, 0, 1})));
  EXPECT_TRUE(all_close(g[1], f64({0.5, 1, 0})));
  g = autodiff::grad(ops::reduce_sum(ops::minimum(a, b)), {a, b});
  EXPECT_TRUE(all_close(g[0], f64({0.5, 1, 0})));
  EXPECT_TRUE(all_close(g[1], f64({0.5, 0, 1})));
  // Broadcast: a scalar against a vector collects from every position it wins.
  const Tensor s = f64({2}, {}).set_requires_grad(true);
  g = autodiff::grad(ops::reduce_sum(ops::maximum(s, f64({1, 2, 3}))), {s});
  EXPECT_TRUE(all_close(g[0], f64({1.5}, {})));
}

TEST(Binary, Errors) {
  const Tensor f = Tensor::ones({2, 3});
  const Tensor i = Tensor::ones({2, 3}, DType::kInt32);
  EXPECT_ERROR(ops::add(f, i),
               "Add: input 0 has dtype Float32 but input 1 has dtype Int32; they must match");
  EXPECT_ERROR(ops::pow(i, f), "Pow: input 0 has dtype Int32 but input 1 has dtype Float32");
  EXPECT_ERROR(ops::mul(f, Tensor::ones({4})), "Mul: shapes (2, 3) and (4) cannot be broadcast",
               "dim 1 (from the right) is 3 and 4");
  EXPECT_ERROR(ops::maximum(f, Tensor::ones({3, 2})),
               "Maximum: shapes (2, 3) and (3, 2) cannot be broadcast");
  const Tensor b = Tensor::ones({2}, DType::kBool);
  EXPECT_ERROR(ops::sub(b, b), "Sub: input 0 has dtype Bool; expected one of");
  const Tensor zero = Tensor::from_vector<int32_t>({1, 0});
  EXPECT_ERROR(ops::div(Tensor::from_vector<int32_t>({4, 4}), zero),
               "Div: input 1 has a zero at flat index 1", "integer division by zero");
}

// ---- Cast and fills ----

TEST(CastAndFill, CastConvertsValues) {
  const Tensor x = f64({-1.7, 0.0, 2.9});
  EXPECT_EQ(ops::cast(x, DType::kInt32).to_vector<int32_t>(), (std::vector<int32_t>{-1, 0, 2}));
  EXPECT_EQ(bool_values(ops::cast(x, DType::kBool)), (std::vector<bool>{true, false, true}));
  EXPECT_TRUE(all_close(ops::cast(ops::cast(x, DType::kFloat32), DType::kFloat64), x, 1e-6, 0));
  EXPECT_TRUE(gradcheck(
      [](const std::vector<Tensor>& in) {
        return ops::cast(ops::cast(in[0], DType::kFloat32), DType::kFloat64);
      },
      {random_f64({3})}, {.eps = 1e-3, .atol = 1e-4, .rtol = 1e-3}));
}

TEST(CastAndFill, ZerosOnesLikeAndFill) {
  const Tensor i = Tensor::from_vector<int32_t>({5, 6, 7}, {3, 1});
  const Tensor z = ops::zeros_like(i);
  EXPECT_EQ(z.dtype(), DType::kInt32);
  EXPECT_EQ(z.shape(), Shape({3, 1}));
  EXPECT_EQ(z.to_vector<int32_t>(), (std::vector<int32_t>{0, 0, 0}));
  EXPECT_TRUE(all_close(ops::ones_like(f64({3, 4})), f64({1, 1})));
  const Tensor filled = ops::fill(DType::kInt64, {2, 3}, 7);
  EXPECT_EQ(filled.shape(), Shape({2, 3}));
  EXPECT_EQ(filled.to_vector<int64_t>(), (std::vector<int64_t>(6, 7)));
  EXPECT_EQ(bool_values(ops::fill(DType::kBool, {2}, 3)), (std::vector<bool>{true, true}));
  EXPECT_TRUE(all_close(ops::fill(DType::kFloat64, {}, 0.25), f64({0.25}, {})));
  EXPECT_EQ(ops::fill(DType::kFloat32, {0, 4}, 1).numel(), 0);
}

TEST(CastAndFill, LikeOpsPassNoGradient) {
  const Tensor x = f64({1, 2}).set_requires_grad(true);
  // d/dx sum(x * ones_like(x) + zeros_like(x)) = 1: nothing flows through the *_like ops.
  const Tensor y = ops::reduce_sum(x * ops::ones_like(x) + ops::zeros_like(x));
  EXPECT_TRUE(all_close(autodiff::grad(y, {x})[0], f64({1, 1})));
}

TEST(CastAndFill, Errors) {
  EXPECT_ERROR(ops::fill(DType::kFloat32, Shape({2, -1}), 0),
               "Fill: shape (2, -1) has a negative dim -1");
}

}  // namespace
}  // namespace cleave

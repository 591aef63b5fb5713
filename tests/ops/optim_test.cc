// The in-place optimizer primitives ApplyMomentum, SGD and Adam, called through the registry.
#include <gtest/gtest.h>

#include <cmath>

#include "testing/gradcheck.h"

namespace cleave {
namespace {

using testing::all_close;

Tensor values(const std::vector<double>& v, DType dtype, const Shape& shape = {}) {
  const Shape s = shape.rank() == 0 ? Shape{static_cast<int64_t>(v.size())} : shape;
  Tensor t = Tensor::from_vector<double>(v, s);
  return dtype == DType::kFloat64 ? t : ops::cast(t, dtype);
}

std::vector<Tensor> run_op(std::string_view op, std::vector<Tensor> inputs,
                           const ir::Attrs& attrs) {
  return ir::call(op, std::move(inputs), attrs);
}

ir::Attrs momentum_attrs(double lr, double momentum, bool nesterov, double weight_decay = 0.0) {
  return {{"lr", lr},
          {"momentum", momentum},
          {"use_nesterov", nesterov},
          {"weight_decay", weight_decay}};
}

class OptimPrimitiveByDtype : public ::testing::TestWithParam<DType> {};

TEST_P(OptimPrimitiveByDtype, ApplyMomentumUpdatesVariableAndAccumulationInPlace) {
  const DType dt = GetParam();
  const double tol = dt == DType::kFloat64 ? 1e-12 : 1e-6;
  Tensor var = values({1.0, -2.0, 0.5}, dt);
  Tensor acc = values({0.0, 1.0, -1.0}, dt);
  const Tensor grad = values({0.5, 0.25, -2.0}, dt);
  const std::vector<Tensor> out =
      run_op("ApplyMomentum", {var, acc, grad}, momentum_attrs(0.1, 0.9, false));
  EXPECT_TRUE(out.empty());
  // acc = 0.9 acc + g; var -= 0.1 acc
  EXPECT_TRUE(all_close(acc, values({0.5, 1.15, -2.9}, dt), tol, tol));
  EXPECT_TRUE(all_close(var, values({0.95, -2.115, 0.79}, dt), tol, tol));
}

TEST_P(OptimPrimitiveByDtype, ApplyMomentumNesterovAndWeightDecay) {
  const DType dt = GetParam();
  const double tol = dt == DType::kFloat64 ? 1e-12 : 1e-6;
  Tensor var = values({1.0, -2.0}, dt);
  Tensor acc = values({0.5, 0.0}, dt);
  const Tensor grad = values({1.0, 1.0}, dt);
  run_op("ApplyMomentum", {var, acc, grad}, momentum_attrs(0.1, 0.5, true, 0.1));
  // g = grad + 0.1 var = (1.1, 0.8); acc = 0.5 acc + g = (1.35, 0.8);
  // var -= 0.1 (g + 0.5 acc) = (1 - 0.1775, -2 - 0.12)
  EXPECT_TRUE(all_close(acc, values({1.35, 0.8}, dt), tol, tol));
  EXPECT_TRUE(all_close(var, values({0.8225, -2.12}, dt), tol, tol));
}

TEST_P(OptimPrimitiveByDtype, SgdFirstStepStartsAccumulationAtGradientAndClearsStat) {
  const DType dt = GetParam();
  const double tol = dt == DType::kFloat64 ? 1e-12 : 1e-6;
  Tensor param = values({1.0, 2.0}, dt);
  Tensor acc = values({7.0, 7.0}, dt);  // ignored on the first step
  Tensor stat = values({1.0}, dt);
  const ir::Attrs attrs{{"lr", 0.1},
                        {"momentum", 0.9},
                        {"dampening", 0.5},
                        {"weight_decay", 0.0},
                        {"nesterov", false}};
  run_op("SGD", {param, values({1.0, -1.0}, dt), acc, stat}, attrs);
  EXPECT_TRUE(all_close(acc, values({1.0, -1.0}, dt), tol, tol));
  EXPECT_TRUE(all_close(param, values({0.9, 2.1}, dt), tol, tol));
  EXPECT_EQ(stat.item(), 0.0);
  // Second step: acc = 0.9 acc + (1 - 0.5) g.
  run_op("SGD", {param, values({2.0, 2.0}, dt), acc, stat}, attrs);
  EXPECT_TRUE(all_close(acc, values({1.9, 0.1}, dt), tol, tol));
  EXPECT_TRUE(all_close(param, values({0.71, 2.09}, dt), tol, tol));
}

TEST_P(OptimPrimitiveByDtype, AdamFirstStepMovesBySignOfGradient) {
  const DType dt = GetParam();
  Tensor param = values({1.0, -1.0, 3.0}, dt);
  Tensor m = values({0, 0, 0}, dt), v = values({0, 0, 0}, dt);
  const ir::Attrs attrs{{"lr", 0.01},        {"beta1", 0.9},        {"beta2", 0.999},
                        {"eps", 1e-8},       {"weight_decay", 0.0}, {"step", int64_t{1}},
                        {"decoupled", false}};
  run_op("Adam", {param, m, v, values({0.3, -2.0, 1e-3}, dt)}, attrs);
  // After bias correction m̂ = g and v̂ = g², so the step is lr · g / (|g| + eps).
  EXPECT_TRUE(all_close(param, values({0.99, -0.99, 2.99}, dt), 1e-5, 0));
  EXPECT_TRUE(all_close(m, values({0.03, -0.2, 1e-4}, dt), 1e-7, 1e-6));
  EXPECT_TRUE(all_close(v, values({0.09e-3, 4e-3, 1e-9}, dt), 1e-9, 1e-5));
}

INSTANTIATE_TEST_SUITE_P(Dtypes, OptimPrimitiveByDtype,
                         ::testing::Values(DType::kFloat32, DType::kFloat64),
                         [](const auto& info) { return std::string(dtype_name(info.param)); });

TEST(OptimPrimitive, AdamDecoupledDecaysParameterBeforeTheStep) {
  Tensor param = values({2.0}, DType::kFloat64);
  Tensor m = values({0.0}, DType::kFloat64), v = values({0.0}, DType::kFloat64);
  run_op("Adam", {param, m, v, values({0.5}, DType::kFloat64)},
         {{"lr", 0.1},
          {"beta1", 0.9},
          {"beta2", 0.999},
          {"eps", 0.0 + 1e-8},
          {"weight_decay", 0.5},
          {"step", int64_t{1}},
          {"decoupled", true}});
  // 2 · (1 - 0.1 · 0.5) - 0.1 · 0.5 / (0.5 + 1e-8)
  EXPECT_NEAR(param.item(), 2 * 0.95 - 0.1 * 0.5 / (0.5 + 1e-8), 1e-12);
}

TEST(OptimPrimitive, LargeTensorsTakeTheParallelPathWithTheSameResult) {
  const int64_t n = 100003;  // above the parallel grain, not a multiple of a vector width
  Tensor var = testing::random_f64({n}, -1, 1, 3);
  Tensor acc = testing::random_f64({n}, -1, 1, 4);
  const Tensor grad = testing::random_f64({n}, -1, 1, 5);
  const std::vector<double> v0 = var.to_vector<double>(), a0 = acc.to_vector<double>(),
                            g = grad.to_vector<double>();
  run_op("ApplyMomentum", {var, acc, grad}, momentum_attrs(0.05, 0.8, false));
  for (int64_t i = 0; i < n; i += 997) {
    const double a = 0.8 * a0[i] + g[i];
    ASSERT_NEAR(acc.data<double>()[i], a, 1e-14);
    ASSERT_NEAR(var.data<double>()[i], v0[i] - 0.05 * a, 1e-14);
  }
}

TEST(OptimPrimitive, RecordsNoAutogradHistory) {
  Tensor var = Tensor::ones({2}).set_requires_grad(true);
  Tensor acc = Tensor::zeros({2});
  run_op("ApplyMomentum", {var, acc, Tensor::ones({2})}, momentum_attrs(0.1, 0.9, false));
  EXPECT_TRUE(var.is_leaf());
  EXPECT_TRUE(var.requires_grad());
  EXPECT_FLOAT_EQ(var.at({0}), 0.9f);
}

TEST(OptimPrimitive, MismatchedInputsAreNamed) {
  const Tensor f = Tensor::zeros({2, 2});
  EXPECT_ERROR(run_op("ApplyMomentum", {f, f, Tensor::zeros({3})}, momentum_attrs(0.1, 0.9, false)),
               "ApplyMomentum: input 2 (gradient) has shape (3)",
               "input 0 (variable) has shape (2, 2)");
  EXPECT_ERROR(run_op("ApplyMomentum", {f, Tensor::zeros({2, 2}, DType::kFloat64), f},
                      momentum_attrs(0.1, 0.9, false)),
               "ApplyMomentum: input 1 (accumulation) has dtype Float64",
               "input 0 (variable) has dtype Float32");
  const Tensor i = Tensor::zeros({2}, DType::kInt32);
  EXPECT_ERROR(run_op("ApplyMomentum", {i, i, i}, momentum_attrs(0.1, 0.9, false)),
               "ApplyMomentum: input 0 (variable) has dtype Int32", "Float32 or Float64");
  EXPECT_ERROR(run_op("ApplyMomentum", {f, f, f}, {{"momentum", 0.9}, {"use_nesterov", false}}),
               "ApplyMomentum", "attribute 'lr' is missing");
  EXPECT_ERROR(run_op("ApplyMomentum", {f, f, f}, momentum_attrs(NAN, 0.9, false)),
               "ApplyMomentum: attribute 'lr' is nan", "finite");

  const ir::Attrs sgd{{"lr", 0.1},
                      {"momentum", 0.9},
                      {"dampening", 0.0},
                      {"weight_decay", 0.0},
                      {"nesterov", false}};
  EXPECT_ERROR(run_op("SGD", {f, f, Tensor::zeros({4}), Tensor::ones({1})}, sgd),
               "SGD: input 2 (accumulation) has shape (4)", "input 0 (parameter)");
  EXPECT_ERROR(run_op("SGD", {f, f, f, Tensor::ones({2})}, sgd),
               "SGD: input 3 (stat) is Float32 (2)", "one-element Float32");
  ir::Attrs nesterov = sgd;
  nesterov.set("nesterov", true).set("dampening", 0.5);
  EXPECT_ERROR(run_op("SGD", {f, f, f, Tensor::ones({1})}, nesterov),
               "SGD: nesterov needs momentum > 0 and dampening 0");

  ir::Attrs adam{{"lr", 0.1},           {"beta1", 0.9},       {"beta2", 0.999},    {"eps", 1e-8},
                 {"weight_decay", 0.0}, {"step", int64_t{0}}, {"decoupled", false}};
  EXPECT_ERROR(run_op("Adam", {f, f, f, f}, adam), "Adam: step is 0", "1-based");
  adam.set("step", int64_t{1}).set("beta2", 1.0);
  EXPECT_ERROR(run_op("Adam", {f, f, f, f}, adam), "Adam: beta1 0.9 and beta2 1", "[0, 1)");
  adam.set("beta2", 0.999).set("eps", 0.0);
  EXPECT_ERROR(run_op("Adam", {f, f, f, f}, adam), "Adam: eps is 0");
  adam.set("eps", 1e-8);
  EXPECT_ERROR(run_op("Adam", {f, f, Tensor::zeros({2}), f}, adam),
               "Adam: input 2 (v) has shape (2)");
}

TEST(Assign, WritesTheValueIntoTheVariableInPlace) {
  for (DType dtype : {DType::kFloat32, DType::kFloat64}) {
    const Tensor var = Tensor::zeros({2, 3}, dtype);
    const Tensor view = var.detach();
    ir::call("Assign", {var, Tensor::full({2, 3}, 1.5, dtype)});
    EXPECT_EQ(view.to_double_vector(), std::vector<double>(6, 1.5));
  }
}

TEST(Assign, RejectsAValueOfAnotherShapeOrDType) {
  const Tensor var = Tensor::zeros({2, 3});
  EXPECT_ERROR(ir::call("Assign", {var, Tensor::zeros({3, 2})}),
               "Assign: input 1 (value) is Float32 (3, 2); expected input 0's Float32 (2, 3)");
  EXPECT_ERROR(ir::call("Assign", {var, Tensor::zeros({2, 3}, DType::kFloat64)}),
               "input 1 (value) is Float64 (2, 3)");
}

}  // namespace
}  // namespace cleave

namespace cleave {
namespace {

// The per-step scalars as inputs (what the optimizers pass, so that a compiled step reads them
// when it runs): the same updates as with the attributes.
TEST(OptimPrimitive, LearningRateAndAdamStepAsInputs) {
  const Tensor lr = Tensor::full({1}, 0.1, DType::kFloat64);
  Tensor var = values({1.0, -2.0, 0.5}, DType::kFloat32);
  Tensor acc = values({0.0, 1.0, -1.0}, DType::kFloat32);
  ir::Attrs momentum = momentum_attrs(0.0, 0.9, false);
  momentum.set("lr", 123.0);  // ignored: the input wins
  run_op("ApplyMomentum", {var, acc, values({0.5, 0.25, -2.0}, DType::kFloat32), lr}, momentum);
  EXPECT_TRUE(all_close(var, values({0.95, -2.115, 0.79}, DType::kFloat32), 1e-6, 1e-6));

  Tensor param = values({1.0, 2.0}, DType::kFloat64);
  Tensor sgd_acc = values({7.0, 7.0}, DType::kFloat64);
  Tensor stat = values({1.0}, DType::kFloat64);
  const ir::Attrs sgd{
      {"momentum", 0.9}, {"dampening", 0.5}, {"weight_decay", 0.0}, {"nesterov", false}};
  run_op("SGD", {param, values({1.0, -1.0}, DType::kFloat64), sgd_acc, stat, lr}, sgd);
  EXPECT_TRUE(all_close(param, values({0.9, 2.1}, DType::kFloat64), 1e-12, 1e-12));
  EXPECT_EQ(stat.item(), 0.0);

  // Adam's step input is state: the kernel increments it before computing the correction, so
  // two calls are steps 1 and 2 (the same as attributes step 1 then step 2).
  const ir::Attrs adam{
      {"beta1", 0.9}, {"beta2", 0.999}, {"eps", 1e-8}, {"weight_decay", 0.0}, {"decoupled", false}};
  ir::Attrs adam_attrs = adam;
  adam_attrs.set("lr", 0.1).set("step", int64_t{1});
  Tensor p1 = values({1.0, -1.0}, DType::kFloat64), m1 = values({0, 0}, DType::kFloat64),
         v1 = values({0, 0}, DType::kFloat64);
  Tensor p2 = p1.clone(), m2 = m1.clone(), v2 = v1.clone();
  Tensor step = values({0.0}, DType::kFloat64);
  const Tensor g = values({0.3, -2.0}, DType::kFloat64);
  for (int64_t t = 1; t <= 2; ++t) {
    adam_attrs.set("step", t);
    run_op("Adam", {p1, m1, v1, g}, adam_attrs);
    run_op("Adam", {p2, m2, v2, g, lr, step}, adam);
  }
  EXPECT_EQ(step.item(), 2.0);
  EXPECT_TRUE(all_close(p2, p1, 1e-14, 1e-14));
  EXPECT_TRUE(all_close(v2, v1, 1e-14, 1e-14));
}

TEST(OptimPrimitive, BadScalarInputsAreNamed) {
  const Tensor f = Tensor::zeros({2});
  const ir::Attrs momentum{{"momentum", 0.9}, {"use_nesterov", false}};
  EXPECT_ERROR(run_op("ApplyMomentum", {f, f, f, Tensor::ones({2})}, momentum),
               "ApplyMomentum: input 3 (lr) is Float32 (2)", "one-element Float32 or Float64");
  EXPECT_ERROR(run_op("ApplyMomentum", {f, f}, momentum), "ApplyMomentum: 2 inputs given",
               "expected 3", "or 4");
  const ir::Attrs adam{
      {"beta1", 0.9}, {"beta2", 0.999}, {"eps", 1e-8}, {"weight_decay", 0.0}, {"decoupled", false}};
  const Tensor lr = Tensor::ones({1}, DType::kFloat64);
  EXPECT_ERROR(run_op("Adam", {f, f, f, f, lr}, adam), "Adam: 5 inputs given", "or 6");
  EXPECT_ERROR(run_op("Adam", {f, f, f, f, lr, Tensor::zeros({1}, DType::kFloat64)}, adam),
               "Adam: input 5 (step) has dtype Float64", "input 0's Float32");
}

}  // namespace
}  // namespace cleave

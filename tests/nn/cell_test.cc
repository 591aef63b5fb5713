#include "cleave/nn/cell.h"

#include <gtest/gtest.h>

#include "testing/gradcheck.h"

namespace cleave::nn {
namespace {

// y = x * scale + shift.
class Affine : public Cell {
 public:
  explicit Affine(int64_t n) : Cell("Affine") {
    scale = register_parameter("scale", Tensor::ones({n}));
    shift = register_parameter("shift", Tensor::zeros({n}));
  }
  Tensor construct(const Tensor& x) override { return x * scale + shift; }
  Tensor scale, shift;
};

class Net : public Cell {
 public:
  Net() : Cell("Net") {
    temperature = register_parameter("temperature", Tensor::ones({1}));
    first = register_module("first", std::make_shared<Affine>(3));
    second = register_module("second", std::make_shared<Affine>(3));
    counter = register_parameter("counter", Tensor::zeros({1}), /*requires_grad=*/false);
  }
  Tensor construct(const Tensor& x) override { return second->construct(first->construct(x)); }
  Tensor temperature, counter;
  std::shared_ptr<Affine> first, second;
};

// A two-input cell: a + b.
class Sum2 : public Cell {
 public:
  Sum2() : Cell("Sum2") {}
  Tensor construct(const Tensor& a, const Tensor& b) override { return a + b; }
};

std::vector<std::string> names_of(const Cell& cell) {
  std::vector<std::string> names;
  for (const auto& [name, value] : cell.parameters_and_names()) names.push_back(name);
  return names;
}

TEST(Cell, ParametersAreNamedByDottedPathInRegistrationOrder) {
  Net net;
  EXPECT_EQ(names_of(net),
            (std::vector<std::string>{"temperature", "counter", "first.scale", "first.shift",
                                      "second.scale", "second.shift"}));
  ASSERT_EQ(net.children().size(), 2u);
  EXPECT_EQ(net.children()[0].first, "first");
  EXPECT_EQ(net.children()[1].second->cls_name(), "Affine");
}

TEST(Cell, RegisteredParametersShareStorageWithTheLayerMembers) {
  Net net;
  const auto params = net.parameters_and_names();
  EXPECT_TRUE(params[2].second.shares_storage_with(net.first->scale));
  net.first->scale.fill(4.0);
  EXPECT_EQ(params[2].second.at({0}), 4.0);
  EXPECT_TRUE(net.first->scale.requires_grad());
  EXPECT_FALSE(net.counter.requires_grad());
}

TEST(Cell, TrainableParamsSkipThoseWithoutGradients) {
  Net net;
  EXPECT_EQ(net.trainable_params().size(), 5u);
  EXPECT_EQ(net.get_parameters().size(), 6u);
  for (const Tensor& p : net.trainable_params()) EXPECT_FALSE(p.shares_storage_with(net.counter));
}

TEST(Cell, ForwardAndBackwardReachParameters) {
  Net net;
  net.first->scale.fill(2.0);
  const Tensor y = net(Tensor::from_vector<float>({1, 2, 3}));
  EXPECT_EQ(y.to_vector<float>(), (std::vector<float>{2, 4, 6}));
  autodiff::backward(ops::reduce_sum(y));
  EXPECT_EQ(net.first->scale.grad().to_vector<float>(), (std::vector<float>{1, 2, 3}));
  EXPECT_EQ(net.second->shift.grad().to_vector<float>(), (std::vector<float>{1, 1, 1}));
}

TEST(Cell, DuplicateNamesAreRejectedNamingBoth) {
  Net net;
  EXPECT_ERROR(net.register_parameter("first", Tensor::zeros({1})),
               "Net: name 'first' is already used by child cell 'first' (Affine)", "unique");
  EXPECT_ERROR(net.register_module("temperature", std::make_shared<Affine>(1)),
               "Net: name 'temperature' is already used by parameter 'temperature' (Float32 (1))");
  EXPECT_ERROR(net.register_module("second", std::make_shared<Affine>(1)),
               "name 'second' is already used by child cell 'second'");
  EXPECT_EQ(names_of(net).size(), 6u);  // nothing was added
}

TEST(Cell, NamesMustBeNonEmptyAndUndotted) {
  Net net;
  EXPECT_ERROR(net.register_parameter("a.b", Tensor::zeros({1})), "Net: name 'a.b' contains '.'");
  EXPECT_ERROR(net.register_parameter("", Tensor::zeros({1})), "Net: ", "non-empty name");
  EXPECT_ERROR(net.register_module("child", std::shared_ptr<Affine>()),
               "Net: child cell 'child' is null");
}

TEST(Cell, ParametersMustBeFloating) {
  Net net;
  EXPECT_ERROR(net.register_parameter("ids", Tensor::zeros({2}, DType::kInt32)),
               "Net: parameter 'ids' has dtype Int32", "Float32 or Float64");
  EXPECT_ERROR(net.register_parameter("none", Tensor()), "parameter 'none' is an undefined Tensor");
  // Float64 is accepted.
  EXPECT_NO_THROW(net.register_parameter("f64", Tensor::zeros({2}, DType::kFloat64)));
}

TEST(Cell, SetTrainIsRecursive) {
  Net net;
  EXPECT_FALSE(net.training());
  EXPECT_EQ(&net.set_train(), &net);
  EXPECT_TRUE(net.training());
  EXPECT_TRUE(net.first->training());
  EXPECT_TRUE(net.second->training());
  net.set_train(false);
  EXPECT_FALSE(net.first->training());
}

TEST(Cell, WrongNumberOfInputsNamesTheCell) {
  Affine affine(2);
  Sum2 sum;
  EXPECT_ERROR(affine(Tensor::ones({2}), Tensor::ones({2})), "Affine takes 1 input(s)");
  EXPECT_ERROR(sum(Tensor::ones({2})), "Sum2 takes 2 input(s)");
  EXPECT_EQ(sum(Tensor::ones({2}), Tensor::ones({2})).to_vector<float>(),
            (std::vector<float>{2, 2}));
}

TEST(Cell, SharedChildParametersAreListedOnce) {
  auto shared = std::make_shared<Affine>(2);
  Cell outer("Outer");
  outer.register_module("a", shared);
  outer.register_module("b", shared);
  EXPECT_EQ(names_of(outer), (std::vector<std::string>{"a.scale", "a.shift"}));
  EXPECT_ERROR(shared->register_module("self", shared), "a cell cannot be its own child");
}

}  // namespace
}  // namespace cleave::nn

// The optimizer-update rules (src/parallel/rules/optim.cc): every valid strategy on 1, 2, 3, 4, 6
// and 8 devices, run on thread ranks through the SEMI_AUTO_PARALLEL pipeline, equals one device
// (NOTE [Sharded operator check] in tests/testing/op_sharding.h). Every kernel here has a Float64
// path, so the inputs are Float64.
#include <gtest/gtest.h>

#include "cleave/cleave.h"
#include "testing/gradcheck.h"
#include "testing/op_sharding.h"

namespace cleave {
namespace {

using testing::f64;
using testing::OpCase;
using testing::positive;

std::vector<OpCase> optimizer_cases() {
  std::vector<OpCase> cases;
  const Shape p{6, 4};
  const Tensor lr = Tensor::full({1}, 0.1, DType::kFloat64);
  for (bool nesterov : {false, true}) {
    cases.push_back({"ApplyMomentum",
                     {{"momentum", 0.9}, {"use_nesterov", nesterov}, {"weight_decay", 0.01}},
                     {f64(p, 80), f64(p, 81), f64(p, 82), lr}});
  }
  cases.push_back({"ApplyMomentum",  // the learning rate as an attribute
                   {{"lr", 0.05}, {"momentum", 0.9}, {"use_nesterov", false}},
                   {f64({6, 4, 2}, 83), f64({6, 4, 2}, 84), f64({6, 4, 2}, 85)}});
  for (double first : {1.0, 0.0}) {
    cases.push_back(
        {"SGD",
         {{"momentum", 0.9},
          {"dampening", 0.0},
          {"weight_decay", 0.01},
          {"nesterov", first == 0.0}},
         {f64(p, 86), f64(p, 87), f64(p, 88), Tensor::full({1}, first, DType::kFloat64), lr}});
  }
  for (bool decoupled : {false, true}) {
    cases.push_back({"Adam",
                     {{"beta1", 0.9},
                      {"beta2", 0.999},
                      {"eps", 1e-8},
                      {"weight_decay", 0.01},
                      {"decoupled", decoupled}},
                     {f64(p, 89), f64(p, 90), positive(p, 91), f64(p, 92), lr,
                      Tensor::full({1}, 3.0, DType::kFloat64)}});
  }
  cases.push_back({"Assign", {}, {f64(p, 93), f64(p, 94)}});
  return cases;
}

TEST(OpSharding, OptimizerUpdatesWriteTheirSlicesOfOneDevice) {
  testing::expect_all_equal_one_device(optimizer_cases());
}

}  // namespace
}  // namespace cleave

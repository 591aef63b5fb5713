// The elementwise rules (src/parallel/rules/elementwise.cc): every valid strategy on 1, 2, 3, 4, 6
// and 8 devices, run on thread ranks through the SEMI_AUTO_PARALLEL pipeline, equals one device
// (NOTE [Sharded operator check] in tests/testing/op_sharding.h).
#include <gtest/gtest.h>

#include "cleave/cleave.h"
#include "testing/gradcheck.h"
#include "testing/op_sharding.h"

namespace cleave {
namespace {

using testing::f64;
using testing::OpCase;
using testing::positive;

std::vector<OpCase> elementwise_cases() {
  std::vector<OpCase> cases;
  for (const char* op : {"Abs", "Erf", "Exp", "GeLU", "Neg", "ReLU", "Sigmoid", "Square", "Tanh",
                         "ZerosLike", "OnesLike"}) {
    cases.push_back({op, {}, {f64({6, 4}, 1)}});
  }
  for (const char* op : {"Log", "Sqrt", "Rsqrt"}) cases.push_back({op, {}, {positive({6, 4}, 2)}});
  cases.push_back({"Cast", {{"dtype", DType::kFloat32}}, {f64({4, 6}, 3)}});
  for (const char* op : {"Add", "Sub", "Mul", "Maximum", "Minimum"}) {
    cases.push_back({op, {}, {f64({6, 4}, 4), f64({6, 4}, 5)}});
    cases.push_back({op, {}, {f64({2, 6, 4}, 6), f64({6, 1}, 7)}});  // broadcasting
  }
  cases.push_back({"Div", {}, {f64({6, 4}, 8), positive({4}, 9)}});
  cases.push_back({"Pow", {}, {positive({6, 4}, 10), f64({6, 4}, 11)}});
  for (const char* op : {"ReluGrad", "SigmoidGrad", "TanhGrad"}) {
    cases.push_back({op, {}, {f64({6, 4}, 20), f64({6, 4}, 21)}});
  }
  cases.push_back({"MaximumGrad", {}, {f64({6, 4}, 22), f64({4}, 23), f64({6, 4}, 24)}});
  cases.push_back(
      {"Fill",
       {{"shape", std::vector<int64_t>{4, 6}}, {"value", 2.5}, {"dtype", DType::kFloat64}},
       {}});
  return cases;
}

TEST(OpSharding, ElementwiseEqualsOneDevice) {
  testing::expect_all_equal_one_device(elementwise_cases());
}

}  // namespace
}  // namespace cleave

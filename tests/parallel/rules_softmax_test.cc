// The Softmax and LogSoftmax rules (src/parallel/rules/softmax.cc): every valid strategy on 1, 2,
// 3, 4, 6 and 8 devices, run on thread ranks through the SEMI_AUTO_PARALLEL pipeline, equals one
// device (NOTE [Sharded operator check] in tests/testing/op_sharding.h); invalid strategies give
// the planning error.
#include <gtest/gtest.h>

#include "cleave/cleave.h"
#include "testing/gradcheck.h"
#include "testing/op_sharding.h"

namespace cleave {
namespace {

using testing::expect_plan_error;
using testing::f64;
using testing::OpCase;

std::vector<OpCase> softmax_cases() {
  std::vector<OpCase> cases;
  for (const char* op : {"Softmax", "LogSoftmax"}) {
    cases.push_back({op, {{"axis", int64_t{-1}}}, {f64({6, 4}, 43)}});
    cases.push_back({op, {{"axis", int64_t{0}}}, {f64({6, 4}, 44)}});
  }
  cases.push_back({"SoftmaxGrad", {{"axis", int64_t{-1}}}, {f64({6, 4}, 45), f64({6, 4}, 46)}});
  return cases;
}

TEST(OpSharding, SoftmaxEqualsOneDevice) { testing::expect_all_equal_one_device(softmax_cases()); }

// ---- invalid strategies ----

TEST(OpSharding, SoftmaxKeepsTheNormalisedAxisWhole) {
  const OpCase c{"Softmax", {{"axis", int64_t{-1}}}, {f64({6, 4}, 1)}};
  EXPECT_EQ(testing::plan_error(c, {{2, 1}}, 2), "");
  expect_plan_error(c, {{1, 2}}, 2,
                    {"Softmax '", "strategy ((1, 2))", "input of shape (6, 4) on 2 devices",
                     "input 0 dim 1 is split 2 ways, but it is the axis softmax normalises, which "
                     "cannot be split; expected 1"});
  const OpCase grad{"LogSoftmaxGrad", {{"axis", int64_t{0}}}, {f64({6, 4}, 2), f64({6, 4}, 3)}};
  expect_plan_error(
      grad, {{3, 1}, {3, 1}}, 3,
      {"LogSoftmaxGrad '", "input 0 dim 0 is split 3 ways, but it is the axis softmax normalises"});
}

}  // namespace
}  // namespace cleave

// The pooling rules (src/parallel/rules/pool.cc): every valid strategy on 1, 2, 3, 4, 6 and 8
// devices, run on thread ranks through the SEMI_AUTO_PARALLEL pipeline, equals one device (NOTE
// [Sharded operator check] in tests/testing/op_sharding.h); invalid strategies give the planning
// error. Every kernel here has a
// Float64 path, so the inputs are Float64.
#include <gtest/gtest.h>

#include "cleave/cleave.h"
#include "testing/gradcheck.h"
#include "testing/op_sharding.h"

namespace cleave {
namespace {

using testing::expect_plan_error;
using testing::f64;
using testing::OpCase;
using testing::with;
using Dims = std::vector<int64_t>;

ir::Attrs pool_attrs(Dims kernel, Dims stride, std::string pad_mode) {
  return {{"kernel_size", kernel}, {"stride", stride}, {"pad_mode", pad_mode}};
}

std::vector<OpCase> pool_cases() {
  std::vector<OpCase> cases;
  const ir::Attrs k2 = pool_attrs({2, 2}, {2, 2}, "valid");
  const ir::Attrs k3 = pool_attrs({3, 3}, {2, 2}, "same");
  cases.push_back({"MaxPool2D", k2, {f64({6, 4, 4, 4}, 20)}});
  cases.push_back({"MaxPool2D", k3, {f64({6, 2, 5, 5}, 21)}});
  cases.push_back({"AvgPool2D", k2, {f64({6, 4, 4, 4}, 22)}});
  cases.push_back({"AvgPool2D", k3, {f64({6, 2, 5, 5}, 23)}});
  cases.push_back({"MaxPoolGrad", k2, {f64({6, 4, 4, 4}, 24), f64({6, 4, 2, 2}, 25)}});
  cases.push_back(
      {"AvgPoolGrad", with(k3, "input_shape", Dims{6, 2, 5, 5}), {f64({6, 2, 3, 3}, 26)}});
  return cases;
}

TEST(OpSharding, PoolingEqualsOneDevice) { testing::expect_all_equal_one_device(pool_cases()); }

// ---- invalid strategies ----

TEST(OpSharding, InvalidPoolingStrategiesAreNamed) {
  const OpCase pool = pool_cases()[0];  // MaxPool2D x (6, 4, 4, 4)
  const std::string shape = "input of shape (6, 4, 4, 4) on 8 devices";
  expect_plan_error(pool, {{1, 1, 1, 2}}, 8,
                    {"MaxPool2D '", "strategy ((1, 1, 1, 2))", shape,
                     "input 0 dim 3 is split 2 ways, but it is a spatial dimension"});
  expect_plan_error(pool, {{1, 8, 1, 1}}, 8,
                    {"input 0 dim 1 has size 4, which 8 ways do not divide; a split of it must be "
                     "one of 1, 2, 4"});
  expect_plan_error(pool, {{3, 1, 1, 1}}, 8,
                    {"it uses 3 devices (3), which does not divide "
                     "device_num 8"});
  expect_plan_error(pool, {{2, 1, 1, 1}, {2, 1, 1, 1}}, 8,
                    {"MaxPool2D: strategy ((2, 1, 1, 1), (2, 1, 1, 1)) has 2 entries; expected "
                     "one per input (1)"});
  // MaxPool2D has one input; its gradient has two, whose channels must match.
  const OpCase grad = pool_cases()[4];  // MaxPoolGrad x (6, 4, 4, 4), dy (6, 4, 2, 2)
  expect_plan_error(grad, {{1, 2, 1, 1}, {1, 4, 1, 1}}, 8,
                    {"MaxPoolGrad '", "inputs of shapes (6, 4, 4, 4), (6, 4, 2, 2)",
                     "input 1 dim 1 is split 4 ways but input 0 dim 1 is split 2 ways; they must "
                     "match (the channel dimension)"});
}

}  // namespace
}  // namespace cleave

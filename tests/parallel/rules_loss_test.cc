// The cross entropy and MSE rules (src/parallel/rules/loss.cc): every valid strategy on 1, 2, 3, 4,
// 6 and 8 devices, run on thread ranks through the SEMI_AUTO_PARALLEL pipeline, equals one device
// (NOTE [Sharded operator check] in tests/testing/op_sharding.h); invalid strategies give the
// planning error.
#include <gtest/gtest.h>

#include "cleave/cleave.h"
#include "testing/gradcheck.h"
#include "testing/op_sharding.h"

namespace cleave {
namespace {

using testing::expect_plan_error;
using testing::f64;
using testing::OpCase;

Tensor i32(const std::vector<int32_t>& values, const Shape& shape) {
  return Tensor::from_vector(values, shape);
}

std::vector<OpCase> loss_cases() {
  std::vector<OpCase> cases;
  const Tensor labels = ops::softmax(f64({12, 4}, 41), 1);
  const Tensor sparse = i32({3, 0, 1, 2, 2, 3, 0, 0, 1, 3, 2, 1}, {12});
  cases.push_back({"SoftmaxCrossEntropyWithLogits", {}, {f64({12, 4}, 40), labels}});
  cases.push_back({"SparseSoftmaxCrossEntropyWithLogits", {}, {f64({12, 4}, 42), sparse}});
  cases.push_back(
      {"SoftmaxCrossEntropyWithLogitsGrad", {}, {f64({12, 4}, 43), labels, f64({12}, 44)}});
  cases.push_back(
      {"SparseSoftmaxCrossEntropyWithLogitsGrad", {}, {f64({12, 4}, 45), sparse, f64({12}, 46)}});
  cases.push_back({"MSE", {}, {f64({6, 4}, 18), f64({6, 4}, 19)}});
  return cases;
}

TEST(OpSharding, LossesEqualOneDevice) { testing::expect_all_equal_one_device(loss_cases()); }

// ---- invalid strategies ----

TEST(OpShardingErrors, CrossEntropyKeepsTheClassDimensionWhole) {
  const OpCase c{
      "SoftmaxCrossEntropyWithLogits", {}, {f64({12, 4}, 7), ops::softmax(f64({12, 4}, 8), 1)}};
  const std::string op = "SoftmaxCrossEntropyWithLogits '";
  expect_plan_error(c, {{1, 2}, {1, 2}}, 2,
                    {op, "strategy ((1, 2), (1, 2))", "inputs of shapes (12, 4), (12, 4)",
                     "input 0 dim 1 is split 2 ways, but it is the class dimension (the softmax "
                     "over it needs the whole row), which cannot be split; expected 1"});
  expect_plan_error(c, {{8, 1}, {8, 1}}, 8,
                    {op, "input 0 dim 0 has size 12, which 8 ways do not divide"});
  expect_plan_error(c, {{2, 1}, {4, 1}}, 4,
                    {op,
                     "input 1 dim 0 is split 4 ways but input 0 dim 0 is split 2 ways; they "
                     "must match (the batch dimension)"});
  expect_plan_error(c, {{3, 1}, {3, 1}}, 4, {op, "it uses 3 devices (3), which does not divide"});
  expect_plan_error(c, {{2, 1}, {2, 1}, {2}}, 2,
                    {"SoftmaxCrossEntropyWithLogits: strategy ((2, 1), (2, 1), (2)) has 3 entries; "
                     "expected one per input (2)"});
  expect_plan_error(c, {{2, 1}, {2}}, 2,
                    {"SoftmaxCrossEntropyWithLogits: strategy ((2, 1), (2)) gives input 1 1 "
                     "split but the input has shape (12, 4) (rank 2)"});
  const OpCase s{"SparseSoftmaxCrossEntropyWithLogits",
                 {},
                 {f64({12, 4}, 9), i32({3, 0, 1, 2, 2, 3, 0, 0, 1, 3, 2, 1}, {12})}};
  expect_plan_error(s, {{2, 1}, {3}}, 6,
                    {"SparseSoftmaxCrossEntropyWithLogits '",
                     "input 1 dim 0 is split 3 ways but "
                     "input 0 dim 0 is split 2 ways; they must match (the batch dimension)"});
}

}  // namespace
}  // namespace cleave

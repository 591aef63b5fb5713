// The Concat, Split, Slice and StridedSlice rules (src/parallel/rules/slice.cc): every valid
// strategy on 1, 2, 3, 4, 6 and 8 devices, run on thread ranks through the SEMI_AUTO_PARALLEL
// pipeline, equals one device (NOTE [Sharded operator check] in tests/testing/op_sharding.h);
// invalid strategies give the planning error.
#include <gtest/gtest.h>

#include "cleave/cleave.h"
#include "testing/gradcheck.h"
#include "testing/op_sharding.h"

namespace cleave {
namespace {

using testing::expect_plan_error;
using testing::f64;
using testing::OpCase;
using testing::plan_error;
using V = std::vector<int64_t>;

std::vector<OpCase> slice_cases() {
  std::vector<OpCase> cases;
  cases.push_back({"Concat", {{"axis", int64_t{0}}}, {f64({6, 4}, 1), f64({6, 4}, 2)}});
  cases.push_back(
      {"Concat", {{"axis", int64_t{-1}}}, {f64({6, 2}, 3), f64({6, 4}, 4), f64({6, 2}, 5)}});
  cases.push_back({"Concat", {{"axis", int64_t{1}}}, {f64({2, 3, 4}, 6), f64({2, 6, 4}, 7)}});
  cases.push_back({"Split", {{"axis", int64_t{1}}, {"output_num", int64_t{2}}}, {f64({6, 4}, 8)}});
  cases.push_back({"Split", {{"axis", int64_t{0}}, {"output_num", int64_t{3}}}, {f64({6, 4}, 9)}});
  cases.push_back(
      {"Split", {{"axis", int64_t{-1}}, {"output_num", int64_t{4}}}, {f64({2, 6, 4}, 10)}});
  // Nothing cut (size -1 and the whole size), dim 0 cut, dim 1 cut.
  cases.push_back({"Slice", {{"begin", V{0, 0}}, {"size", V{-1, 4}}}, {f64({6, 4}, 11)}});
  cases.push_back({"Slice", {{"begin", V{2, 0}}, {"size", V{3, -1}}}, {f64({6, 4}, 12)}});
  cases.push_back({"Slice", {{"begin", V{0, 1, 0}}, {"size", V{6, 2, 2}}}, {f64({6, 4, 2}, 13)}});
  auto strided = [](V begin, V end, V strides, int64_t begin_mask = 0, int64_t end_mask = 0,
                    int64_t shrink = 0) {
    return ir::Attrs{{"begin", std::move(begin)},     {"end", std::move(end)},
                     {"strides", std::move(strides)}, {"begin_mask", begin_mask},
                     {"end_mask", end_mask},          {"shrink_axis_mask", shrink}};
  };
  cases.push_back({"StridedSlice", strided({0, 0}, {6, 4}, {1, 1}), {f64({6, 4}, 14)}});
  // Dim 0 strided, dim 1 whole through end_mask.
  cases.push_back({"StridedSlice", strided({1, 0}, {5, 0}, {2, 1}, 0, 2), {f64({6, 4}, 15)}});
  // Negative bounds: dim 0 whole (-6 to 6), dim 1 cut (to -1); dim 2 past the given entries.
  cases.push_back({"StridedSlice", strided({-6, 0}, {6, -1}, {1, 1}), {f64({6, 4, 2}, 16)}});
  // Dim 0 reversed whole.
  cases.push_back({"StridedSlice", strided({0, 0}, {0, 4}, {-1, 1}, 1, 1), {f64({6, 4}, 17)}});
  // Dim 0 shrunk away.
  cases.push_back({"StridedSlice", strided({1}, {2}, {1}, 0, 0, 1), {f64({2, 6, 4}, 18)}});
  cases.push_back({"SliceGrad", {{"begin", V{2, 0}}, {"shape", V{6, 4}}}, {f64({3, 4}, 19)}});
  cases.push_back({"SliceGrad", {{"begin", V{0, 0}}, {"shape", V{6, 4}}}, {f64({6, 4}, 20)}});
  {
    ir::Attrs a = strided({1, 0}, {5, 4}, {2, 1});
    a.set("shape", V{6, 4});
    cases.push_back({"StridedSliceGrad", a, {f64({2, 4}, 21)}});
  }
  {
    ir::Attrs a = strided({1}, {2}, {1}, 0, 0, 1);
    a.set("shape", V{2, 6, 4});
    cases.push_back({"StridedSliceGrad", a, {f64({6, 4}, 22)}});
  }
  return cases;
}

TEST(OpSharding, SliceOpsEqualOneDevice) { testing::expect_all_equal_one_device(slice_cases()); }

// ---- invalid strategies ----

TEST(OpShardingErrors, ConcatNamesTheConcatAxis) {
  const OpCase c{"Concat", {{"axis", int64_t{1}}}, {f64({6, 2}, 1), f64({6, 4}, 2)}};
  const std::string op = "Concat '";
  expect_plan_error(c, {{1, 2}, {1, 2}}, 4,
                    {op, "strategy ((1, 2), (1, 2))", "(6, 2), (6, 4)", "on 4 devices",
                     "input 0 dim 1 is split 2 ways, but it is the concat axis, which cannot be "
                     "split; expected 1"});
  expect_plan_error(c, {{4, 1}, {4, 1}}, 4,
                    {op, "strategy ((4, 1), (4, 1))",
                     "input 0 dim 0 has size 6, which 4 ways "
                     "do not divide; a split of it must be one of 1, 2, 3, 6"});
  expect_plan_error(c, {{2, 1}, {3, 1}}, 6,
                    {op, "strategy ((2, 1), (3, 1))",
                     "input 1 dim 0 is split 3 ways but input 0 "
                     "dim 0 is split 2 ways; they must match (dim 0, which every input shares)"});
  expect_plan_error(c, {{3, 1}, {3, 1}}, 4,
                    {op, "it uses 3 devices (3), which does not divide device_num 4"});
  // Entry counts are checked by Primitive when the call is traced, before any rule.
  expect_plan_error(c, {{2, 1}}, 2,
                    {"Concat: strategy ((2, 1))", "but the op was called with 2 inputs"});
  expect_plan_error(c, {{2, 1}, {2}}, 2,
                    {"Concat: strategy ((2, 1), (2))",
                     "gives input 1 1 split but the input has "
                     "shape (6, 4) (rank 2); expected one split per dimension"});
}

TEST(OpShardingErrors, SliceNamesTheCutDimension) {
  const OpCase c{"Slice", {{"begin", V{2, 0}}, {"size", V{3, -1}}}, {f64({6, 4}, 3)}};
  const std::string op = "Slice '";
  expect_plan_error(c, {{3, 1}}, 3,
                    {op, "strategy ((3, 1))", "input of shape (6, 4) on 3 devices",
                     "input 0 dim 0 is split 3 ways, but it is a dimension the slice cuts (begin "
                     "2, size 3 of 6), which cannot be split; expected 1"});
  expect_plan_error(c, {{1, 3}}, 3, {op, "input 0 dim 1 has size 4, which 3 ways do not divide"});
  expect_plan_error(c, {{1, 4}}, 6,
                    {op,
                     "it uses 4 devices (4), which does not divide "
                     "device_num 6"});
  expect_plan_error(c, {{1, 2}, {1, 2}}, 2,
                    {"Slice: strategy ((1, 2), (1, 2)) has 2 entries; expected one per input (1)"});
  expect_plan_error(c, {{1, 2, 1}}, 2,
                    {"Slice: strategy ((1, 2, 1)) gives input 0 3 splits but the input has shape "
                     "(6, 4) (rank 2)"});
  const OpCase s{"StridedSlice",
                 {{"begin", V{0, 0}},
                  {"end", V{0, 4}},
                  {"strides", V{-1, 1}},
                  {"begin_mask", int64_t{1}},
                  {"end_mask", int64_t{1}}},
                 {f64({6, 4}, 4)}};
  expect_plan_error(s, {{2, 1}}, 2,
                    {"StridedSlice '",
                     "input 0 dim 0 is split 2 ways, but it is a dimension "
                     "the strided slice reverses (stride -1), which cannot be split"});
  const OpCase negative{"StridedSlice",
                        {{"begin", V{-6, 0}}, {"end", V{6, -1}}, {"strides", V{1, 1}}},
                        {f64({6, 4, 2}, 5)}};
  EXPECT_EQ(plan_error(negative, {{3, 1, 2}}, 6), "");  // dims 0 and 2 are whole
  expect_plan_error(negative, {{1, 2, 1}}, 2,
                    {"StridedSlice '",
                     "input 0 dim 1 is split 2 ways, but it is a dimension the "
                     "strided slice cuts (elements [0, 3) of 4)"});
  ir::Attrs shrink{{"begin", V{1}},
                   {"end", V{2}},
                   {"strides", V{1}},
                   {"shrink_axis_mask", int64_t{1}},
                   {"shape", V{2, 6, 4}}};
  const OpCase grad{"StridedSliceGrad", shrink, {f64({6, 4}, 6)}};
  EXPECT_EQ(plan_error(grad, {{6, 1}}, 6), "");
  const OpCase slice_grad{"SliceGrad", {{"begin", V{2, 0}}, {"shape", V{6, 4}}}, {f64({3, 4}, 7)}};
  expect_plan_error(slice_grad, {{3, 1}}, 3,
                    {"SliceGrad '", "input of shape (3, 4) on 3 devices",
                     "input 0 dim 0 is split 3 "
                     "ways, but it is a dimension the forward Slice cuts (begin 2, size 3 of 6)"});
}

}  // namespace
}  // namespace cleave

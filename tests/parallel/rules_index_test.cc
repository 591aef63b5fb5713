// The Gather, OneHot and UnsortedSegmentSum rules (src/parallel/rules/index.cc): every valid
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

Tensor i32(const std::vector<int32_t>& values, const Shape& shape) {
  return Tensor::from_vector(values, shape);
}
Tensor i64(const std::vector<int64_t>& values, const Shape& shape) {
  return Tensor::from_vector(values, shape);
}

// Indices of a vocabulary of 12 rows that fall in every rank's rows for a vocabulary split 2, 3,
// 4 and 6 ways, with the last row and repeats (11 and 3 twice).
const std::vector<int32_t> kVocab12 = {11, 0, 3, 3, 5, 6, 8, 9, 11, 1, 7, 10};

std::vector<OpCase> index_cases() {
  std::vector<OpCase> cases;
  cases.push_back({"Gather", {{"axis", int64_t{0}}}, {f64({12, 4}, 30), i32(kVocab12, {2, 6})}});
  cases.push_back({"Gather", {{"axis", int64_t{0}}}, {f64({12, 4}, 31), i32({11}, {})}});
  // Along the last axis; with 4 or 6 slices of the vocabulary some ranks hold none of them.
  std::vector<int64_t> wide(kVocab12.begin(), kVocab12.begin() + 6);
  wide[1] = 11;
  cases.push_back({"Gather", {{"axis", int64_t{-1}}}, {f64({4, 12}, 32), i64(wide, {6})}});
  cases.push_back({"Gather", {{"axis", int64_t{1}}}, {f64({2, 6, 2}, 33), i64({5, 0, 2}, {3})}});
  auto one_hot = [](int64_t depth, int64_t axis) {
    return ir::Attrs{{"depth", depth},
                     {"on_value", 1.0},
                     {"off_value", -0.5},
                     {"axis", axis},
                     {"dtype", DType::kFloat64}};
  };
  cases.push_back({"OneHot", one_hot(4, -1), {i32({3, 0, 1, 3, 2, 2}, {6})}});
  cases.push_back({"OneHot", one_hot(3, 0), {i64({0, 1, 2, 2, 1, 0, 2, 2, 0, 1, 1, 0}, {6, 2})}});
  cases.push_back({"UnsortedSegmentSum",
                   {{"num_segments", int64_t{3}}},
                   {f64({6, 4}, 34), i32({2, 0, 2, 1, 0, 2}, {6})}});
  // Two segmented dimensions, a segment nobody writes (3), a trailing dimension.
  cases.push_back({"UnsortedSegmentSum",
                   {{"num_segments", int64_t{4}}},
                   {f64({6, 2, 2}, 35), i64({0, 2, 2, 1, 0, 0, 1, 2, 2, 2, 1, 0}, {6, 2})}});
  return cases;
}

TEST(OpSharding, IndexOpsEqualOneDevice) { testing::expect_all_equal_one_device(index_cases()); }

// ---- invalid strategies ----

TEST(OpShardingErrors, GatherSplitsMustFitTheTable) {
  const OpCase c{"Gather", {{"axis", int64_t{0}}}, {f64({12, 4}, 5), i32(kVocab12, {2, 6})}};
  const std::string op = "Gather '";
  // A vocabulary split is valid; a split of a dimension that is not the table's is not.
  EXPECT_EQ(plan_error(c, {{4, 1}, {1, 2}}, 8), "");
  expect_plan_error(
      c, {{5, 1}, {1, 1}}, 5,
      {op, "strategy ((5, 1), (1, 1))", "inputs of shapes (12, 4), (2, 6)", "on 5 devices",
       "input 0 dim 0 has size 12, which 5 ways do not divide; a split of it must "
       "be one of 1, 2, 3, 4, 6, 12"});
  expect_plan_error(c, {{1, 3}, {1, 1}}, 3, {op, "input 0 dim 1 has size 4, which 3 ways"});
  expect_plan_error(c, {{4, 1}, {2, 1}}, 4,
                    {op, "it uses 8 devices (4 x 2), which does not divide device_num 4"});
  expect_plan_error(c, {{4, 1}}, 4,
                    {"Gather: strategy ((4, 1)) has 1 entry; expected one per input (2)"});
  expect_plan_error(c, {{4, 1}, {1}}, 4,
                    {"Gather: strategy ((4, 1), (1)) gives input 1 1 split but the input has "
                     "shape (2, 6) (rank 2)"});
  // The segment dimension UnsortedSegmentSum makes is not an input's: its ids must match data.
  const OpCase u{"UnsortedSegmentSum",
                 {{"num_segments", int64_t{3}}},
                 {f64({6, 4}, 6), i32({2, 0, 2, 1, 0, 2}, {6})}};
  expect_plan_error(u, {{2, 1}, {3}}, 6,
                    {"UnsortedSegmentSum '",
                     "input 1 dim 0 is split 3 ways but input 0 dim 0 is "
                     "split 2 ways; they must match (a dimension the segment ids cover)"});
}

}  // namespace
}  // namespace cleave

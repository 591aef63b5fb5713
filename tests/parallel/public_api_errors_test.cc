// The public layout and redistribution API (cleave/parallel/layout.h, redistribution.h) given
// arguments out of range: every call ends in a cleave::Error that says what was expected, never
// an abort (CLEAVE_ASSERT is for cleave's own bugs).
#include <gtest/gtest.h>

#include <functional>
#include <string>
#include <vector>

#include "cleave/core/error.h"
#include "cleave/parallel/layout.h"
#include "cleave/parallel/redistribution.h"

namespace cleave::parallel {
namespace {

// Runs `call` and returns its Error's message; fails the test when it does not throw one.
std::string error_of(const std::function<void()>& call) {
  try {
    call();
  } catch (const Error& e) {
    return e.what();
  }
  ADD_FAILURE() << "no Error";
  return {};
}

void expect_error(const std::function<void()>& call, const std::string& part) {
  const std::string message = error_of(call);
  EXPECT_NE(message.find(part), std::string::npos) << message;
}

TEST(PublicLayoutApi, RanksAndCoordinatesOutOfRangeAreErrors) {
  const DeviceMatrix dev = {2, 2, 2};
  expect_error([&] { rank_to_coordinate(8, dev); },
               "rank_to_coordinate: rank 8 is outside device matrix [2, 2, 2]; expected a rank "
               "in 0..7");
  expect_error([&] { rank_to_coordinate(-1, dev); }, "rank -1 is outside");
  expect_error([&] { rank_to_coordinate(0, {}); }, "the device matrix is empty");
  expect_error([&] { rank_to_coordinate(0, {2, 0}); }, "has an axis of size 0");
  const std::vector<int64_t> short_coordinate = {1, 1};
  expect_error([&] { coordinate_to_rank(short_coordinate, dev); },
               "a coordinate of 2 entries on device matrix [2, 2, 2]; expected 3");
  const std::vector<int64_t> far = {0, 2, 0};
  expect_error([&] { coordinate_to_rank(far, dev); },
               "coordinate 2 on axis 1 of device matrix [2, 2, 2]; expected 0..1");
}

TEST(PublicLayoutApi, RanksAlongABadRankOrAxisAreErrors) {
  const DeviceMatrix dev = {2, 2, 2};
  const std::vector<int> axis0 = {0}, axis3 = {3}, twice = {1, 1}, negative = {-1};
  expect_error([&] { ranks_along(8, dev, axis0); }, "ranks_along: rank 8 is outside");
  expect_error([&] { ranks_along(0, dev, axis3); }, "axis 3 of (3) is outside device matrix");
  expect_error([&] { ranks_along(0, dev, twice); }, "axis 1 of (1, 1) is repeated on");
  expect_error([&] { ranks_along(0, dev, negative); }, "expected distinct axes in 0..2");
  // The valid call still works.
  EXPECT_EQ(ranks_along(5, dev, axis0), (std::vector<int64_t>{1, 5}));
}

TEST(PublicLayoutApi, LayoutsBreakingTheRulesAreErrors) {
  expect_error([] { Layout({}, {}); }, "Layout: the device matrix is empty");
  expect_error([] { Layout({2, 0}, {{0}}); }, "has an axis of size 0");
  // A matrix from a file whose size overflows int64 (fuzz/regressions/strategy_file/): was
  // undefined behaviour in device_count.
  expect_error(
      [] {
        Layout({int64_t{1} << 32, int64_t{1} << 32}, {{0}, {1}});
      },
      "has more than 2147483647 devices");
  expect_error(
      [] {
        device_count({int64_t{1} << 32, int64_t{1} << 32});
      },
      "has more devices than an int64 holds");
  expect_error(
      [] {
        Layout({2, 4}, {{2}});
      },
      "Layout: axis 2 is outside device matrix [2, 4]; expected an axis in 0..1");
  expect_error([] { Layout({2, 4}, {{0}, {0}}); }, "Layout: axis 0 is used twice");
  expect_error([] { Layout({2, 4}, {{0}}, {0}); }, "axis 0 is used twice");
  // Axes out of order are a layout (major first) that redistribution plans like any other
  // (Redistribution.AxesOutOfOrderAreMovedLikeAnyOthers checks the values).
  EXPECT_EQ(plan_redistribution(Layout({2, 4}, {{1, 0}}), Layout({2, 4}, {{0, 1}}), Shape({8}),
                                DType::kFloat32)
                .steps.front()
                .kind,
            parallel::RedistributionStep::Kind::kAllGather);
}

TEST(PublicLayoutApi, SlicesOfADimensionOrRankOutOfRangeAreErrors) {
  const Layout l({2, 4}, {{0}, {1}});
  expect_error([&] { l.splits(2); },
               "Layout::splits: dimension 2 of layout(dev=[2, 4], map=(0, 1)); expected a "
               "dimension in 0..1");
  expect_error([&] { l.slice_index(-1, 0); }, "Layout::slice_index: dimension -1");
  expect_error([&] { l.slice_index(0, 8); }, "Layout::slice_index: rank 8 is outside");
  expect_error(
      [&] {
        l.slice_shape(Shape({6, 6}));
      },
      "cannot lay out a tensor of shape (6, 6): dim 1 of size 6 is split 4 ways");
}

TEST(PublicLayoutApi, RedistributionsBetweenMismatchedLayoutsAreErrors) {
  const Layout on8({8}, {{0}, {}});
  const Layout on4({4}, {{0}, {}});
  expect_error(
      [&] {
        plan_redistribution(on8, on4, Shape({8, 8}), DType::kFloat32);
      },
      "is on 8 devices and layout(dev=[4], map=(0, -1)) on 4; expected the same");
  expect_error([&] { plan_redistribution(on8, on8, Shape({8}), DType::kFloat32); },
               "cannot lay out a tensor of shape (8)");
  expect_error(
      [&] {
        plan_redistribution(on8, on8, Shape({6, 8}), DType::kFloat32);
      },
      "dim 0 of size 6 is split 8 ways");
  const Layout partial({2, 4}, {{}, {}}, {1});
  const Layout other_partial({2, 4}, {{}, {}}, {0});
  expect_error(
      [&] {
        plan_redistribution(partial, other_partial, Shape({4, 4}), DType::kFloat32);
      },
      "is partial over other axes than");
  // Axis 0 of [2, 2] is not axis 0 of [4] (fuzz/regressions/planner/): the numbers matched, the
  // plan search then found no plan and aborted with an internal error.
  const Layout partial_of_two({2, 2}, {}, {0});
  const Layout partial_of_four({4}, {}, {0});
  expect_error(
      [&] { plan_redistribution(partial_of_two, partial_of_four, Shape(), DType::kFloat32); },
      "is partial over other axes than");
  // The same partial axes with another reduction (fuzz/regressions/planner/): was an internal
  // error ("no redistribution from ...") that aborted the process.
  const Layout partial_max({3, 5}, {{0}}, {1}, PartialOp::kMax);
  const Layout partial_sum({3, 5}, {{}}, {1}, PartialOp::kSum);
  expect_error([&] { plan_redistribution(partial_max, partial_sum, Shape({3}), DType::kFloat32); },
               "holds pending sum reductions but layout(dev=[3, 5], map=(0,), partial_max=(1)) "
               "holds pending max ones");
  UnifiedMatrix unified;
  expect_error(
      [&] {
        unify_device_matrices({2, 4}, {3}, unified);
      },
      "have different device counts (8 and 3)");
}

}  // namespace
}  // namespace cleave::parallel

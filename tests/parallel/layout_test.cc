// Layout::same_distribution against its definition (the normalized layouts are equal), on random
// layouts and on pairs that differ only by axes of size 1.
#include "cleave/parallel/layout.h"

#include <gtest/gtest.h>

#include <random>

namespace cleave::parallel {
namespace {

// A random valid layout: 1 to 5 axes of size 1 to 3, each splitting one of `rank` dimensions
// (ascending within a dimension), partial, or unused.
Layout random_layout(std::mt19937& rng, int64_t rank) {
  const int axes = 1 + static_cast<int>(rng() % 5);
  DeviceMatrix dev;
  std::vector<Layout::DimAxes> map(static_cast<size_t>(rank));
  std::vector<int> partial;
  for (int a = 0; a < axes; ++a) {
    dev.push_back(1 + static_cast<int64_t>(rng() % 3));
    const unsigned use = rng() % 4;
    if (use == 0) {
      partial.push_back(a);
    } else if (use < 3 || rank == 0) {
      if (rank > 0) map[rng() % static_cast<unsigned>(rank)].push_back(a);
    }
  }
  return Layout(dev, map, partial, rng() % 2 == 0 ? PartialOp::kSum : PartialOp::kMax);
}

// `l` with an axis of size 1 inserted before axis `at` (the others renumbered).
Layout with_unit_axis(const Layout& l, int at) {
  DeviceMatrix dev = l.device_matrix();
  dev.insert(dev.begin() + at, 1);
  auto shift = [at](int a) { return a >= at ? a + 1 : a; };
  std::vector<Layout::DimAxes> map = l.tensor_map();
  for (auto& axes : map) {
    for (int& a : axes) a = shift(a);
  }
  std::vector<int> partial = l.partial();
  for (int& a : partial) a = shift(a);
  return Layout(dev, map, partial, l.partial_op());
}

TEST(Layout, SameDistributionIsEqualityOfTheNormalizedLayouts) {
  std::mt19937 rng(11);
  int same = 0, different = 0;
  for (int trial = 0; trial < 20000; ++trial) {
    const int64_t rank = static_cast<int64_t>(rng() % 4);
    const Layout a = random_layout(rng, rank);
    Layout b = random_layout(rng, rank);
    if (trial % 2 == 0) {  // often the same distribution, written otherwise
      b = a;
      for (int k = static_cast<int>(rng() % 3); k > 0; --k) {
        b = with_unit_axis(b, static_cast<int>(rng() % (b.device_matrix().size() + 1)));
      }
    }
    const bool expected = a.normalized() == b.normalized();
    ASSERT_EQ(a.same_distribution(b), expected) << a.to_string() << " vs " << b.to_string();
    ASSERT_EQ(b.same_distribution(a), expected) << b.to_string() << " vs " << a.to_string();
    ++(expected ? same : different);
  }
  EXPECT_GT(same, 5000);
  EXPECT_GT(different, 5000);
  // A partial layout and its completion differ; so do two partial ops.
  const Layout p({2, 2}, {{0}}, {1}, PartialOp::kSum);
  EXPECT_FALSE(p.same_distribution(p.completed()));
  EXPECT_FALSE(p.same_distribution(Layout({2, 2}, {{0}}, {1}, PartialOp::kMax)));
  EXPECT_TRUE(Layout({2, 1}, {{0}}, {1}, PartialOp::kMax).same_distribution(Layout({2}, {{0}})));
}

}  // namespace
}  // namespace cleave::parallel

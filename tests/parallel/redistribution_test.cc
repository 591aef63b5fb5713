// Layouts and redistribution plans: every pair of layouts of 2-D and 3-D tensors on 1, 2, 3, 4, 6
// and 8 devices, each plan simulated step by step over every rank's slice; known cheapest plans.
#include "cleave/parallel/redistribution.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <gtest/gtest.h>

#include <functional>

#include "cleave/cleave.h"
#include "testing/gradcheck.h"

namespace cleave {
namespace {

using parallel::DeviceMatrix;
using parallel::Layout;
using parallel::RedistributionPlan;
using parallel::RedistributionStep;
using Kind = RedistributionStep::Kind;

TEST(Layout, RankToCoordinateIsRowMajorLastAxisFastest) {
  EXPECT_EQ(parallel::rank_to_coordinate(5, {2, 4}), (std::vector<int64_t>{1, 1}));
  EXPECT_EQ(parallel::rank_to_coordinate(6, {2, 4, 1}), (std::vector<int64_t>{1, 2, 0}));
  EXPECT_EQ(parallel::ranks_along(5, {2, 4}, std::vector<int>{1}),
            (std::vector<int64_t>{4, 5, 6, 7}));
  EXPECT_EQ(parallel::ranks_along(5, {2, 4}, std::vector<int>{0}), (std::vector<int64_t>{1, 5}));
  EXPECT_EQ(parallel::ranks_along(3, {2, 3}, std::vector<int>{0, 1}),
            (std::vector<int64_t>{0, 1, 2, 3, 4, 5}));
}

TEST(Layout, SeedThreeMatMulSlicesAndGroups) {
  // MatMul ((2, 4), (4, 1)) on 8 devices: A (16, 32) over [2, 4, 1] with map (0, 1).
  const Layout a({2, 4, 1}, {{0}, {1}});
  EXPECT_EQ(a.slice_shape(Shape{16, 32}), Shape({8, 8}));
  EXPECT_EQ(a.slice_offset(Shape{16, 32}, 6), (std::vector<int64_t>{8, 16}));
  const Layout b({2, 4, 1}, {{1}, {}});  // B (32, 16): replicated over axis 0
  EXPECT_EQ(b.replica_axes(), (std::vector<int>{0, 2}));
  EXPECT_EQ(b.replicas(), 2);
  const Layout out({2, 4, 1}, {{0}, {2}}, {1});  // pending sums over axis 1
  EXPECT_EQ(out.to_string(), "layout(dev=[2, 4, 1], map=(0, 2), partial=(1))");
  EXPECT_EQ(out.normalized().to_string(), "layout(dev=[2, 4], map=(0, -1), partial=(1))");
  EXPECT_EQ(Layout({2, 4}, {{0, 1}, {}}).to_string(), "layout(dev=[2, 4], map=((0, 1), -1))");
  EXPECT_EQ(Layout({6}, {{0}, {}}).check_shape(Shape{8, 2}), "dim 0 of size 8 is split 6 ways");
}

TEST(Layout, UnifiesDeviceMatricesThatRefineEachOther) {
  parallel::UnifiedMatrix u;
  ASSERT_TRUE(parallel::unify_device_matrices({8}, {2, 4}, u));
  EXPECT_EQ(u.dev, (DeviceMatrix{2, 4}));
  EXPECT_EQ(u.a_axes, (std::vector<std::vector<int>>{{0, 1}}));
  ASSERT_TRUE(parallel::unify_device_matrices({4, 2}, {2, 4}, u));
  EXPECT_EQ(u.dev, (DeviceMatrix{2, 2, 2}));
  EXPECT_EQ(u.a_axes, (std::vector<std::vector<int>>{{0, 1}, {2}}));
  EXPECT_EQ(u.b_axes, (std::vector<std::vector<int>>{{0}, {1, 2}}));
  EXPECT_FALSE(parallel::unify_device_matrices({2, 3}, {3, 2}, u));
}

// ---- simulation of a plan over every rank ----

// Every rank's local value; the step semantics of NOTE [Redistribution], written again here from
// the collectives' definitions (not from layouts).
using Locals = std::vector<Tensor>;

Tensor block(const Tensor& t, int64_t dim, int64_t parts, int64_t index) {
  std::vector<int64_t> size = t.shape().dims(), begin(size.size(), 0);
  size[static_cast<size_t>(dim)] /= parts;
  begin[static_cast<size_t>(dim)] = index * size[static_cast<size_t>(dim)];
  return ops::slice(t, begin, size);
}

Locals simulate(const RedistributionStep& s, const Locals& in) {
  const int64_t n_ranks = static_cast<int64_t>(in.size());
  Locals out(in.size());
  for (int64_t r = 0; r < n_ranks; ++r) {
    const std::vector<int64_t> group = parallel::ranks_along(r, s.dev, s.axes);
    const int64_t n = static_cast<int64_t>(group.size());
    const int64_t me = std::find(group.begin(), group.end(), r) - group.begin();
    std::vector<Tensor> members;
    for (int64_t q : group) members.push_back(in[static_cast<size_t>(q)]);
    auto sum = [&] {
      Tensor acc = members[0];
      for (size_t i = 1; i < members.size(); ++i) acc = ops::add(acc, members[i]);
      return acc;
    };
    switch (s.kind) {
      case Kind::kAllReduce:
        out[static_cast<size_t>(r)] = sum();
        break;
      case Kind::kReduceScatter:
        out[static_cast<size_t>(r)] = block(sum(), s.dim, n, me);
        break;
      case Kind::kAllGather:
        out[static_cast<size_t>(r)] = ops::concat(members, s.dim);
        break;
      case Kind::kAllToAll: {
        std::vector<Tensor> received;
        for (const Tensor& m : members) received.push_back(block(m, s.dim, n, me));
        out[static_cast<size_t>(r)] = ops::concat(received, s.concat_dim);
        break;
      }
      case Kind::kSlice: {
        const int axis = s.axes[0];
        out[static_cast<size_t>(r)] =
            block(in[static_cast<size_t>(r)], s.dim, s.dev[static_cast<size_t>(axis)],
                  parallel::rank_to_coordinate(r, s.dev)[static_cast<size_t>(axis)]);
        break;
      }
    }
  }
  return out;
}

Tensor slice_of(const Tensor& global, const Layout& l, int64_t rank) {
  return ops::slice(global, l.slice_offset(global.shape(), rank),
                    l.slice_shape(global.shape()).dims());
}

// Each rank's value under `l`: its slice, and for a partial layout a share of it (random weights
// summing to one over the partial group).
Locals lay_out(const Tensor& global, const Layout& l) {
  const int64_t n = l.num_devices();
  Locals out;
  for (int64_t r = 0; r < n; ++r) {
    Tensor s = slice_of(global, l, r);
    if (l.is_partial()) {
      const std::vector<int64_t> group = parallel::ranks_along(r, l.device_matrix(), l.partial());
      const double weight = 1.0 / static_cast<double>(group.size()) +
                            (r == group.front() ? 0.25 : 0.0) - (r == group.back() ? 0.25 : 0.0);
      s = ops::mul(s, weight);
    }
    out.push_back(s);
  }
  return out;
}

// Every device matrix of n devices (ordered factorizations into factors > 1; [1] for one).
std::vector<DeviceMatrix> matrices(int64_t n) {
  if (n == 1) return {{1}};
  std::vector<DeviceMatrix> out;
  std::function<void(int64_t, DeviceMatrix&)> walk = [&](int64_t rest, DeviceMatrix& m) {
    if (rest == 1) {
      out.push_back(m);
      return;
    }
    for (int64_t f = 2; f <= rest; ++f) {
      if (rest % f != 0) continue;
      m.push_back(f);
      walk(rest / f, m);
      m.pop_back();
    }
  };
  DeviceMatrix m;
  walk(n, m);
  return out;
}

// Every layout of a tensor of rank `rank` on every matrix of n devices: each axis splits one
// dimension, holds replicas, or (with `partial`) holds pending sums.
std::vector<Layout> layouts(int64_t n, int64_t rank, bool partial) {
  std::vector<Layout> out;
  for (const DeviceMatrix& dev : matrices(n)) {
    const int64_t choices = rank + 1 + (partial ? 1 : 0);
    int64_t total = 1;
    for (size_t a = 0; a < dev.size(); ++a) total *= choices;
    for (int64_t code = 0; code < total; ++code) {
      std::vector<Layout::DimAxes> map(static_cast<size_t>(rank));
      std::vector<int> partial_axes;
      int64_t rest = code;
      for (size_t a = 0; a < dev.size(); ++a) {
        const int64_t c = rest % choices;
        rest /= choices;
        if (dev[a] == 1) continue;
        if (c < rank) map[static_cast<size_t>(c)].push_back(static_cast<int>(a));
        if (c == rank + 1) partial_axes.push_back(static_cast<int>(a));
      }
      out.emplace_back(dev, std::move(map), std::move(partial_axes));
    }
  }
  return out;
}

// `global` moved from `from` to `to` on n ranks by its plan: every rank ends with its slice of
// `to`, and the plan's cost form (planned and cached apart) has the plan's steps. Returns the
// plan.
const RedistributionPlan& check_plan(const Tensor& global, const Layout& from, const Layout& to,
                                     int64_t n) {
  const Shape& shape = global.shape();
  const RedistributionPlan& plan = parallel::plan_redistribution(from, to, shape, DType::kFloat64);
  const parallel::RedistributionCost& cost =
      parallel::redistribution_cost(from, to, shape, DType::kFloat64);
  EXPECT_EQ(cost.steps.size(), plan.steps.size()) << plan.to_string();
  EXPECT_EQ(cost.bytes, plan.bytes);
  for (size_t i = 0; i < plan.steps.size() && i < cost.steps.size(); ++i) {
    const RedistributionStep& s = plan.steps[i];
    EXPECT_EQ(cost.steps[i].kind, s.kind) << plan.to_string();
    EXPECT_EQ(cost.steps[i].bytes, s.bytes) << plan.to_string();
    EXPECT_EQ(cost.steps[i].group,
              static_cast<int64_t>(parallel::ranks_along(0, s.dev, s.axes).size()))
        << plan.to_string();
  }
  Locals now = lay_out(global, from);
  for (const RedistributionStep& s : plan.steps) now = simulate(s, now);
  for (int64_t r = 0; r < n; ++r) {
    EXPECT_TRUE(
        testing::all_close(now[static_cast<size_t>(r)], slice_of(global, to, r), 1e-12, 1e-12))
        << from.to_string() << " -> " << to.to_string() << " via " << plan.to_string() << ", rank "
        << r;
  }
  return plan;
}

void check_every_pair(int64_t rank, bool alltoall = true) {
  const parallel::AllToAllScope scope(alltoall);
  const Shape shape = rank == 2 ? Shape{24, 24} : Shape{24, 24, 24};
  const Tensor global = testing::random_f64(shape, -1, 1, 3);
  int pairs = 0;
  for (int64_t n : {1, 2, 3, 4, 6, 8}) {
    const std::vector<Layout> sources = layouts(n, rank, true);
    const std::vector<Layout> targets = layouts(n, rank, false);
    for (const Layout& from : sources) {
      for (const Layout& to : targets) {
        const RedistributionPlan& plan = check_plan(global, from, to, n);
        for (const RedistributionStep& s : plan.steps) {
          ASSERT_TRUE(alltoall || s.kind != Kind::kAllToAll) << plan.to_string();
        }
        ++pairs;
      }
    }
  }
  ::testing::Test::RecordProperty("pairs", pairs);
  EXPECT_GT(pairs, 1000);
}

TEST(Redistribution, EveryPairOf2DLayoutsGivesEveryRankItsSlice) { check_every_pair(2); }
TEST(Redistribution, EveryPairOf3DLayoutsGivesEveryRankItsSlice) { check_every_pair(3); }
TEST(Redistribution, WithoutAlltoAllEveryPairStillGivesEveryRankItsSlice) {
  check_every_pair(2, false);
}

TEST(Redistribution, AxesOutOfOrderAreMovedLikeAnyOthers) {
  // Named layouts may list a dimension's axes in any order (NOTE [Named layouts]): every 2-D
  // layout with such a dimension, to and from every other layout, gives each rank its slice.
  const Shape shape{24, 24};
  const Tensor global = testing::random_f64(shape, -1, 1, 5);
  int pairs = 0;
  for (int64_t n : {4, 6, 8}) {
    std::vector<Layout> reordered;
    for (const Layout& l : layouts(n, 2, true)) {
      std::vector<Layout::DimAxes> map = l.tensor_map();
      bool changed = false;
      for (Layout::DimAxes& axes : map) {
        if (axes.size() < 2) continue;
        std::reverse(axes.begin(), axes.end());
        changed = true;
      }
      if (changed) reordered.emplace_back(l.device_matrix(), map, l.partial());
    }
    ASSERT_FALSE(reordered.empty());
    const std::vector<Layout> others = layouts(n, 2, false);
    for (const Layout& odd : reordered) {
      std::vector<std::pair<Layout, Layout>> cases;
      for (const Layout& other : others) {
        cases.emplace_back(odd, other);
        if (!odd.is_partial()) cases.emplace_back(other, odd);
      }
      for (const Layout& other : reordered) {
        if (!other.is_partial()) cases.emplace_back(odd, other);
      }
      for (const auto& [from, to] : cases) {
        check_plan(global, from, to, n);
        ++pairs;
      }
    }
  }
  EXPECT_GT(pairs, 1000);
}

// The plan search holds a layout in a few bytes (NOTE [Packed search layouts]): 32 dimensions
// and 32 device axes of size > 1 at most, and an Error beyond.
TEST(Redistribution, TensorsOfMoreThan32DimensionsAreAnError) {
  std::vector<int64_t> dims(33, 1);
  dims[0] = 2;
  std::vector<Layout::DimAxes> split(33);
  split[0] = {0};
  EXPECT_ERROR(parallel::plan_redistribution(Layout::replicated({2}, 33), Layout({2}, split),
                                             Shape(dims), DType::kFloat32),
               "33 dimensions", "expected at most 32");
  dims.pop_back();
  split.pop_back();
  EXPECT_EQ(parallel::plan_redistribution(Layout::replicated({2}, 32), Layout({2}, split),
                                          Shape(dims), DType::kFloat32)
                .to_string(),
            "Slice(dim 0 over axis 0)");
}

// The cheapest plans of NOTE [Redistribution], from layout text to plan text, for a (16, 32)
// Float32 tensor unless a case names another shape.
TEST(Redistribution, KnownCheapestPlans) {
  const struct {
    const char* from;
    const char* to;
    const char* plan;
    Shape shape = Shape{16, 32};
  } cases[] = {
      // Replicated -> split: a local slice, nothing sent.
      {"layout(dev=[8], map=(-1, -1))", "layout(dev=[8], map=(0, -1))", "Slice(dim 0 over axis 0)"},
      // Split -> replicated: one AllGather.
      {"layout(dev=[8], map=(0, -1))", "layout(dev=[8], map=(-1, -1))",
       "AllGather(dim 0 over axes (0))"},
      // Pending sums -> replicated: one AllReduce; -> split on dim 0: one ReduceScatter.
      {"layout(dev=[8], map=(-1, -1), partial=(0))", "layout(dev=[8], map=(-1, -1))",
       "AllReduce(sum over axes (0))"},
      {"layout(dev=[8], map=(-1, -1), partial=(0))", "layout(dev=[8], map=(0, -1))",
       "ReduceScatter(dim 0 over axis 0)"},
      // Moving a split from dim 0 to dim 1 on the same devices: one AlltoAll.
      {"layout(dev=[4], map=(0, -1))", "layout(dev=[4], map=(-1, 0))",
       "AlltoAll(axis 0: dim 0 -> dim 1)"},
      // Seed 003: a data-parallel input ([8], dim 0) to MatMul's ((2, 4), ...) on [2, 4, 1]: the
      // minor part of dim 0's split moves to dim 1, one AlltoAll over 4 ranks (axis 1 of [2, 4]).
      {"layout(dev=[8], map=(0, -1))", "layout(dev=[2, 4, 1], map=(0, 1))",
       "AlltoAll(axis 1: dim 0 -> dim 1)"},
      // Slicing before gathering: dim 0 over 2 -> dim 1 over 4 on [2, 4]: slice dim 1 first, then
      // gather dim 0 on the smaller slice.
      {"layout(dev=[2, 4], map=(0, -1))", "layout(dev=[2, 4], map=(-1, 1))",
       "Slice(dim 1 over axis 1) -> AllGather(dim 0 over axes (0))"},
      // No common device matrix ([2, 3] and [3, 2] on 6 devices): through the replicated tensor.
      {"layout(dev=[2, 3], map=(0, -1))", "layout(dev=[3, 2], map=(0, -1))",
       "AllGather(dim 0 over axes (0)) -> Slice(dim 0 over axis 0)", Shape{6, 6}},
  };
  for (const auto& c : cases) {
    EXPECT_EQ(parallel::plan_redistribution(Layout::parse(c.from), Layout::parse(c.to), c.shape,
                                            DType::kFloat32)
                  .to_string(),
              c.plan)
        << c.from << " -> " << c.to;
  }
  // A slice sends nothing; a ReduceScatter half what an AllReduce sends.
  auto bytes = [](const char* from, const char* to) {
    return parallel::plan_redistribution(Layout::parse(from), Layout::parse(to), Shape{16, 32},
                                         DType::kFloat32)
        .bytes;
  };
  EXPECT_EQ(bytes(cases[0].from, cases[0].to), 0);
  EXPECT_EQ(2 * bytes(cases[3].from, cases[3].to), bytes(cases[2].from, cases[2].to));
}

}  // namespace
}  // namespace cleave

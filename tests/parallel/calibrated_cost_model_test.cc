// The calibrated cost model (cleave/parallel/calibrated_cost_model.h): it passes through the
// profile's measured points, is monotone in flops, bytes and group size, is latency-bound for
// small work, and composes an op's cost and a redistribution's from them. No timings: the
// figures come from profiles, never from a clock.
#include "cleave/parallel/calibrated_cost_model.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <limits>
#include <string>
#include <vector>

#include "cleave/core/error.h"
#include "cleave/ir/registry.h"
#include "cleave/parallel/redistribution.h"
#include "testing/gradcheck.h"

namespace cleave::parallel {
namespace {

using CC = ShardingRule::ComputeClass;
constexpr Collective kAll[] = {Collective::kAllReduce, Collective::kAllGather,
                               Collective::kReduceScatter, Collective::kAllToAll,
                               Collective::kBroadcast};

// Points of time = latency + bytes / bandwidth, exactly, at group sizes 2, 4 and 8.
MachineProfile exact_profile() {
  MachineProfile p;
  p.machine = this_machine();
  p.machine.backends = {"shm"};
  ComputeTable t1;
  t1.threads = 1;
  t1.matmul = {{"small", "a", 1e4, 1e9}, {"medium", "b", 1e7, 2e10}, {"large", "c", 1e9, 4e10}};
  t1.convolution = {{"small", "a", 1e5, 5e8}, {"large", "b", 1e9, 2e10}};
  t1.memory = {{"small", "a", 3e3, 1e9}, {"large", "b", 1e7, 8e9}};
  ComputeTable t4 = t1;
  t4.threads = 4;
  for (auto& pt : t4.matmul) pt.rate *= 3;
  p.compute = {t1, t4};
  BackendProfile b;
  b.measured = true;
  b.ranks = "threads";
  for (Collective c : kAll) {
    for (int64_t n : {2, 4, 8}) {
      CollectiveFit f{n, 5e-6 * static_cast<double>(n - 1), 4e9 / static_cast<double>(n), {}};
      for (double bytes : {1e3, 1e5, 1e7}) {
        f.points.push_back({bytes, f.latency_s + bytes / f.bandwidth_bytes_per_s});
      }
      b.collectives[c].push_back(f);
    }
  }
  p.backends["shm"] = b;
  p.backends["gloo"].reason = "not measured in this test";
  p.backends["mpi"].reason = "not launched by mpirun";
  p.backends["nccl"].reason = "no GPU";
  return p;
}

TEST(CalibratedCostModel, PassesThroughTheMeasuredComputePoints) {
  const MachineProfile p = exact_profile();
  const CalibratedCostModel m(p);
  EXPECT_EQ(m.threads(), 1);
  for (const ComputePoint& pt : p.compute[0].matmul) {
    EXPECT_NEAR(m.compute_s(CC::kMatMul, pt.work, 0), pt.work / pt.rate, 1e-12 * pt.work / pt.rate);
  }
  for (const ComputePoint& pt : p.compute[0].convolution) {
    EXPECT_DOUBLE_EQ(m.compute_s(CC::kConvolution, pt.work, 0), pt.work / pt.rate);
  }
  for (const ComputePoint& pt : p.compute[0].memory) {
    EXPECT_DOUBLE_EQ(m.compute_s(CC::kMemory, 0, pt.work), pt.work / pt.rate);
  }
  // Beyond the largest point: its rate.
  EXPECT_DOUBLE_EQ(m.compute_s(CC::kMatMul, 3e9, 0), 1e9 / 4e10 + 2e9 / 4e10);
  // The table of the thread count asked for (the nearest when not measured).
  const CalibratedCostModel m4(p, {.backend = "shm", .threads = 3});
  EXPECT_EQ(m4.threads(), 4);
  EXPECT_DOUBLE_EQ(m4.compute_s(CC::kMatMul, 1e9, 0), 1e9 / 12e10);
}

TEST(CalibratedCostModel, SmallOpsAreLatencyBound) {
  const CalibratedCostModel m(exact_profile());
  const double floor = 1e4 / 1e9;
  EXPECT_DOUBLE_EQ(m.compute_s(CC::kMatMul, 0, 0), floor);
  EXPECT_DOUBLE_EQ(m.compute_s(CC::kMatMul, 10, 0), floor);
  EXPECT_GT(m.compute_s(CC::kMemory, 0, 1), 0);
  // A matmul reading much memory is bound by it.
  EXPECT_DOUBLE_EQ(m.compute_s(CC::kMatMul, 1e4, 1e7), 1e7 / 8e9);
}

TEST(CalibratedCostModel, CollectivesFollowTheFitAtMeasuredGroupSizes) {
  const MachineProfile p = exact_profile();
  const CalibratedCostModel m(p);
  for (Collective c : kAll) {
    for (const CollectiveFit& f : p.backends.at("shm").collectives.at(c)) {
      for (const CollectivePoint& pt : f.points) {
        EXPECT_NEAR(m.collective_s(c, pt.bytes_sent, f.group_size), pt.seconds, 1e-9 * pt.seconds)
            << collective_key(c) << " n=" << f.group_size;
      }
    }
    EXPECT_EQ(m.collective_s(c, 1e6, 1), 0);
  }
  // Between measured sizes: linear in n; beyond the largest: the latency grows with the steps.
  const double lat3 = 0.5 * (5e-6 + 15e-6), per_byte3 = 0.5 * (2 / 4e9 + 4 / 4e9);
  EXPECT_NEAR(m.collective_s(Collective::kAllReduce, 1e6, 3), lat3 + 1e6 * per_byte3, 1e-15);
  EXPECT_NEAR(m.collective_s(Collective::kAllReduce, 0, 16), 35e-6 * 15 / 7, 1e-15);
}

// Monotone on a grid: compute in flops and bytes, collectives in bytes and group size.
void expect_monotone(const CostModel& m, const std::string& what) {
  for (CC cls : {CC::kMatMul, CC::kConvolution, CC::kMemory}) {
    double prev = 0;
    for (double w = 0; w < 1e13; w = w == 0 ? 1 : w * 1.7) {
      const double s = m.compute_s(cls, w, w / 10);
      EXPECT_GE(s, prev) << what << " class " << static_cast<int>(cls) << " work " << w;
      prev = s;
    }
    EXPECT_GT(m.compute_s(cls, 1e12, 1e11), m.compute_s(cls, 1e9, 1e8)) << what;
  }
  for (Collective c : kAll) {
    for (int64_t n = 2; n <= 64; n = n < 8 ? n + 1 : n * 2) {
      double prev = 0;
      for (double b = 0; b < 1e10; b = b == 0 ? 1 : b * 1.9) {
        const double s = m.collective_s(c, b, n);
        EXPECT_GE(s, prev) << what << " " << collective_key(c) << " n=" << n << " bytes " << b;
        EXPECT_GE(s, m.collective_s(c, b, n - 1)) << what << " " << collective_key(c) << " n=" << n;
        prev = s;
      }
      EXPECT_GT(m.collective_s(c, 1e9, n), m.collective_s(c, 1e3, n)) << what;
    }
  }
}

TEST(CalibratedCostModel, MonotoneInWorkBytesAndGroupSize) {
  expect_monotone(CalibratedCostModel(exact_profile()), "exact profile");
  // Noise that makes a larger point faster, or a larger group cheaper, is flattened.
  MachineProfile noisy = exact_profile();
  noisy.compute[0].matmul[1].rate = 1e12;
  for (auto& [c, fits] : noisy.backends["shm"].collectives) fits[2].latency_s = 1e-7;
  expect_monotone(CalibratedCostModel(noisy), "noisy profile");
  for (const char* backend : {"shm", "gloo"}) {
    expect_monotone(CalibratedCostModel(default_machine_profile(), {.backend = backend}),
                    std::string("default profile, ") + backend);
  }
}

// The shipped profile's model is close to what was measured: compute exactly at its points (or
// the larger time of a smaller point), collectives as close as a two-parameter fit follows a
// measurement on a shared machine (a loop disturbed by another process is slower than the fit
// says): for each backend, the median point within 1.5x of the model, 90% within 2x, none off by
// more than 10x.
TEST(CalibratedCostModel, DefaultProfileModelIsCloseToItsMeasuredPoints) {
  const MachineProfile& p = default_machine_profile();
  for (const char* backend : {"shm", "gloo"}) {
    const CalibratedCostModel m(p, {.backend = backend});
    std::vector<double> errors;  // |log(model / measured)|
    for (const auto& [c, fits] : p.backends.at(backend).collectives) {
      for (const CollectiveFit& f : fits) {
        for (const CollectivePoint& pt : f.points) {
          const double s = m.collective_s(c, pt.bytes_sent, f.group_size);
          errors.push_back(std::abs(std::log(s / pt.seconds)));
          EXPECT_LT(errors.back(), std::log(10.0))
              << backend << " " << collective_key(c) << " n=" << f.group_size << " bytes "
              << pt.bytes_sent << ": model " << s << " s, measured " << pt.seconds << " s";
        }
      }
    }
    ASSERT_FALSE(errors.empty()) << backend;
    std::sort(errors.begin(), errors.end());
    EXPECT_LT(errors[errors.size() / 2], std::log(1.5)) << backend << ": median";
    EXPECT_LT(errors[errors.size() * 9 / 10], std::log(2.0)) << backend << ": 90th percentile";
  }
  for (const ComputeTable& t : p.compute) {
    const CalibratedCostModel m(p, {.backend = "shm", .threads = t.threads});
    double floor = 0;
    for (const ComputePoint& pt : t.matmul) {
      floor = std::max(floor, pt.work / pt.rate);
      EXPECT_NEAR(m.compute_s(CC::kMatMul, pt.work, 0), floor, 1e-9 * floor) << pt.shape;
    }
  }
}

TEST(CalibratedCostModel, UnmeasuredBackendIsAnErrorWithTheReason) {
  try {
    CalibratedCostModel m(exact_profile(), {.backend = "nccl"}, "'p.json'");
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("'p.json' has not measured backend \"nccl\" (no GPU)"),
              std::string::npos)
        << e.what();
  }
  try {
    CalibratedCostModel m(exact_profile(), {.backend = "hccl"});
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("backend \"hccl\" is not in the machine profile"),
              std::string::npos)
        << e.what();
  }
}

TEST(CalibratedCostModel, RanksSharingCoresSlowComputationAndSubgroupCollectives) {
  // NOTE [Ranks sharing cores]: computation times compute_slowdown. NOTE [Collectives of ranks
  // sharing cores]: a collective of n ranks times compute_slowdown / max(1, n / cores), never
  // below its measured time: on the profile's 2 cores, with a job sharing them 2.5 ways, a pair
  // 2.5 times, 4 ranks 1.25 times, 8 ranks (already 4 ways in the calibration) as measured.
  MachineProfile p = exact_profile();
  p.machine.cores = 2;
  const CalibratedCostModel alone(p);
  const CalibratedCostModel shared(p, {.compute_slowdown = 2.5});
  EXPECT_DOUBLE_EQ(shared.compute_slowdown(), 2.5);
  for (double work : {0.0, 1e4, 1e6, 1e9, 3e9}) {
    EXPECT_DOUBLE_EQ(shared.compute_s(CC::kMatMul, work, 1e3),
                     2.5 * alone.compute_s(CC::kMatMul, work, 1e3));
    EXPECT_DOUBLE_EQ(shared.compute_s(CC::kConvolution, work, 0),
                     2.5 * alone.compute_s(CC::kConvolution, work, 0));
    EXPECT_DOUBLE_EQ(shared.compute_s(CC::kMemory, 0, work),
                     2.5 * alone.compute_s(CC::kMemory, 0, work));
  }
  for (Collective c : kAll) {
    for (double bytes : {0.0, 1e3, 1e6}) {
      EXPECT_DOUBLE_EQ(shared.collective_s(c, bytes, 1), 0);
      EXPECT_DOUBLE_EQ(shared.collective_s(c, bytes, 2), 2.5 * alone.collective_s(c, bytes, 2));
      EXPECT_DOUBLE_EQ(shared.collective_s(c, bytes, 4), 1.25 * alone.collective_s(c, bytes, 4));
      EXPECT_DOUBLE_EQ(shared.collective_s(c, bytes, 8), alone.collective_s(c, bytes, 8));
      EXPECT_DOUBLE_EQ(shared.collective_s(c, bytes, 16), alone.collective_s(c, bytes, 16));
    }
  }
  // One model per factor; below 1, or not a number, is an Error naming the field.
  EXPECT_NE(&cost_model_for_profile("", {.compute_slowdown = 2}), &default_cost_model());
  EXPECT_EQ(&cost_model_for_profile("", {.compute_slowdown = 1}), &default_cost_model());
  for (double bad : {0.5, 0.0, -1.0, std::nan(""), std::numeric_limits<double>::infinity()}) {
    EXPECT_ERROR(CalibratedCostModel(p, {.compute_slowdown = bad}), "compute_slowdown is");
    EXPECT_ERROR(cost_model_for_profile("", {.compute_slowdown = bad}), "compute_slowdown is");
  }
}

TEST(CalibratedCostModel, RanksSharingCoresTakeTheMeasuredLatencyOfTheirJobSize) {
  // NOTE [Collectives of ranks sharing cores]: with the job's ranks R = slowdown x cores, a group
  // of n takes the larger of its scaled latency and the shared_cores row of (R, n), or of the
  // nearest measured R (the smaller on a tie); its bytes stay scaled; no row, no change.
  MachineProfile p = exact_profile();
  p.machine.cores = 2;  // latency 5 us x (n - 1); seconds per byte n / 4e9
  p.backends["shm"].shared_cores = {{4, 2, 40e-6}, {4, 4, 50e-6}, {8, 2, 90e-6}, {8, 8, 1e-6}};
  const CalibratedCostModel alone(p);
  const CalibratedCostModel four(p, {.compute_slowdown = 2});   // 4 ranks
  const CalibratedCostModel six(p, {.compute_slowdown = 3});    // 6 ranks: rows of 4 and 8
  const CalibratedCostModel eight(p, {.compute_slowdown = 4});  // 8 ranks
  for (Collective c : kAll) {
    // Alone on the cores, the rows do not apply.
    EXPECT_DOUBLE_EQ(alone.collective_s(c, 0, 2), 5e-6);
    // 4 ranks: a pair 40 us over its scaled 10, plus twice its bytes' time (1e6 x 2 / 4e9).
    EXPECT_DOUBLE_EQ(four.collective_s(c, 0, 2), 40e-6);
    EXPECT_DOUBLE_EQ(four.collective_s(c, 1e6, 2), 40e-6 + 2 * 1e6 * 2 / 4e9);
    EXPECT_DOUBLE_EQ(four.collective_s(c, 1e6, 4), 50e-6 + 1e6 * 4 / 4e9);
    EXPECT_DOUBLE_EQ(four.collective_s(c, 1e6, 8), alone.collective_s(c, 1e6, 8));  // no row
    // 6 ranks: 4 and 8 are as near; the smaller's row.
    EXPECT_DOUBLE_EQ(six.collective_s(c, 0, 2), 40e-6);
    EXPECT_DOUBLE_EQ(six.collective_s(c, 0, 4), 50e-6);
    // 8 ranks: its own pair row; groups of 4 take 4 ranks' row (the only one) over the scaled
    // 15 us x 2; a row below the scaled latency (8 of 8: 1 us against 35) changes nothing.
    EXPECT_DOUBLE_EQ(eight.collective_s(c, 0, 2), 90e-6);
    EXPECT_DOUBLE_EQ(eight.collective_s(c, 0, 4), 50e-6);
    EXPECT_DOUBLE_EQ(eight.collective_s(c, 0, 8), alone.collective_s(c, 0, 8));
  }
}

TEST(CalibratedCostModel, DefaultCostModelIsTheShippedProfilesForOneHost) {
  const auto* m = dynamic_cast<const CalibratedCostModel*>(&default_cost_model());
  ASSERT_NE(m, nullptr);
  EXPECT_EQ(m->backend(), "shm");
  EXPECT_EQ(m->threads(), 1);
  EXPECT_EQ(&cost_model_for_profile(""), &default_cost_model());
  const std::string path = (std::filesystem::temp_directory_path() /
                            ("cleave_model_" + std::to_string(::getpid()) + ".json"))
                               .string();
  save_machine_profile(exact_profile(), path);
  const CostModel& a = cost_model_for_profile(path);
  EXPECT_EQ(&a, &cost_model_for_profile(path));
  EXPECT_DOUBLE_EQ(a.compute_s(CC::kMatMul, 1e9, 0), 1e9 / 4e10);
  std::filesystem::remove(path);
}

// MatMul (64, 128) x (128, 32) on 4 devices.
struct MatMulCase {
  const ir::OpDef& op = ir::Registry::global().get("MatMul");
  ir::Attrs attrs;
  std::vector<ir::TensorMeta> in{{Shape{64, 128}, DType::kFloat32},
                                 {Shape{128, 32}, DType::kFloat32}};
  std::vector<ir::TensorMeta> out{{Shape{64, 32}, DType::kFloat32}};
  RuleContext ctx{op, attrs, in, out, "matmul", "", 4};
  OpSharding infer(const ir::Strategy& s) const { return rule_of(op).infer(ctx, s); }
};

TEST(CalibratedCostModel, MatMulSplitOverItsReductionIncludesTheAllReduce) {
  const CalibratedCostModel m(exact_profile());
  const MatMulCase mm;
  const OpSharding reduce = mm.infer({{1, 4}, {4, 1}});
  const OpSharding batch = mm.infer({{4, 1}, {1, 1}});
  // Each rank holds a partial (64, 32) result: an AllReduce of it over 4 ranks.
  const double partial_bytes = 64 * 32 * 4;
  EXPECT_DOUBLE_EQ(reduce.forward_comm_bytes, 2 * partial_bytes * 3 / 4);
  const OpCost r = m.op_cost(mm.ctx, reduce);
  EXPECT_DOUBLE_EQ(r.comm_s, m.collective_s(Collective::kAllReduce, reduce.forward_comm_bytes, 4));
  EXPECT_GT(r.comm_s, 0);
  EXPECT_DOUBLE_EQ(r.compute_s, m.compute_s(CC::kMatMul, 2.0 * 64 * 128 * 32 / 4, r.memory_bytes));
  EXPECT_DOUBLE_EQ(r.memory_bytes, (64 * 32 + 32 * 32 + 64 * 32) * 4);
  const OpCost b = m.op_cost(mm.ctx, batch);
  EXPECT_EQ(b.comm_s, 0);
  // The partial output's redistribution to a replicated one is that AllReduce.
  const RedistributionPlan& plan = plan_redistribution(
      reduce.outputs[0], reduce.outputs[0].completed(), Shape{64, 32}, DType::kFloat32);
  ASSERT_EQ(plan.steps.size(), 1u) << plan.to_string();
  EXPECT_EQ(plan.steps[0].kind, RedistributionStep::Kind::kAllReduce);
  EXPECT_DOUBLE_EQ(m.redistribution_s(plan), r.comm_s);
  // A local slice costs its copy, no collective.
  const RedistributionPlan& slice = plan_redistribution(
      Layout::parse("layout(dev=[4], map=(-1, -1))"), Layout::parse("layout(dev=[4], map=(0, -1))"),
      Shape{64, 32}, DType::kFloat32);
  ASSERT_EQ(slice.steps.size(), 1u) << slice.to_string();
  EXPECT_DOUBLE_EQ(m.redistribution_s(slice), m.compute_s(CC::kMemory, 0, 0));
}

}  // namespace
}  // namespace cleave::parallel

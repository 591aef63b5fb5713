// Named layouts and out_strategy (NOTE [Named layouts] in cleave/ir/graph.h, NOTE [Output
// targets] in src/parallel/named_layouts.cc): the rank graphs the rewrite makes for them, read
// from IR text without any process; propagation taking a neighbour's axis order; their errors;
// and training with them on thread ranks equals one device.
#include <fmt/ranges.h>
#include <gtest/gtest.h>

#include <mutex>

#include "cleave/cleave.h"
#include "cleave/ir/dump.h"
#include "cleave/ir/parse.h"
#include "cleave/parallel/cost_model.h"
#include "cleave/parallel/propagation.h"
#include "cleave/parallel/redistribution.h"
#include "cleave/parallel/step_parallel.h"
#include "cleave/runtime/sharded_parameters.h"
#include "parallel/seed_net.h"
#include "testing/gradcheck.h"
#include "testing/ranks.h"

namespace cleave {
namespace {

// x (16, 32) @ w (32, 16), then a ReLU; `matmul` and `relu` are the annotations of each op.
std::string forward(const std::string& matmul, const std::string& relu = "") {
  return fmt::format(R"(# IR entry: @net
%para1_x: <Tensor[Float32], (16, 32)> : input
%para2_w: <Tensor[Float32], (32, 16)> : parameter

subgraph @net(%para1_x, %para2_w) {{
  %3(out) = MatMul(%para1_x, %para2_w) {{instance name: matmul}} primitive_attrs: {{transpose_a: false, transpose_b: false}}{}
      : (<Tensor[Float32], (16, 32)>, <Tensor[Float32], (32, 16)>) -> (<Tensor[Float32], (16, 16)>)
      # scope: (Default/network-Net)
  %4(out) = ReLU(%3) {{instance name: relu}}{}
      : (<Tensor[Float32], (16, 16)>) -> (<Tensor[Float32], (16, 16)>)
      # scope: (Default/network-Net)
  return(%4)
}}
)",
                     matmul, relu);
}

using testing::ops_text;

std::string rank_ops(const std::string& text, int64_t rank, int64_t devices = 8,
                     bool propagate = false) {
  ir::Graph g = ir::parse_text(text).graph;
  if (propagate) parallel::propagate_strategies(g, {.device_num = devices});
  const parallel::ParallelPlan plan = parallel::plan_step_parallel(g, {.device_num = devices});
  return ops_text(parallel::materialize(g, plan, rank).graph);
}

TEST(OutStrategy, APartialSumWhoseOutStrategySplitsItsRowsIsReduceScattered) {
  // ((2, 4), (4, 1)): rows over axis 0 (2), the reduction over axis 1 (4). Without an
  // out_strategy the pending sums are all-reduced; with ((8, 1)) the rows take the reduction's
  // axis too, and one ReduceScatter completes and splits them at once.
  const std::string plain = rank_ops(forward(" {in_strategy: ((2, 4), (4, 1))}"), 0);
  EXPECT_NE(plain.find("AllReduce (8, 16) -> (8, 16) over (0, 1, 2, 3)"), std::string::npos)
      << plain;
  const std::string scattered =
      rank_ops(forward(" {in_strategy: ((2, 4), (4, 1))} {out_strategy: ((8, 1))}"), 0);
  EXPECT_EQ(scattered, R"(AlltoAll (2, 32) -> (8, 8) over (0, 1, 2, 3)
MatMul (8, 8) x (8, 16) -> (8, 16)
ReduceScatter (8, 16) -> (2, 16) over (0, 1, 2, 3)
ReLU (2, 16) -> (2, 16)
AllGather (2, 16) -> (16, 16) over (0, 1, 2, 3, 4, 5, 6, 7)
)");
  // An out_strategy splitting less than the op computes gathers; one splitting the columns
  // scatters there.
  const std::string columns =
      rank_ops(forward(" {in_strategy: ((2, 4), (4, 1))} {out_strategy: ((2, 4))}"), 0);
  EXPECT_NE(columns.find("ReduceScatter (8, 16) -> (8, 4) over (0, 1, 2, 3)"), std::string::npos)
      << columns;
  const std::string gathered =
      rank_ops(forward(" {in_strategy: ((8, 1), (1, 1))} {out_strategy: ((2, 1))}"), 0);
  EXPECT_NE(gathered.find("AllGather (2, 16) -> (8, 16) over (0, 1, 2, 3)"), std::string::npos)
      << gathered;
}

// The searches cost an op by CostModel::op_cost of infer_node's sharding: with an out_strategy
// they count the ReduceScatter the rewrite runs (above), not the AllReduce of the pending sums.
TEST(OutStrategy, TheCostIsTheRedistributionTheRewriteRuns) {
  const auto cost_of = [](const std::string& annotations) {
    const ir::Graph g = ir::parse_text(forward(annotations)).graph;
    const ir::Node& n = *std::find_if(g.nodes.begin(), g.nodes.end(),
                                      [](const ir::Node& x) { return x.name == "matmul"; });
    std::vector<ir::TensorMeta> inputs;
    for (const ir::ValueRef& v : n.inputs) inputs.push_back(g.meta(v));
    const parallel::RuleContext ctx{*n.op, n.attrs, inputs, n.outputs, n.name, n.scope, 8};
    const parallel::OpSharding s =
        parallel::infer_node(parallel::rule_of(*n.op), ctx, n, n.strategy);
    return std::make_pair(s.forward_comm_bytes, parallel::ConstantCostModel().op_cost(ctx, s));
  };
  const parallel::ConstantCostModel model;
  // Each rank's pending (8, 16) Float32 sums, 512 bytes, over 4 ranks.
  const auto [reduced_bytes, reduced] = cost_of(" {in_strategy: ((2, 4), (4, 1))}");
  EXPECT_DOUBLE_EQ(reduced_bytes, 2 * 512.0 * 3 / 4);
  EXPECT_DOUBLE_EQ(reduced.comm_s,
                   model.collective_s(parallel::Collective::kAllReduce, reduced_bytes, 4));
  const auto [scattered_bytes, scattered] =
      cost_of(" {in_strategy: ((2, 4), (4, 1))} {out_strategy: ((8, 1))}");
  EXPECT_DOUBLE_EQ(scattered_bytes, 512.0 * 3 / 4);
  EXPECT_DOUBLE_EQ(scattered.comm_s,
                   model.collective_s(parallel::Collective::kReduceScatter, scattered_bytes, 4));
  EXPECT_LT(scattered.comm_s, reduced.comm_s);
  EXPECT_EQ(scattered.compute_s, reduced.compute_s);
  // A target the op already computes costs nothing.
  const auto [same_bytes, same] =
      cost_of(" {in_strategy: ((8, 1), (1, 1))} {out_strategy: ((8, 1))}");
  EXPECT_EQ(same_bytes, 0);
  EXPECT_EQ(same.comm_s, 0);
}

TEST(NamedLayouts, EnableAlltoallOffGathersAndSlices) {
  // The data-parallel batch moving to ((2, 4), ...)'s blocks: one AlltoAll; with
  // enable_alltoall off (MindSpore's default), an AllGather of the rows and a local Slice.
  const std::string text = forward(" {in_strategy: ((2, 4), (4, 1))}");
  EXPECT_EQ(rank_ops(text, 0).substr(0, 45), "AlltoAll (2, 32) -> (8, 8) over (0, 1, 2, 3)\n");
  const parallel::AllToAllScope off(false);
  const std::string ops = rank_ops(text, 0);
  EXPECT_EQ(ops.find("AlltoAll"), std::string::npos) << ops;
  EXPECT_EQ(ops.substr(0, ops.find("MatMul")), R"(AllGather (2, 32) -> (8, 32) over (0, 1, 2, 3)
Slice (8, 32) -> (8, 8)
)");
}

TEST(OutStrategy, MistakesNameTheOpAndWhatWasExpected) {
  ir::Graph g =
      ir::parse_text(forward(" {in_strategy: ((2, 4), (4, 1))} {out_strategy: ((3, 1))}")).graph;
  EXPECT_ERROR(parallel::plan_step_parallel(g, {.device_num = 8}),
               "MatMul 'matmul' (scope Default/network-Net): out_strategy ((3, 1)) splits output "
               "0 into 3 slices, which does not divide the 8 devices");
  g = ir::parse_text(forward(" {in_strategy: ((2, 4), (4, 1))} {out_strategy: ((8))}")).graph;
  EXPECT_ERROR(parallel::plan_step_parallel(g, {.device_num = 8}),
               "out_strategy ((8)) gives output 0 1 split but it has shape (16, 16)");
  g = ir::parse_text(forward(" {in_strategy: ((2, 4), (4, 1))} {out_strategy: ((1, 1), (1, 1))}"))
          .graph;
  EXPECT_ERROR(parallel::plan_step_parallel(g, {.device_num = 8}),
               "out_strategy has 2 entries but the op has 1 output");
  // Primitive::shard checks what it can see.
  ir::Primitive matmul("MatMul");
  EXPECT_ERROR(matmul.shard({{2, 4}, {4, 1}}, {{0, 1}}),
               "MatMul: out_strategy ((0, 1)) splits output 0 into 0 slices; expected >= 1");
}

// dev (2, 2, 2) named (dp, sp, mp); the reduction over sp and mp in `order`.
std::string named_matmul(const std::string& order) {
  return fmt::format(
      " {{in_layouts: (layout(dev=(2, 2, 2), alias=(dp, sp, mp), map=(dp, {0})), "
      "layout(dev=(2, 2, 2), alias=(dp, sp, mp), map=({0}, None)))}}",
      order);
}

TEST(NamedLayouts, TwoAxesOnOneDimensionInDeviceOrderAreTheStrategy) {
  // (dp, (sp, mp)) holds the slices ((2, 4), (4, 1)) holds: the same rank graphs.
  for (int64_t rank : {0, 3, 6}) {
    EXPECT_EQ(rank_ops(forward(named_matmul("(sp, mp)")), rank),
              rank_ops(forward(" {in_strategy: ((2, 4), (4, 1))}"), rank))
        << "rank " << rank;
  }
}

TEST(NamedLayouts, AxesOutOfDeviceOrderPutTheSlicesWhereTheyName) {
  ir::Graph g = ir::parse_text(forward(named_matmul("(mp, sp)"))).graph;
  const parallel::ParallelPlan plan = parallel::plan_step_parallel(g, {.device_num = 8});
  const int matmul = 2;  // x, w, then the MatMul
  ASSERT_EQ(g.nodes[matmul].op->name, "MatMul");
  const parallel::Layout& x = plan.ops[matmul].inputs[0];
  EXPECT_EQ(x.to_string(), "layout(dev=[2, 2, 2], map=(0, (2, 1)))");
  // Rank r = (dp, sp, mp): its reduction slice is mp * 2 + sp.
  for (int64_t r = 0; r < 8; ++r) {
    const int64_t sp = (r / 2) % 2, mp = r % 2;
    EXPECT_EQ(x.slice_index(1, r), mp * 2 + sp) << "rank " << r;
  }
  // The pending sums are over both axes, ascending.
  EXPECT_EQ(plan.ops[matmul].outputs[0].to_string(),
            "layout(dev=[2, 2, 2], map=(0, -1), partial=(1, 2))");
  // The rewrite reaches the order through the planner; the dump shows the layouts.
  const std::string ops = rank_ops(forward(named_matmul("(mp, sp)")), 1);
  EXPECT_NE(ops.find("MatMul (8, 8) x (8, 16) -> (8, 16)"), std::string::npos) << ops;
  EXPECT_NE(ir::dump_text(g).find("{in_layouts: (layout(dev=(2, 2, 2), alias=(dp, sp, mp), "
                                  "map=(dp, (mp, sp))), "),
            std::string::npos);
}

TEST(NamedLayouts, TextFormReadsBackAndMistakesSaySo) {
  const std::string text = forward(named_matmul("(mp, sp)") + " {out_strategy: ((8, 1))}");
  const ir::Graph g = ir::parse_text(text).graph;
  EXPECT_EQ(g.nodes[2].in_layouts.size(), 2u);
  EXPECT_EQ(g.nodes[2].out_strategy, (ir::Strategy{{8, 1}}));
  EXPECT_EQ(ir::dump_text(ir::parse_text(ir::dump_text(g)).graph), ir::dump_text(g));
  EXPECT_ERROR(ir::parse_text(forward(named_matmul("(mp, xp)"))),
               "'xp' is not an axis of the device matrix; expected one of dp, sp, mp or \"None\"");

  // The Layout API.
  EXPECT_ERROR(ir::Layout({2, 4}, {"dp"}), "Layout: device matrix (2, 4) has 2 axes but 1 names");
  EXPECT_ERROR(ir::Layout({2, 4}, {"dp", "dp"}), "the name 'dp' is given to axes 0 and 1");
  EXPECT_ERROR(ir::Layout({2, 4}, {"dp", "None"}), "expected an identifier other than \"None\"");
  const ir::Layout layout({2, 4}, {"dp", "mp"});
  EXPECT_ERROR(layout("dp", "dp"), "axis 'dp' appears twice in one tensor's layout");
  EXPECT_ERROR(layout("dp", "xp"), "'xp' is not an axis of the device matrix");
  EXPECT_EQ(layout({"mp", "dp"}, "None").splits(), (std::vector<int64_t>{8, 1}));
  ir::Primitive matmul("MatMul");
  EXPECT_ERROR(matmul.shard({layout("dp", "mp"), ir::Layout({4, 2}, {"dp", "mp"})("mp", "None")}),
               "MatMul: the layouts of one shard() are on different device matrices");
  EXPECT_EQ(layout({"mp", "dp"}, "None").to_string(),
            "layout(dev=(2, 4), alias=(dp, mp), map=((mp, dp), None))");

  // Inputs that index one loop must name the same axes.
  ir::Graph bad =
      ir::parse_text(forward(" {in_layouts: (layout(dev=(2, 2, 2), alias=(dp, sp, mp), "
                             "map=(dp, (sp, mp))), layout(dev=(2, 2, 2), alias=(dp, sp, "
                             "mp), map=((mp, sp), None)))}"))
          .graph;
  EXPECT_ERROR(parallel::plan_step_parallel(bad, {.device_num = 8}),
               "MatMul 'matmul' (scope Default/network-Net): input 1 dim 0 is split over axes "
               "(mp, sp) but input 0 dim 1 over (sp, mp); both index the reduction dimension");
  bad = ir::parse_text(forward(" {in_layouts: (layout(dev=(2, 2), alias=(dp, mp), map=(dp, mp)), "
                               "layout(dev=(2, 2), alias=(dp, mp), map=(mp, None)))}"))
            .graph;
  EXPECT_ERROR(parallel::plan_step_parallel(bad, {.device_num = 8}),
               "input 0 is laid out as layout(dev=(2, 2), alias=(dp, mp), map=(dp, mp)), on 4 "
               "devices, but the job has 8");
}

TEST(NamedLayouts, PropagationTakesTheConsumersMinorAxis) {
  // relu(w) feeds a MatMul whose weight is split over mp, the minor axis of (2, 4): no strategy
  // tuple lays the ReLU out that way (a split of 4 on its dim 0 puts it on the major axis), so
  // propagation used to leave it whole on every rank (no communication, all the work). Taking
  // the consumer's layout costs no communication and a quarter of the work.
  const std::string text = R"(# IR entry: @net
%para1_x: <Tensor[Float32], (16, 32)> : input
%para2_w: <Tensor[Float32], (32, 16)> : parameter

subgraph @net(%para1_x, %para2_w) {
  %3(out) = ReLU(%para2_w) {instance name: relu}
      : (<Tensor[Float32], (32, 16)>) -> (<Tensor[Float32], (32, 16)>)
      # scope: (Default/network-Net)
  %4(out) = MatMul(%para1_x, %3) {instance name: matmul} primitive_attrs: {transpose_a: false, transpose_b: false} {in_layouts: (layout(dev=(2, 4), alias=(dp, mp), map=(dp, mp)), layout(dev=(2, 4), alias=(dp, mp), map=(mp, None)))}
      : (<Tensor[Float32], (16, 32)>, <Tensor[Float32], (32, 16)>) -> (<Tensor[Float32], (16, 16)>)
      # scope: (Default/network-Net)
  return(%4)
}
)";
  ir::Graph g = ir::parse_text(text).graph;
  EXPECT_EQ(g.nodes[3].strategy, (ir::Strategy{{2, 4}, {4, 1}}));  // the layouts' splits
  const parallel::PropagationReport report = parallel::propagate_strategies(g, {.device_num = 8});
  EXPECT_TRUE(report.inconsistencies.empty())
      << fmt::format("{}", fmt::join(report.inconsistencies, "\n"));
  ASSERT_EQ(g.nodes[2].op->name, "ReLU");
  ASSERT_EQ(g.nodes[2].in_layouts.size(), 1u);
  EXPECT_EQ(g.nodes[2].strategy, (ir::Strategy{{4, 1}}));
  const parallel::ParallelPlan plan = parallel::plan_step_parallel(g, {.device_num = 8});
  // The MatMul's layouts hold the slices of its strategy's default axes, so it keeps those
  // ([2, 4, 1]); the ReLU takes the weight's: rows over axis 1, of size 4, the minor one.
  EXPECT_EQ(plan.ops[2].inputs[0].to_string(), "layout(dev=[2, 4, 1], map=(1, -1))");
  // Rank 1 = (dp 0, mp 1): the ReLU computes the weight's rows 8..15, which the MatMul reads as
  // they are; only x moves.
  const std::string ops = ops_text(parallel::materialize(g, plan, 1).graph);
  EXPECT_EQ(ops, R"(ReLU (8, 16) -> (8, 16)
AlltoAll (2, 32) -> (8, 8) over (0, 1, 2, 3)
MatMul (8, 8) x (8, 16) -> (8, 16)
AllReduce (8, 16) -> (8, 16) over (0, 1, 2, 3)
AllGather (8, 16) -> (16, 16) over (1, 5)
)");
}

// ---- training on thread ranks equals one device ----

using Net = testing::SeedNet;
using testing::expect_seed_net_trains_as_one_device;

TEST(NamedLayouts, OutStrategyTrainingOnFourThreadRanksEqualsOneDevice) {
  // The reduction split 4 ways, scattered over the rows (ReduceScatter in the forward, its
  // AllGather in the backward).
  expect_seed_net_trains_as_one_device(4, [](Net& net) {
    net.matmul.shard({{1, 4}, {4, 1}}, {{4, 1}});
  });
}

TEST(NamedLayouts, TwoAxesOnOneDimensionTrainOnEightThreadRanksAsOneDevice) {
  const ir::Layout layout({2, 2, 2}, {"dp", "sp", "mp"});
  expect_seed_net_trains_as_one_device(8, [&](Net& net) {
    net.matmul.shard({layout("dp", {"sp", "mp"}), layout({"sp", "mp"}, "None")});
  });
  // Out of device order, with the second MatMul's output laid out by a named layout too.
  expect_seed_net_trains_as_one_device(8, [&](Net& net) {
    net.matmul.shard({layout("dp", {"mp", "sp"}), layout({"mp", "sp"}, "None")});
    net.matmul2.shard({layout("dp", "mp"), layout("mp", "sp")}, {layout({"dp", "sp"}, "None")});
  });
}

}  // namespace
}  // namespace cleave

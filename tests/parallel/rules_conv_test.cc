// The convolution rules (src/parallel/rules/conv.cc): every valid strategy on 1, 2, 3, 4, 6 and 8
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

ir::Attrs conv_attrs(Dims stride, std::string pad_mode, Dims pad = {0, 0, 0, 0},
                     Dims dilation = {1, 1}, int64_t group = 1) {
  return {{"stride", stride},
          {"dilation", dilation},
          {"pad_mode", pad_mode},
          {"pad", pad},
          {"group", group}};
}

std::vector<OpCase> conv_cases() {
  std::vector<OpCase> cases;
  // Conv2D: x (N, C, H, W), w (O, C/group, kH, kW).
  cases.push_back(
      {"Conv2D", conv_attrs({1, 1}, "valid"), {f64({6, 4, 5, 5}, 1), f64({4, 4, 3, 3}, 2)}});
  cases.push_back(
      {"Conv2D", conv_attrs({2, 2}, "same"), {f64({6, 2, 5, 5}, 3), f64({6, 2, 3, 3}, 4)}});
  cases.push_back({"Conv2D",
                   conv_attrs({1, 2}, "pad", {1, 0, 2, 1}, {2, 1}),
                   {f64({6, 2, 6, 5}, 5), f64({4, 2, 2, 3}, 6)}});
  cases.push_back({"Conv2D",
                   conv_attrs({1, 1}, "same", {0, 0, 0, 0}, {1, 1}, 2),
                   {f64({6, 4, 4, 4}, 7), f64({6, 2, 3, 3}, 8)}});
  cases.push_back({"Conv2D",  // depthwise
                   conv_attrs({1, 1}, "valid", {0, 0, 0, 0}, {1, 1}, 4),
                   {f64({6, 4, 4, 4}, 9), f64({4, 1, 2, 2}, 10)}});
  // The backward primitives, as Conv2D's gradient calls them.
  const ir::Attrs plain = conv_attrs({1, 1}, "valid");
  cases.push_back({"Conv2DBackpropInput",
                   with(plain, "input_shape", Dims{6, 4, 5, 5}),
                   {f64({6, 4, 3, 3}, 11), f64({4, 4, 3, 3}, 12)}});
  cases.push_back(
      {"Conv2DBackpropInput",
       with(conv_attrs({2, 2}, "same", {0, 0, 0, 0}, {1, 1}, 2), "input_shape", Dims{6, 4, 5, 5}),
       {f64({6, 6, 3, 3}, 13), f64({6, 2, 3, 3}, 14)}});
  cases.push_back({"Conv2DBackpropFilter",
                   with(plain, "filter_shape", Dims{4, 4, 3, 3}),
                   {f64({6, 4, 3, 3}, 15), f64({6, 4, 5, 5}, 16)}});
  cases.push_back(
      {"Conv2DBackpropFilter",
       with(conv_attrs({1, 1}, "pad", {1, 1, 0, 1}, {1, 2}, 2), "filter_shape", Dims{4, 1, 3, 2}),
       {f64({6, 4, 4, 4}, 17), f64({6, 2, 4, 5}, 18)}});
  return cases;
}

TEST(OpSharding, ConvolutionsEqualOneDevice) { testing::expect_all_equal_one_device(conv_cases()); }

// The strategies of a case, as text, for the expectations below.
std::vector<std::string> strategy_texts(const OpCase& c, int64_t device_num) {
  std::vector<std::string> out;
  for (const ir::Strategy& s : testing::strategies_of(c, device_num)) {
    out.push_back(ir::strategy_to_string(s));
  }
  return out;
}

TEST(OpSharding, ConvolutionSplitsBatchChannelsAndGroups) {
  const OpCase conv = conv_cases()[0];  // x (6, 4, 5, 5), w (4, 4, 3, 3), group 1
  const std::vector<std::string> two = strategy_texts(conv, 2);
  EXPECT_EQ(two, (std::vector<std::string>{
                     "((1, 1, 1, 1), (1, 1, 1, 1))", "((1, 1, 1, 1), (2, 1, 1, 1))",
                     "((1, 2, 1, 1), (1, 2, 1, 1))", "((2, 1, 1, 1), (1, 1, 1, 1))"}));
  const OpCase grouped = conv_cases()[3];  // group 2: whole groups only
  for (const std::string& s : strategy_texts(grouped, 4)) {
    EXPECT_EQ(s.find("(1, 4, 1, 1)"), std::string::npos) << s;
  }
}

// NOTE [Padded channels] in src/parallel/rules/conv.cc: a forward convolution's slice is costed
// with its output channels padded to blocks of 8; the backward primitives are not.
TEST(OpSharding, AConvolutionSliceOnOneDnnIsCostedWithItsOutputChannelsPaddedToEight) {
  const ir::OpDef& op = ir::Registry::global().get("Conv2D");
  const ir::Attrs attrs = conv_attrs({1, 1}, "valid");
  // x (32, 6, 14, 14), w (16, 6, 5, 5) -> (32, 16, 10, 10): LeNet's conv2.
  const std::vector<ir::TensorMeta> in{{Shape{32, 6, 14, 14}, DType::kFloat32},
                                       {Shape{16, 6, 5, 5}, DType::kFloat32}};
  const std::vector<ir::TensorMeta> out{{Shape{32, 16, 10, 10}, DType::kFloat32}};
  const double flops = 2.0 * 32 * 16 * 10 * 10 * 6 * 5 * 5;
  for (int64_t devices : {2, 8}) {
    const parallel::RuleContext ctx{op, attrs, in, out, "conv2", "", devices};
    const parallel::ShardingRule& rule = parallel::rule_of(op);
    // The batch split: 16 output channels, two whole blocks.
    EXPECT_DOUBLE_EQ(rule.infer(ctx, {{devices, 1, 1, 1}, {1, 1, 1, 1}}).compute_flops,
                     flops / static_cast<double>(devices));
    // The output channels split: 8 per rank on 2 devices (a whole block), 2 per rank on 8 (a
    // quarter of one, costed as the whole block).
    const double padding = devices == 8 ? 4.0 : 1.0;
    EXPECT_DOUBLE_EQ(rule.infer(ctx, {{1, 1, 1, 1}, {devices, 1, 1, 1}}).compute_flops,
                     flops / static_cast<double>(devices) * padding);
  }
  // conv1 (one input channel, 5x5) runs on the hand-written kernel (NOTE [Convolutions of few
  // input channels] in src/kernels/cpu/conv.cc): its 6 output channels, or 3 per rank, are not
  // padded.
  const std::vector<ir::TensorMeta> in1{{Shape{32, 1, 32, 32}, DType::kFloat32},
                                        {Shape{6, 1, 5, 5}, DType::kFloat32}};
  const std::vector<ir::TensorMeta> out1{{Shape{32, 6, 28, 28}, DType::kFloat32}};
  const double flops1 = 2.0 * 32 * 6 * 28 * 28 * 1 * 5 * 5;
  const parallel::RuleContext ctx1{op, attrs, in1, out1, "conv1", "", 2};
  const parallel::ShardingRule& rule = parallel::rule_of(op);
  EXPECT_DOUBLE_EQ(rule.infer(ctx1, {{1, 1, 1, 1}, {1, 1, 1, 1}}).compute_flops, flops1);
  EXPECT_DOUBLE_EQ(rule.infer(ctx1, {{1, 1, 1, 1}, {2, 1, 1, 1}}).compute_flops, flops1 / 2);
  // With a 3x3 kernel (9 taps) or a stride of 2, oneDNN runs it: 6 output channels pad to 8.
  const std::vector<ir::TensorMeta> in3{{Shape{32, 1, 32, 32}, DType::kFloat32},
                                        {Shape{6, 1, 3, 3}, DType::kFloat32}};
  const std::vector<ir::TensorMeta> out3{{Shape{32, 6, 30, 30}, DType::kFloat32}};
  const parallel::RuleContext ctx3{op, attrs, in3, out3, "conv", "", 1};
  EXPECT_DOUBLE_EQ(rule.infer(ctx3, {{1, 1, 1, 1}, {1, 1, 1, 1}}).compute_flops,
                   2.0 * 32 * 6 * 30 * 30 * 1 * 3 * 3 * 8 / 6);
  const ir::Attrs strided = conv_attrs({2, 2}, "valid");
  const std::vector<ir::TensorMeta> out2{{Shape{32, 6, 14, 14}, DType::kFloat32}};
  const parallel::RuleContext ctx2{op, strided, in1, out2, "conv", "", 1};
  EXPECT_DOUBLE_EQ(rule.infer(ctx2, {{1, 1, 1, 1}, {1, 1, 1, 1}}).compute_flops,
                   2.0 * 32 * 6 * 14 * 14 * 1 * 5 * 5 * 8 / 6);
}

// ---- invalid strategies ----

TEST(OpSharding, InvalidConvolutionStrategiesAreNamed) {
  const OpCase conv = conv_cases()[0];
  const std::string shapes = "inputs of shapes (6, 4, 5, 5), (4, 4, 3, 3) on 8 devices";
  expect_plan_error(conv, {{1, 1, 2, 1}, {1, 1, 1, 1}}, 8,
                    {"Conv2D '", "strategy ((1, 1, 2, 1), (1, 1, 1, 1))", shapes,
                     "input 0 dim 2 is split 2 ways, but it is a spatial dimension (a split would "
                     "need a halo exchange), which cannot be split; expected 1"});
  expect_plan_error(conv, {{1, 1, 1, 1}, {1, 1, 2, 1}}, 8,
                    {"input 1 dim 2 is split 2 ways, but it is a kernel dimension"});
  expect_plan_error(conv, {{4, 1, 1, 1}, {1, 1, 1, 1}}, 8,
                    {"strategy ((4, 1, 1, 1), (1, 1, 1, 1))", shapes,
                     "input 0 dim 0 has size 6, which 4 ways do not divide; a split of it must be "
                     "one of 1, 2, 3, 6"});
  expect_plan_error(conv, {{1, 2, 1, 1}, {1, 4, 1, 1}}, 8,
                    {"input 1 dim 1 is split 4 ways but input 0 dim 1 is split 2 ways; they must "
                     "match (the input channels (a reduction))"});
  expect_plan_error(conv, {{3, 1, 1, 1}, {1, 1, 1, 1}}, 8,
                    {"it uses 3 devices (3), which does not divide device_num 8"});
  // Entry counts are checked by Primitive::shard and the traced call, before any shapes meet the
  // rule.
  expect_plan_error(conv, {{2, 1, 1, 1}}, 8,
                    {"Conv2D: strategy ((2, 1, 1, 1)) has 1 entry; expected one per input (2)"});
  expect_plan_error(conv, {{2, 1, 1}, {1, 1, 1, 1}}, 8,
                    {"Conv2D: strategy ((2, 1, 1), (1, 1, 1, 1)) gives input 0 3 splits but the "
                     "input has shape (6, 4, 5, 5) (rank 4); expected one split per dimension"});
  // group 2: x's channels and w's output channels split together, into whole groups.
  const OpCase grouped = conv_cases()[3];  // x (6, 4, 4, 4), w (6, 2, 3, 3)
  expect_plan_error(grouped, {{1, 2, 1, 1}, {1, 1, 1, 1}}, 8,
                    {"input 1 dim 0 is split 1 ways but input 0 dim 1 is split 2 ways; they must "
                     "match (the channel groups"});
  expect_plan_error(grouped, {{1, 1, 1, 1}, {1, 2, 1, 1}}, 8,
                    {"input 1 dim 1 is split 2 ways, but it is the channels of one group"});
  const OpCase depthwise = conv_cases()[4];  // x (6, 4, 4, 4), w (4, 1, 2, 2), group 4
  EXPECT_EQ(testing::plan_error(depthwise, {{1, 4, 1, 1}, {4, 1, 1, 1}}, 8), "");
  const OpCase two_groups{"Conv2D",
                          conv_attrs({1, 1}, "valid", {0, 0, 0, 0}, {1, 1}, 2),
                          {f64({2, 4, 3, 3}, 1), f64({4, 2, 2, 2}, 2)}};
  expect_plan_error(two_groups, {{1, 4, 1, 1}, {4, 1, 1, 1}}, 4,
                    {"input 0 dim 1 (size 4) is split 4 ways, but with group 2 each rank must "
                     "hold whole groups of channels; a split of it must divide the group count: "
                     "one of 1, 2"});
}

}  // namespace
}  // namespace cleave

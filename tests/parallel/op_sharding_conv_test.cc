// The convolution, pooling, resizing, normalisation and optimizer-update rules: every valid
// strategy on 1, 2, 3, 4, 6 and 8 devices, run on thread ranks through the SEMI_AUTO_PARALLEL
// pipeline, equals one device (NOTE [Sharded operator check] in tests/testing/op_sharding.h);
// invalid strategies give the planning error. Every kernel here has a Float64 path, so the
// inputs are Float64.
#include <gtest/gtest.h>

#include <mutex>

#include "cleave/cleave.h"
#include "cleave/runtime/sharded_parameters.h"
#include "comm/thread_world.h"
#include "testing/gradcheck.h"
#include "testing/op_sharding.h"

namespace cleave {
namespace {

using testing::f64;
using testing::OpCase;
using Dims = std::vector<int64_t>;

Tensor positive(const Shape& shape, uint64_t seed) { return f64(shape, seed, 0.5, 2.0); }

ir::Attrs conv_attrs(Dims stride, std::string pad_mode, Dims pad = {0, 0, 0, 0},
                     Dims dilation = {1, 1}, int64_t group = 1) {
  return {{"stride", stride},
          {"dilation", dilation},
          {"pad_mode", pad_mode},
          {"pad", pad},
          {"group", group}};
}

ir::Attrs with(ir::Attrs attrs, const char* name, const ir::AttrValue& value) {
  attrs.set(name, value);
  return attrs;
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

ir::Attrs pool_attrs(Dims kernel, Dims stride, std::string pad_mode) {
  return {{"kernel_size", kernel}, {"stride", stride}, {"pad_mode", pad_mode}};
}

std::vector<OpCase> pool_and_resize_cases() {
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
  for (bool align : {false, true}) {
    const ir::Attrs resize{{"size", Dims{5, 4}}, {"align_corners", align}};
    const ir::Attrs grad = with(resize, "input_shape", Dims{6, 4, 3, 3});
    cases.push_back({"ResizeBilinear", resize, {f64({6, 4, 3, 3}, 27)}});
    cases.push_back({"ResizeNearest", resize, {f64({6, 4, 3, 3}, 28)}});
    cases.push_back({"ResizeBilinearGrad", grad, {f64({6, 4, 5, 4}, 29)}});
    cases.push_back({"ResizeNearestGrad", grad, {f64({6, 4, 5, 4}, 30)}});
  }
  return cases;
}

// BatchNorm's inputs for x of `shape`: x, gamma, beta, running_mean, running_var.
std::vector<Tensor> batch_norm_inputs(const Shape& shape, uint64_t seed) {
  const Shape c{shape[1]};
  return {f64(shape, seed), positive(c, seed + 1), f64(c, seed + 2), f64(c, seed + 3),
          positive(c, seed + 4)};
}

std::vector<OpCase> norm_cases() {
  std::vector<OpCase> cases;
  for (bool training : {true, false}) {
    const ir::Attrs attrs{{"is_training", training}, {"epsilon", 1e-5}};
    cases.push_back({"BatchNorm", attrs, batch_norm_inputs({6, 4, 2, 2}, 40)});
    cases.push_back({"BatchNorm", attrs, batch_norm_inputs({12, 4}, 45)});
    // BatchNormGrad(dy, x, gamma, mean, var).
    cases.push_back({"BatchNormGrad",
                     attrs,
                     {f64({6, 4, 2, 2}, 50), f64({6, 4, 2, 2}, 51), positive({4}, 52), f64({4}, 53),
                      positive({4}, 54)}});
  }
  // LayerNorm(x, gamma, beta): the last dimension, and the last two.
  cases.push_back({"LayerNorm",
                   {{"begin_norm_axis", int64_t{-1}}, {"epsilon", 1e-5}},
                   {f64({6, 4, 3}, 60), positive({3}, 61), f64({3}, 62)}});
  cases.push_back({"LayerNorm",
                   {{"begin_norm_axis", int64_t{1}}, {"epsilon", 1e-5}},
                   {f64({6, 4, 3}, 63), positive({4, 3}, 64), f64({4, 3}, 65)}});
  // LayerNormGrad(dy, x, gamma, mean, var) with the statistics of x.
  const ir::Attrs ln{{"begin_norm_axis", int64_t{2}}, {"epsilon", 1e-5}};
  const Tensor x = f64({6, 2, 4}, 66);
  const std::vector<Tensor> stats =
      ir::call(ir::Registry::global().get("LayerNorm"), {x, positive({4}, 67), f64({4}, 68)}, ln);
  cases.push_back(
      {"LayerNormGrad", ln, {f64({6, 2, 4}, 69), x, positive({4}, 70), stats[1], stats[2]}});
  return cases;
}

std::vector<OpCase> optimizer_cases() {
  std::vector<OpCase> cases;
  const Shape p{6, 4};
  const Tensor lr = Tensor::full({1}, 0.1, DType::kFloat64);
  for (bool nesterov : {false, true}) {
    cases.push_back({"ApplyMomentum",
                     {{"momentum", 0.9}, {"use_nesterov", nesterov}, {"weight_decay", 0.01}},
                     {f64(p, 80), f64(p, 81), f64(p, 82), lr}});
  }
  cases.push_back({"ApplyMomentum",  // the learning rate as an attribute
                   {{"lr", 0.05}, {"momentum", 0.9}, {"use_nesterov", false}},
                   {f64({6, 4, 2}, 83), f64({6, 4, 2}, 84), f64({6, 4, 2}, 85)}});
  for (double first : {1.0, 0.0}) {
    cases.push_back(
        {"SGD",
         {{"momentum", 0.9},
          {"dampening", 0.0},
          {"weight_decay", 0.01},
          {"nesterov", first == 0.0}},
         {f64(p, 86), f64(p, 87), f64(p, 88), Tensor::full({1}, first, DType::kFloat64), lr}});
  }
  for (bool decoupled : {false, true}) {
    cases.push_back({"Adam",
                     {{"beta1", 0.9},
                      {"beta2", 0.999},
                      {"eps", 1e-8},
                      {"weight_decay", 0.01},
                      {"decoupled", decoupled}},
                     {f64(p, 89), f64(p, 90), positive(p, 91), f64(p, 92), lr,
                      Tensor::full({1}, 3.0, DType::kFloat64)}});
  }
  cases.push_back({"Assign", {}, {f64(p, 93), f64(p, 94)}});
  return cases;
}

TEST(OpSharding, ConvolutionsEqualOneDevice) { testing::expect_all_equal_one_device(conv_cases()); }
TEST(OpSharding, PoolingAndResizingEqualOneDevice) {
  testing::expect_all_equal_one_device(pool_and_resize_cases());
}
TEST(OpSharding, NormalisationsEqualOneDevice) {
  testing::expect_all_equal_one_device(norm_cases());
}
TEST(OpSharding, OptimizerUpdatesWriteTheirSlicesOfOneDevice) {
  testing::expect_all_equal_one_device(optimizer_cases());
}

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

// ---- invalid strategies ----

// Expects the planning error of `strategy` to contain every one of `parts`.
void expect_plan_error(const OpCase& c, const ir::Strategy& strategy, int64_t device_num,
                       const std::vector<std::string>& parts) {
  const std::string error = testing::plan_error(c, strategy, device_num);
  ASSERT_FALSE(error.empty()) << ir::strategy_to_string(strategy) << " was accepted";
  for (const std::string& part : parts) {
    EXPECT_NE(error.find(part), std::string::npos) << "missing \"" << part << "\" in: " << error;
  }
}

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

TEST(OpSharding, InvalidPoolingStrategiesAreNamed) {
  const OpCase pool = pool_and_resize_cases()[0];  // MaxPool2D x (6, 4, 4, 4)
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
  const OpCase grad = pool_and_resize_cases()[4];  // MaxPoolGrad x (6, 4, 4, 4), dy (6, 4, 2, 2)
  expect_plan_error(grad, {{1, 2, 1, 1}, {1, 4, 1, 1}}, 8,
                    {"MaxPoolGrad '", "inputs of shapes (6, 4, 4, 4), (6, 4, 2, 2)",
                     "input 1 dim 1 is split 4 ways but input 0 dim 1 is split 2 ways; they must "
                     "match (the channel dimension)"});
}

TEST(OpSharding, InvalidBatchNormStrategiesAreNamed) {
  const OpCase bn = norm_cases()[0];  // BatchNorm x (6, 4, 2, 2), training
  const std::string shapes = "inputs of shapes (6, 4, 2, 2), (4), (4), (4), (4) on 8 devices";
  const std::vector<int64_t> c1{1};
  expect_plan_error(bn, {{1, 2, 1, 1}, {4}, {4}, {4}, {4}}, 8,
                    {"BatchNorm '", "strategy ((1, 2, 1, 1), (4), (4), (4), (4))", shapes,
                     "input 1 dim 0 is split 4 ways but input 0 dim 1 is split 2 ways; they must "
                     "match (the channel dimension)"});
  expect_plan_error(bn, {{4, 1, 1, 1}, c1, c1, c1, c1}, 8,
                    {"input 0 dim 0 has size 6, which 4 ways do not divide"});
  expect_plan_error(bn, {{3, 1, 1, 1}, c1, c1, c1, c1}, 8,
                    {"it uses 3 devices (3), which does not divide device_num 8"});
  expect_plan_error(bn, {{2, 1, 1, 1}, c1, c1, c1}, 8,
                    {"BatchNorm: strategy ((2, 1, 1, 1), (1), (1), (1)) has 4 entries; expected "
                     "one per input (5)"});
  expect_plan_error(bn, {{2, 1, 1, 1}, {1, 1}, c1, c1, c1}, 8,
                    {"gives input 1 2 splits but the input has shape (4) (rank 1)"});
  // BatchNorm splits every dimension; its gradient only the channels.
  const OpCase grad = norm_cases()[2];  // BatchNormGrad
  expect_plan_error(grad, {{2, 1, 1, 1}, {2, 1, 1, 1}, c1, c1, c1}, 8,
                    {"BatchNormGrad '",
                     "input 0 dim 0 is split 2 ways, but it is the batch dimension "
                     "(BatchNormGrad's dx needs sums over the whole batch), which cannot be "
                     "split; expected 1"});
}

TEST(OpSharding, InvalidLayerNormStrategiesAreNamed) {
  const OpCase ln = norm_cases()[6];  // LayerNorm x (6, 4, 3), begin_norm_axis -1
  const std::string shapes = "inputs of shapes (6, 4, 3), (3), (3) on 8 devices";
  expect_plan_error(ln, {{1, 1, 3}, {3}, {3}}, 8,
                    {"LayerNorm '", "strategy ((1, 1, 3), (3), (3))", shapes,
                     "input 0 dim 2 is split 3 ways, but it is a normalised dimension (from "
                     "begin_norm_axis on; each row's statistics need all of it), which cannot be "
                     "split; expected 1"});
  expect_plan_error(ln, {{1, 1, 1}, {3}, {1}}, 8,
                    {"input 1 dim 0 is split 3 ways, but it is a "
                     "normalised dimension"});
  expect_plan_error(ln, {{4, 1, 1}, {1}, {1}}, 8,
                    {"input 0 dim 0 has size 6, which 4 ways do not divide"});
  expect_plan_error(ln, {{3, 2, 1}, {1}, {1}}, 8,
                    {"it uses 6 devices (3 x 2), which does not divide device_num 8"});
  expect_plan_error(ln, {{2, 1, 1}}, 8,
                    {"LayerNorm: strategy ((2, 1, 1)) has 1 entry; expected one per input (3)"});
  // LayerNorm reads its batch dimensions from x alone; its gradient from dy and x.
  const OpCase grad = norm_cases()[8];  // LayerNormGrad dy, x (6, 2, 4)
  expect_plan_error(grad, {{2, 1, 1}, {1, 1, 1}, {1}, {2, 1, 1}, {2, 1, 1}}, 8,
                    {"LayerNormGrad '",
                     "input 1 dim 0 is split 1 ways but input 0 dim 0 is split 2 ways; they must "
                     "match (a batch dimension (dgamma and dbeta sum over it))"});
}

// Conv2d -> BatchNorm2d -> ReLU: in training, BatchNorm2d writes its moving statistics with
// Assign inside the forward graph.
class ConvBnNet : public nn::Cell {
 public:
  ConvBnNet() : Cell("ConvBnNet") {
    conv = register_module("conv", std::make_shared<nn::Conv2d>(3, 4, 3));
    bn = register_module("bn", std::make_shared<nn::BatchNorm2d>(4));
    relu = register_module("relu", std::make_shared<nn::ReLU>());
  }
  Tensor construct(const Tensor& x) override { return ops::flatten((*relu)((*bn)((*conv)(x)))); }
  std::shared_ptr<nn::Conv2d> conv;
  std::shared_ptr<nn::BatchNorm2d> bn;
  std::shared_ptr<nn::ReLU> relu;
};

struct TrainResult {
  std::vector<double> losses;
  std::vector<Tensor> params;  // every parameter (the moving statistics too), gathered
};

// The global generator is not thread-safe: thread ranks make their networks one at a time.
std::mutex g_init_mutex;

TrainResult train_conv_bn(const Tensor& x, const Tensor& y, int steps) {
  std::shared_ptr<ConvBnNet> net;
  {
    std::lock_guard<std::mutex> lock(g_init_mutex);
    set_seed(3);
    net = std::make_shared<ConvBnNet>();
  }
  net->set_train(true);  // BatchNorm2d uses and updates the batch statistics
  auto loss = std::make_shared<nn::WithLossCell>(net, std::make_shared<nn::MSELoss>());
  auto opt = std::make_shared<optim::Momentum>(net->trainable_params(), 0.1, 0.9);
  optim::TrainOneStep step(loss, opt);
  TrainResult run;
  for (int s = 0; s < steps; ++s) run.losses.push_back(step(x, y).item());
  for (const Tensor& p : net->get_parameters()) run.params.push_back(runtime::gather_parameter(p));
  return run;
}

// Every op data parallel (the default strategies): BatchNorm's statistics are those of the whole
// batch (NOTE [Synchronised batch statistics]) and the Assigns of the moving statistics keep
// their layout, so losses, weights and moving statistics equal one device's.
TEST(OpSharding, DataParallelBatchNormNetworkEqualsOneDevice) {
  const int world = 4, steps = 3, batch = 8;
  set_seed(11);
  const Tensor x = Tensor::uniform({batch, 3, 4, 4});
  const Tensor y = Tensor::uniform({batch, 4 * 4 * 4});
  runtime::reset_auto_parallel_context();
  const TrainResult single = train_conv_bn(x, y, steps);

  runtime::set_auto_parallel_context({.parallel_mode = runtime::SEMI_AUTO_PARALLEL});
  std::vector<TrainResult> runs(world);
  testing::run_thread_job(world, [&](int rank) {
    const int64_t rows = batch / world;
    runs[rank] = train_conv_bn(x.narrow_rows(rank * rows, rows).clone(),
                               y.narrow_rows(rank * rows, rows).clone(), steps);
  });
  runtime::reset_auto_parallel_context();
  for (int r = 0; r < world; ++r) {
    for (int s = 0; s < steps; ++s) {
      EXPECT_NEAR(runs[r].losses[s], single.losses[s], 1e-5 * std::abs(single.losses[s]))
          << "rank " << r << " step " << s;
    }
    ASSERT_EQ(runs[r].params.size(), single.params.size());
    for (size_t p = 0; p < single.params.size(); ++p) {
      EXPECT_TRUE(testing::all_close(runs[r].params[p], single.params[p], 1e-6, 1e-5))
          << "rank " << r << " parameter " << p;
    }
  }
}

}  // namespace
}  // namespace cleave

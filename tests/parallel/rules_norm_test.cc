// The normalisation rules (src/parallel/rules/norm.cc): every valid strategy on 1, 2, 3, 4, 6 and 8
// devices, run on thread ranks through the SEMI_AUTO_PARALLEL pipeline, equals one device (NOTE
// [Sharded operator check] in tests/testing/op_sharding.h); invalid strategies give the planning
// error. Every kernel here has a
// Float64 path, so the inputs are Float64.
#include <gtest/gtest.h>

#include "cleave/cleave.h"
#include "cleave/core/random.h"
#include "cleave/runtime/sharded_parameters.h"
#include "testing/gradcheck.h"
#include "testing/op_sharding.h"
#include "testing/ranks.h"

namespace cleave {
namespace {

using testing::expect_plan_error;
using testing::f64;
using testing::OpCase;
using testing::positive;

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

TEST(OpSharding, NormalisationsEqualOneDevice) {
  testing::expect_all_equal_one_device(norm_cases());
}

// ---- invalid strategies ----

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
TrainResult train_conv_bn(const Tensor& x, const Tensor& y, int steps) {
  std::shared_ptr<ConvBnNet> net;
  {
    const SeededScope seeded(3);  // NOTE [Global generator]
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

#include "cleave/nn/loss.h"

#include <gtest/gtest.h>

#include <cmath>

#include "cleave/nn/layers.h"
#include "testing/gradcheck.h"

namespace cleave::nn {
namespace {

using testing::all_close;
using testing::random_f64;

const std::vector<double> kLogits = {1.0, 2.0, 0.5, -1.0, 0.0, 3.0};  // (2, 3)

Tensor logits() { return Tensor::from_vector<double>(kLogits, {2, 3}); }

// -log softmax(row)[label] by hand.
double nll(int row, int label) {
  double z = 0;
  for (int j = 0; j < 3; ++j) z += std::exp(kLogits[row * 3 + j]);
  return std::log(z) - kLogits[row * 3 + label];
}

TEST(SoftmaxCrossEntropyWithLogits, SparseLabelsPerSampleByDefault) {
  SoftmaxCrossEntropyWithLogits loss(/*sparse=*/true);
  EXPECT_EQ(loss.reduction(), "none");
  const Tensor labels = Tensor::from_vector<int32_t>({1, 2});
  const Tensor per_sample = loss(logits(), labels);
  EXPECT_TRUE(all_close(per_sample, Tensor::from_vector<double>({nll(0, 1), nll(1, 2)}), 1e-12));
  SoftmaxCrossEntropyWithLogits mean(true, "mean");
  EXPECT_NEAR(mean(logits(), labels).item(), (nll(0, 1) + nll(1, 2)) / 2, 1e-12);
}

TEST(SoftmaxCrossEntropyWithLogits, DenseLabelsAreProbabilities) {
  SoftmaxCrossEntropyWithLogits loss(/*sparse=*/false, "sum");
  const Tensor labels = Tensor::from_vector<double>({0.25, 0.75, 0.0, 0.0, 0.0, 1.0}, {2, 3});
  EXPECT_NEAR(loss(logits(), labels).item(), 0.25 * nll(0, 0) + 0.75 * nll(0, 1) + nll(1, 2),
              1e-12);
}

TEST(CrossEntropyLoss, MeanOverSamplesForClassIdsOrProbabilities) {
  CrossEntropyLoss loss;
  const double expected = (nll(0, 0) + nll(1, 1)) / 2;
  EXPECT_NEAR(loss(logits(), Tensor::from_vector<int64_t>({0, 1})).item(), expected, 1e-12);
  EXPECT_NEAR(loss(logits(), Tensor::from_vector<int32_t>({0, 1})).item(), expected, 1e-12);
  const Tensor one_hot = Tensor::from_vector<double>({1, 0, 0, 0, 1, 0}, {2, 3});
  EXPECT_NEAR(loss(logits(), one_hot).item(), expected, 1e-12);
  CrossEntropyLoss sum("sum");
  EXPECT_NEAR(sum(logits(), Tensor::from_vector<int32_t>({0, 1})).item(), 2 * expected, 1e-12);
}

TEST(MSELoss, Reductions) {
  const Tensor p = Tensor::from_vector<double>({1, 2, 3, 4}, {2, 2});
  const Tensor t = Tensor::from_vector<double>({0, 2, 5, 1}, {2, 2});
  EXPECT_NEAR(MSELoss()(p, t).item(), (1 + 0 + 4 + 9) / 4.0, 1e-12);
  EXPECT_NEAR(MSELoss("sum")(p, t).item(), 14.0, 1e-12);
  EXPECT_EQ(MSELoss("none")(p, t).to_vector<double>(), (std::vector<double>{1, 0, 4, 9}));
}

TEST(L1Loss, Reductions) {
  const Tensor p = Tensor::from_vector<double>({1, 2, 3, 4}, {2, 2});
  const Tensor t = Tensor::from_vector<double>({0, 2, 5, 1}, {2, 2});
  EXPECT_NEAR(L1Loss()(p, t).item(), (1 + 0 + 2 + 3) / 4.0, 1e-12);
  EXPECT_NEAR(L1Loss("sum")(p, t).item(), 6.0, 1e-12);
  EXPECT_EQ(L1Loss("none")(p, t).to_vector<double>(), (std::vector<double>{1, 0, 2, 3}));
}

TEST(Losses, GradientsWithRespectToPredictions) {
  const Tensor labels = Tensor::from_vector<int32_t>({2, 0, 1, 1});
  CrossEntropyLoss ce;
  EXPECT_TRUE(testing::gradcheck([&](const auto& in) { return ce(in[0], labels); },
                                 {random_f64({4, 3}, -2, 2, 41)}));
  // Dense labels are distributions (rows summing to 1), which the logits' gradient
  // softmax - labels assumes.
  SoftmaxCrossEntropyWithLogits dense(false, "mean");
  const Tensor weights = random_f64({4, 3}, 0.1, 1, 43);
  const Tensor distribution = weights / ops::reduce_sum(weights, {.axes = {1}, .keep_dims = true});
  EXPECT_TRUE(testing::gradcheck([&](const auto& in) { return dense(in[0], in[1]); },
                                 {random_f64({4, 3}, -2, 2, 42), distribution}));
  MSELoss mse;
  EXPECT_TRUE(testing::gradcheck([&](const auto& in) { return mse(in[0], in[1]); },
                                 {random_f64({3, 2}, -1, 1, 44), random_f64({3, 2}, -1, 1, 45)}));
  // Away from the kink of |x| at 0: predictions and targets in disjoint ranges.
  L1Loss l1("sum");
  EXPECT_TRUE(testing::gradcheck([&](const auto& in) { return l1(in[0], in[1]); },
                                 {random_f64({3, 2}, 0.5, 1, 46), random_f64({3, 2}, -1, 0, 47)}));
}

TEST(Losses, BadInputIsReported) {
  EXPECT_ERROR(MSELoss("avg"), "MSELoss: reduction 'avg' is not supported",
               "\"mean\", \"sum\" or \"none\"");
  EXPECT_ERROR(CrossEntropyLoss("batchmean"), "CrossEntropyLoss: reduction 'batchmean'");
  SoftmaxCrossEntropyWithLogits sparse(true);
  EXPECT_ERROR(sparse(logits(), Tensor::zeros({2}, DType::kFloat64)),
               "SoftmaxCrossEntropyWithLogits(sparse=true): labels have dtype Float64",
               "Int32 or Int64");
  SoftmaxCrossEntropyWithLogits dense(false);
  EXPECT_ERROR(dense(logits(), Tensor::zeros({2}, DType::kInt32)),
               "SoftmaxCrossEntropyWithLogits(sparse=false): labels have dtype Int32");
  EXPECT_ERROR(MSELoss()(Tensor::zeros({2})), "MSELoss takes 2 input(s)");
}

TEST(WithLossCell, ComposesBackboneAndLoss) {
  auto backbone = std::make_shared<Dense>(3, 2);
  auto loss_fn = std::make_shared<MSELoss>();
  WithLossCell net(backbone, loss_fn);
  std::vector<std::string> names;
  for (const auto& [name, value] : net.parameters_and_names()) names.push_back(name);
  EXPECT_EQ(names, (std::vector<std::string>{"_backbone.weight", "_backbone.bias"}));
  EXPECT_EQ(net.backbone(), backbone);
  const Tensor x = Tensor::normal({4, 3});
  const Tensor y = Tensor::normal({4, 2});
  EXPECT_EQ(net(x, y).item(), (*loss_fn)((*backbone)(x), y).item());
  EXPECT_ERROR(WithLossCell(nullptr, loss_fn), "WithLossCell: the backbone is null");
  EXPECT_ERROR(net(x), "WithLossCell takes 2 input(s)");
}

}  // namespace
}  // namespace cleave::nn

#include "cleave/train/metrics.h"

#include <gtest/gtest.h>

#include <sstream>

#include "testing/gradcheck.h"

namespace cleave::train {
namespace {

// 4 samples, 3 classes.
Tensor scores() {
  return Tensor::from_vector<float>({0.1f, 0.7f, 0.2f,   // arg-max 1
                                     0.5f, 0.3f, 0.2f,   // arg-max 0
                                     0.2f, 0.3f, 0.5f,   // arg-max 2
                                     0.4f, 0.4f, 0.2f},  // tie: arg-max 0
                                    {4, 3});
}

TEST(Accuracy, CountsArgMaxMatchesOverBatches) {
  Accuracy acc;
  acc.update({scores(), Tensor::from_vector<int32_t>({1, 0, 1, 0})});
  EXPECT_DOUBLE_EQ(acc.eval(), 3.0 / 4.0);
  acc.update({scores(), Tensor::from_vector<int64_t>({0, 0, 0, 1})});
  EXPECT_DOUBLE_EQ(acc.eval(), 4.0 / 8.0);
  acc.clear();
  // One-hot labels: the arg-max is the class.
  acc.update({scores(), Tensor::from_vector<float>({0, 1, 0, 1, 0, 0, 0, 0, 1, 0, 0, 1}, {4, 3})});
  EXPECT_DOUBLE_EQ(acc.eval(), 3.0 / 4.0);
}

TEST(Accuracy, BadInputsAreClearErrors) {
  Accuracy acc;
  EXPECT_ERROR(acc.eval(), "Accuracy", "number of samples is 0");
  EXPECT_ERROR(acc.update({scores()}), "Accuracy", "got 1 inputs; expected 2");
  EXPECT_ERROR(acc.update({Tensor::ones({4}), Tensor::ones({4})}), "Accuracy", "y_pred",
               "shape (4)", "expected 2 dims");
  EXPECT_ERROR(acc.update({scores(), Tensor::from_vector<int32_t>({1, 0, 1})}), "Accuracy",
               "y (input 1) has shape (3)", "(4, 3)", "expected y of shape (4)");
  EXPECT_ERROR(acc.update({scores(), Tensor::ones({4, 2})}), "y (input 1) has shape (4, 2)");
  EXPECT_ERROR(acc.update({scores(), Tensor::from_vector<int32_t>({1, 0, 3, 0})}), "label 3",
               "sample 2", "[0, 3)");
}

TEST(TopKCategoricalAccuracy, LabelAmongKHighest) {
  TopKCategoricalAccuracy top2(2);
  // Sample 0: label 2 is 2nd (0.2 > 0.1): in. Sample 1: label 2 is 3rd: out. Sample 2: label 1
  // is 2nd: in. Sample 3: label 1 ties with class 0 (lower index first), so it is 2nd: in.
  top2.update({scores(), Tensor::from_vector<int32_t>({2, 2, 1, 1})});
  EXPECT_DOUBLE_EQ(top2.eval(), 3.0 / 4.0);
  TopKCategoricalAccuracy top1(1);
  top1.update({scores(), Tensor::from_vector<int32_t>({1, 0, 2, 1})});
  EXPECT_DOUBLE_EQ(top1.eval(), 3.0 / 4.0);  // the tie goes to class 0
  TopKCategoricalAccuracy top3(3);
  top3.update({scores(), Tensor::from_vector<int32_t>({2, 2, 1, 1})});
  EXPECT_DOUBLE_EQ(top3.eval(), 1.0);
}

TEST(TopKCategoricalAccuracy, BadInputsAreClearErrors) {
  EXPECT_ERROR(TopKCategoricalAccuracy(0), "TopKCategoricalAccuracy: k is 0", ">= 1");
  TopKCategoricalAccuracy top2(2);
  EXPECT_ERROR(top2.eval(), "TopKCategoricalAccuracy", "number of samples is 0");
  EXPECT_ERROR(top2.update({scores(), Tensor::from_vector<int32_t>({1, 0})}),
               "TopKCategoricalAccuracy", "y (input 1) has shape (2)");
}

TEST(LossMetric, AveragesBatchLosses) {
  Loss loss;
  EXPECT_EQ(loss.input_indexes(), std::vector<int>{0});
  loss.update({Tensor::scalar(2.0)});
  loss.update({Tensor::from_vector<float>({1.0f, 3.0f, 5.0f})});  // mean 3
  EXPECT_DOUBLE_EQ(loss.eval(), 2.5);
  loss.clear();
  EXPECT_ERROR(loss.eval(), "Loss", "number of batches is 0");
  EXPECT_ERROR(loss.update({Tensor::ones({2, 2})}), "Loss", "shape (2, 2)",
               "scalar or a non-empty 1-D");
  EXPECT_ERROR(loss.update({}), "Loss", "got 0 inputs; expected 1");
}

// NOTE [Metrics over ranks] in src/train/model.cc: the sums a data-parallel eval adds over ranks.
TEST(Metric, SumsAddOverPartsToTheWholeSetsValue) {
  Accuracy a, b, whole;
  a.update({scores(), Tensor::from_vector<int32_t>({1, 0, 1, 0})});  // 3 of 4
  b.update({scores(), Tensor::from_vector<int32_t>({0, 0, 0, 1})});  // 1 of 4
  whole.update({scores(), Tensor::from_vector<int32_t>({1, 0, 1, 0})});
  whole.update({scores(), Tensor::from_vector<int32_t>({0, 0, 0, 1})});
  EXPECT_EQ(a.sums(), (std::vector<double>{3, 4}));
  a.set_sums({a.sums()[0] + b.sums()[0], a.sums()[1] + b.sums()[1]});
  EXPECT_EQ(a.eval(), whole.eval());
  Loss l;
  l.update({Tensor::scalar(2.0)});
  l.set_sums({l.sums()[0] + 4.0, l.sums()[1] + 1});
  EXPECT_DOUBLE_EQ(l.eval(), 3.0);
  TopKCategoricalAccuracy top2(2);
  top2.update({scores(), Tensor::from_vector<int32_t>({2, 2, 1, 1})});
  EXPECT_EQ(top2.sums(), (std::vector<double>{3, 4}));
  EXPECT_ERROR(a.set_sums({1.0}), "Metric::set_sums: 1 sums given; this metric has 2");
}

TEST(EvalResult, PrintsLikeAPythonDict) {
  const EvalResult result({{"Accuracy", 0.9888822115384616}, {"Loss", 0.05}});
  EXPECT_EQ(result.to_string(), "{'Accuracy': 0.9888822115384616, 'Loss': 0.05}");
  std::ostringstream os;
  os << EvalResult({{"Accuracy", 1.0}});
  EXPECT_EQ(os.str(), "{'Accuracy': 1.0}");
  EXPECT_DOUBLE_EQ(result["Loss"], 0.05);
  EXPECT_TRUE(result.contains("Accuracy"));
  EXPECT_ERROR(result.at("Top5"), "no metric 'Top5'", "Accuracy, Loss");
  EXPECT_EQ(EvalResult().to_string(), "{}");
}

}  // namespace
}  // namespace cleave::train

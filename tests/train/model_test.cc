#include "cleave/train/model.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <atomic>
#include <filesystem>
#include <regex>

#include "testing/gradcheck.h"
#include "train/train_testing.h"

namespace cleave::train {
namespace {

using testing::SmallNet;

struct Parts {
  std::shared_ptr<SmallNet> net;
  std::shared_ptr<nn::SoftmaxCrossEntropyWithLogits> loss_fn;
  std::shared_ptr<optim::Momentum> opt;
};

Parts make_setup(uint64_t seed = 3) {
  set_seed(seed);
  Parts s;
  s.net = std::make_shared<SmallNet>();
  s.loss_fn = std::make_shared<nn::SoftmaxCrossEntropyWithLogits>(true, "mean");
  s.opt = std::make_shared<optim::Momentum>(s.net->trainable_params(), 0.05, 0.9);
  return s;
}

// Records every step's loss.
struct LossRecorder : Callback {
  std::vector<double> losses;
  std::vector<std::pair<int64_t, int64_t>> steps;  // (epoch, step in epoch)
  void on_step_end(RunContext& ctx) override {
    losses.push_back(ctx.loss_value());
    steps.emplace_back(ctx.cur_epoch_num, ctx.step_in_epoch);
  }
};

TEST(Model, TrainsAndEvaluates) {
  Parts s = make_setup();
  Model model(s.net, s.loss_fn, s.opt,
              {{"Accuracy", std::make_shared<Accuracy>()}, {"Loss", std::make_shared<Loss>()}});
  const auto train_ds = testing::blobs_dataset(256, 16);
  const auto eval_ds = testing::blobs_dataset(128, 16, /*seed=*/11);
  const double before = model.eval(eval_ds)["Accuracy"];
  auto rec = std::make_shared<LossRecorder>();
  model.train(10, train_ds, {rec});
  ASSERT_EQ(rec->losses.size(), 10u * 16u);
  EXPECT_EQ(rec->steps.front(), std::make_pair(int64_t{1}, int64_t{1}));
  EXPECT_EQ(rec->steps[16], std::make_pair(int64_t{2}, int64_t{1}));
  EXPECT_EQ(rec->steps.back(), std::make_pair(int64_t{10}, int64_t{16}));
  EXPECT_LT(rec->losses.back(), rec->losses.front() * 0.5);
  const EvalResult result = model.eval(eval_ds);
  EXPECT_GT(result["Accuracy"], 0.9);
  EXPECT_GT(result["Accuracy"], before);
  EXPECT_LT(result["Loss"], rec->losses.front());
  EXPECT_EQ(result.to_string().substr(0, 14), "{'Accuracy': 0");
  EXPECT_EQ(model.progress().step_num, 160);
  EXPECT_EQ(model.progress().epoch_num, 10);
}

TEST(Model, EvalComputesEveryMetricAndKeepsTrainMode) {
  Parts s = make_setup();
  Model model(s.net, s.loss_fn, s.opt,
              {{"Top3", std::make_shared<TopKCategoricalAccuracy>(3)},
               {"Accuracy", std::make_shared<Accuracy>()}});
  s.net->set_train(true);
  const EvalResult result = model.eval(testing::blobs_dataset(32, 16));
  EXPECT_DOUBLE_EQ(result["Top3"], 1.0);  // 3 classes: the label is always among the top 3
  EXPECT_GE(result["Accuracy"], 0.0);
  EXPECT_EQ(result.begin()->first, "Accuracy");  // printed in name order
  EXPECT_TRUE(s.net->training());
}

TEST(Model, PredictRunsWithoutGradients) {
  Parts s = make_setup();
  Model model(s.net, s.loss_fn, s.opt);
  const Tensor out = model.predict(Tensor::ones({2, 4}));
  EXPECT_EQ(out.shape(), (Shape{2, 3}));
  EXPECT_FALSE(out.requires_grad());
}

TEST(Model, SecondTrainCallCountsFromEpochOne) {
  Parts s = make_setup();
  Model model(s.net, s.loss_fn, s.opt);
  auto rec = std::make_shared<LossRecorder>();
  const auto ds = testing::blobs_dataset(32, 16);
  model.train(1, ds, {rec});
  model.train(1, ds, {rec});
  ASSERT_EQ(rec->steps.size(), 4u);
  EXPECT_EQ(rec->steps[2], std::make_pair(int64_t{1}, int64_t{1}));
  EXPECT_NE(rec->losses[0], rec->losses[2]);  // the weights moved on
}

TEST(Model, CallbackCanStopTraining) {
  struct StopAt3 : Callback {
    void on_step_end(RunContext& ctx) override {
      if (ctx.cur_step_num == 3) ctx.request_stop();
    }
  };
  Parts s = make_setup();
  Model model(s.net, s.loss_fn, s.opt);
  auto rec = std::make_shared<LossRecorder>();
  model.train(10, testing::blobs_dataset(64, 16), {std::make_shared<StopAt3>(), rec});
  EXPECT_EQ(rec->losses.size(), 3u);
}

TEST(Model, LossMonitorLinesComeFromTheLoop) {
  Parts s = make_setup();
  Model model(s.net, s.loss_fn, s.opt);
  ::testing::internal::CaptureStdout();
  model.train(2, testing::blobs_dataset(48, 16), {std::make_shared<LossMonitor>(2)});
  const std::string out = ::testing::internal::GetCapturedStdout();
  const std::regex lines(
      R"(epoch: 1 step: 2, loss is \d\.\d+\nepoch: 2 step: 1, loss is \d\.\d+\nepoch: 2 step: 3, loss is \d\.\d+\n)");
  EXPECT_TRUE(std::regex_match(out, lines)) << out;
}

TEST(Model, BadUseIsAClearError) {
  Parts s = make_setup();
  EXPECT_ERROR(Model(nullptr), "Model: the network is null");
  EXPECT_ERROR(Model(s.net, s.loss_fn, s.opt, {{"Accuracy", nullptr}}),
               "metric 'Accuracy' is null");
  Model no_opt(s.net, s.loss_fn);
  const auto ds = testing::blobs_dataset(32, 16);
  EXPECT_ERROR(no_opt.train(1, ds), "Model.train: the model has no optimizer");
  EXPECT_ERROR(no_opt.eval(ds), "Model.eval: the model has no metrics");
  Model model(s.net, nullptr, s.opt, {{"Loss", std::make_shared<Loss>()}});
  EXPECT_ERROR(model.train(0, ds), "Model.train: epoch is 0", ">= 1");
  EXPECT_ERROR(model.eval(ds), "needs the loss but the model has no loss_fn");
  Model ok(s.net, s.loss_fn, s.opt);
  EXPECT_ERROR(ok.train(1, testing::blobs_dataset(8, 16)), "the dataset is empty");
  auto one_column = dataset::GeneratorDataset(
      [](int64_t) { return dataset::Row{Tensor::ones({4})}; }, 4, {"image"});
  EXPECT_ERROR(ok.train(1, one_column), "rows have 1 columns (image)", "expected 2");
}

}  // namespace
}  // namespace cleave::train

namespace cleave::train {
namespace {

// A step that records the batch shapes it is given and claims (after its first call) to read
// no input, as a worker of a placed network whose part reads neither data nor label does.
class ShapeRecordingStep : public TrainStep {
 public:
  explicit ShapeRecordingStep(bool reads) : reads_(reads) {}
  Tensor operator()(const Tensor& data, const Tensor& label) override {
    rows.push_back(data.shape()[0]);
    labels.push_back(label.shape()[0]);
    return Tensor::scalar(1.0);
  }
  bool reads_inputs() const override { return reads_ || rows.empty(); }
  std::vector<int64_t> rows, labels;

 private:
  bool reads_;
};

// NOTE [Workers that read no batch]: from the second epoch on, such a worker replays the first
// epoch's batch shapes (the last, smaller batch included) without pulling rows.
TEST(Model, WorkersThatReadNoBatchReplayTheBatchShapes) {
  for (bool reads : {true, false}) {
    std::atomic<int> pulled{0};
    auto ds = dataset::GeneratorDataset(
                  [&](int64_t i) {
                    ++pulled;
                    return dataset::Row{Tensor::full({2}, static_cast<double>(i)),
                                        Tensor::full({}, 1.0, DType::kInt32)};
                  },
                  402, {"data", "label"})
                  ->batch(4);  // 100 batches of 4 rows, then one of 2, per epoch
    const int64_t per_epoch_pulls = 402;
    ASSERT_EQ(ds->get_dataset_size(), 101);
    const int pulls_before = pulled.load();
    Parts s = make_setup();
    Model model(s.net, s.loss_fn, s.opt);
    auto step = std::make_shared<ShapeRecordingStep>(reads);
    model.set_train_step(step);
    model.train(3, ds);
    std::vector<int64_t> expected;
    for (int e = 0; e < 3; ++e) {
      expected.insert(expected.end(), 100, 4);
      expected.push_back(2);
    }
    EXPECT_EQ(step->rows, expected) << "reads=" << reads;
    EXPECT_EQ(step->labels, expected);
    const int pulls = pulled.load() - pulls_before;
    if (reads) {
      EXPECT_EQ(pulls, 3 * per_epoch_pulls);
    } else {
      // The first epoch (the pipeline may prefetch a few batches of the next one), not three.
      EXPECT_GE(pulls, per_epoch_pulls);
      EXPECT_LT(pulls, 2 * per_epoch_pulls);
    }
    EXPECT_EQ(model.progress().step_num, 303);
  }
}

// A step that reads only some of its arguments (after its first call), as seed 000's worker 0
// (the label) and worker 3 (the image) do: records the values of what it reads, and the shapes
// and dtypes of both.
class PartReadingStep : public TrainStep {
 public:
  explicit PartReadingStep(std::vector<bool> read) : read_(std::move(read)) {}
  Tensor operator()(const Tensor& data, const Tensor& label) override {
    shapes.push_back(fmt::format("{} {} {} {}", data.shape().to_string(), dtype_name(data.dtype()),
                                 label.shape().to_string(), dtype_name(label.dtype())));
    if (read_[0]) data_values.push_back(data.to_double_vector());
    if (read_[1]) label_values.push_back(label.to_double_vector());
    ++calls_;
    return Tensor::scalar(1.0);
  }
  std::vector<bool> inputs_read() const override {
    return calls_ == 0 ? std::vector<bool>{true, true} : read_;
  }
  std::vector<std::string> shapes;
  std::vector<std::vector<double>> data_values, label_values;

 private:
  std::vector<bool> read_;
  int calls_ = 0;
};

struct PartRun {
  std::shared_ptr<PartReadingStep> step;
  int data_maps = 0;  // calls of the map on "data"
};

// Three epochs of 11 batches (10 of 4 rows, one of 2) through a step reading `read`.
PartRun train_reading(std::vector<bool> read) {
  set_seed(4);
  auto data_maps = std::make_shared<std::atomic<int>>(0);
  auto ds = dataset::GeneratorDataset(
                [](int64_t i) {
                  return dataset::Row{Tensor::full({3}, static_cast<double>(i)),
                                      Tensor::full({}, static_cast<double>(i % 10), DType::kInt32)};
                },
                42, {"data", "label"}, {.shuffle = true})
                ->map({[data_maps](const Tensor& x) {
                        ++*data_maps;
                        return x;
                      }},
                      {"data"})
                ->map({dataset::transforms::TypeCast(DType::kFloat32)}, {"label"})
                ->shuffle(16)
                ->batch(4);
  Parts s = make_setup();
  Model model(s.net, s.loss_fn, s.opt);
  PartRun run;
  run.step = std::make_shared<PartReadingStep>(std::move(read));
  model.set_train_step(run.step);
  model.train(3, ds);
  run.data_maps = data_maps->load();
  return run;
}

// NOTE [Workers that read no batch]: a step that reads only the label (or only the data) gets,
// from the second epoch on, rows computed without the other column's maps, that column filled
// with a batch of the recorded shape; what it reads is what the full pipeline gives.
TEST(Model, WorkersThatReadOneColumnPullOnlyThatColumn) {
  const PartRun all = train_reading({true, true});
  const PartRun label_only = train_reading({false, true});
  const PartRun data_only = train_reading({true, false});
  ASSERT_EQ(all.step->shapes.size(), 33u);
  EXPECT_EQ(all.data_maps, 3 * 42);
  EXPECT_EQ(data_only.data_maps, 3 * 42);
  // The first epoch computes the data (its shapes are recorded); prefetching may begin the
  // second before the first step tells which columns the step reads: at most a few batches.
  EXPECT_GE(label_only.data_maps, 42);
  EXPECT_LT(label_only.data_maps, 2 * 42);
  EXPECT_EQ(label_only.step->shapes, all.step->shapes);
  EXPECT_EQ(data_only.step->shapes, all.step->shapes);
  EXPECT_EQ(label_only.step->label_values, all.step->label_values);
  EXPECT_EQ(data_only.step->data_values, all.step->data_values);
  EXPECT_EQ(all.step->label_values.size(), 33u);
}

}  // namespace
}  // namespace cleave::train

namespace cleave::train {
namespace {

TEST(ModelCheckpoint, APlacedNetworkNeedsItsTrainingStep) {
  // A placed network is saved after gathering its parameters from the training step's workers
  // (NOTE [Saving a placed network]; tested in tests/parallel/partition_test.cc): a context that
  // names no step is an error, and nothing is written.
  Parts s = make_setup();
  const auto dir = std::filesystem::temp_directory_path() / "cleave_ckpt_placed";
  ModelCheckpoint cb(CheckpointConfig{.save_checkpoint_steps = 1}, "placed", dir.string());
  RunContext ctx;
  ctx.network = s.net.get();
  ctx.optimizer = s.opt.get();
  ctx.cur_epoch_num = 1;
  ctx.cur_step_num = 1;
  ctx.step_in_epoch = 1;
  ctx.placed = true;
  cb.on_train_begin(ctx);
  EXPECT_ERROR(cb.on_step_end(ctx), "ModelCheckpoint: the network is placed over several workers",
               "names no training step");
  EXPECT_TRUE(std::filesystem::is_empty(dir));  // nothing written
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace cleave::train

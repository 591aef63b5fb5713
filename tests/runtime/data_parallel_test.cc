// DATA_PARALLEL on thread ranks: N ranks with batch b train as one process with batch N * b,
// gradient buckets change nothing but the number of AllReduces and where they start, and
// parameter_broadcast makes ranks started from different seeds equal (NOTE [Gradient buckets] in
// cleave/parallel/data_parallel.h).
#include <fmt/ranges.h>
#include <gtest/gtest.h>

#include <cstring>

#include "cleave/cleave.h"
#include "cleave/core/random.h"
#include "testing/gradcheck.h"
#include "testing/ranks.h"

namespace cleave {
namespace {

class Mlp : public nn::Cell {
 public:
  Mlp() : Cell("Mlp") {
    fc1 = register_module("fc1", std::make_shared<nn::Dense>(16, 32));
    fc2 = register_module("fc2", std::make_shared<nn::Dense>(32, 32));
    fc3 = register_module("fc3", std::make_shared<nn::Dense>(32, 8));
    relu = register_module("relu", std::make_shared<nn::ReLU>());
  }
  Tensor construct(const Tensor& x) override { return (*fc3)((*relu)((*fc2)((*relu)((*fc1)(x))))); }
  std::shared_ptr<nn::Dense> fc1, fc2, fc3;
  std::shared_ptr<nn::ReLU> relu;
};

struct TrainRun {
  std::vector<double> losses;
  std::vector<Tensor> params;
  int all_reduces = 0;      // in the compiled step
  bool overlapped = false;  // some backward MatMul runs after the first AllReduce starts
  // Updates (ApplyMomentum) that run before the first op reading the last AllReduce, i.e. while
  // it is still in flight (NOTE [Updates in bucket order]).
  int updates_before_last_wait = 0;
};

TrainRun train(const Tensor& x, const Tensor& y, int steps, uint64_t seed) {
  std::shared_ptr<Mlp> net;
  {
    const SeededScope seeded(seed);  // NOTE [Global generator]
    net = std::make_shared<Mlp>();
  }
  auto loss = std::make_shared<nn::WithLossCell>(net, std::make_shared<nn::MSELoss>());
  auto opt = std::make_shared<optim::Momentum>(net->trainable_params(), 0.1, 0.9);
  optim::TrainOneStep step(loss, opt);
  TrainRun run;
  for (int s = 0; s < steps; ++s) run.losses.push_back(step(x, y).item());
  for (const Tensor& p : net->trainable_params()) run.params.push_back(p.clone());
  const ir::Graph& g = step.last_executor()->graph();
  int first = -1;
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    const ir::Node& n = g.nodes[i];
    if (!n.is_op()) continue;
    if (n.op->name == "AllReduce" || n.op->name == "FusedAllReduce") {
      ++run.all_reduces;
      if (first < 0) first = static_cast<int>(i);
    }
    if (first >= 0 && n.op->name == "MatMul") run.overlapped = true;
  }
  int last = -1, last_wait = -1;
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    const ir::Node& n = g.nodes[i];
    if (n.is_op() && (n.op->name == "AllReduce" || n.op->name == "FusedAllReduce")) {
      last = static_cast<int>(i);
    }
    for (const ir::ValueRef& v : n.inputs) {
      if (last >= 0 && v.node == last && last_wait < last) last_wait = static_cast<int>(i);
    }
  }
  for (int i = 0; i < last_wait; ++i) {
    const ir::Node& n = g.nodes[static_cast<size_t>(i)];
    if (n.is_op() && n.op->name == "ApplyMomentum") ++run.updates_before_last_wait;
  }
  return run;
}

// Each of `world` thread ranks trains on its `batch` rows of x and y.
std::vector<TrainRun> train_ranks(const runtime::AutoParallelContext& context, int world, int batch,
                                  const Tensor& x, const Tensor& y, int steps,
                                  bool same_seed = true,
                                  const std::string& backend = testing::default_job_backend()) {
  runtime::set_auto_parallel_context(context);
  std::vector<TrainRun> runs(world);
  testing::run_thread_job(
      world,
      [&](int rank) {
        runs[rank] = train(x.narrow_rows(rank * batch, batch).clone(),
                           y.narrow_rows(rank * batch, batch).clone(), steps,
                           same_seed ? 5 : 100 + static_cast<uint64_t>(rank));
      },
      backend);
  runtime::reset_auto_parallel_context();
  return runs;
}

bool bit_identical(const Tensor& a, const Tensor& b) {
  return a.shape() == b.shape() && a.dtype() == b.dtype() &&
         std::memcmp(a.raw_data(), b.raw_data(), a.nbytes()) == 0;
}

const runtime::AutoParallelContext kMean{.parallel_mode = runtime::DATA_PARALLEL,
                                         .gradients_mean = true};

TEST(DataParallel, NRanksWithBatchBTrainAsOneProcessWithBatchNB) {
  const int b = 4, steps = 4;
  for (int world : {2, 4, 8}) {
    set_seed(21);
    const Tensor x = Tensor::uniform({world * b, 16});
    const Tensor y = Tensor::uniform({world * b, 8});
    runtime::reset_auto_parallel_context();
    const TrainRun single = train(x, y, steps, 5);
    const std::vector<TrainRun> runs = train_ranks(kMean, world, b, x, y, steps);
    for (int s = 0; s < steps; ++s) {
      // Each rank's loss is the mean over its rows; their mean is the whole batch's.
      double mean = 0;
      for (const TrainRun& r : runs) mean += r.losses[s] / world;
      EXPECT_NEAR(mean, single.losses[s], 1e-5 * std::abs(single.losses[s]))
          << world << " ranks, step " << s;
    }
    EXPECT_LT(single.losses.back(), single.losses.front());
    for (int r = 0; r < world; ++r) {
      ASSERT_EQ(runs[r].params.size(), single.params.size());
      for (size_t p = 0; p < single.params.size(); ++p) {
        EXPECT_TRUE(testing::all_close(runs[r].params[p], single.params[p], 1e-6, 1e-5))
            << world << " ranks: rank " << r << " parameter " << p;
        EXPECT_TRUE(bit_identical(runs[r].params[p], runs[0].params[p]))
            << world << " ranks: rank " << r << " parameter " << p << " differs from rank 0's";
      }
    }
  }
}

// A bucket is one FusedAllReduce of its gradients: on inproc the default joins and splits them
// (NOTE [AllReduce into other buffers] in cleave/comm/process_group.h), on gloo's shared memory the
// transport reads and writes them where they lie. Both sum in rank order.
TEST(DataParallel, BucketsAreBitIdenticalToOneAllReducePerGradient) {
  const int world = 4, b = 4, steps = 3;
  set_seed(22);
  const Tensor x = Tensor::uniform({world * b, 16});
  const Tensor y = Tensor::uniform({world * b, 8});
  runtime::AutoParallelContext per_gradient = kMean, small = kMean;
  per_gradient.bucket_cap_mb = 0;
  small.bucket_cap_mb = 5000.0 / (1 << 20);  // about 5 kB: fc2's weight (4 kB) and a bias or two
  for (const std::string backend : {"inproc", "gloo"}) {
    if (!comm::backend_available(backend)) continue;
    SCOPED_TRACE(backend);
    const std::vector<TrainRun> one =
        train_ranks(per_gradient, world, b, x, y, steps, true, backend);
    const std::vector<TrainRun> few = train_ranks(small, world, b, x, y, steps, true, backend);
    const std::vector<TrainRun> whole =
        train_ranks(kMean, world, b, x, y, steps, true, backend);  // default 25 MB
    EXPECT_EQ(one[0].all_reduces, 6);                              // 3 weights and 3 biases
    EXPECT_GT(few[0].all_reduces, 1);
    EXPECT_LT(few[0].all_reduces, 6);
    EXPECT_EQ(whole[0].all_reduces, 1);  // all of it fits the first bucket (1 MB)
    for (int r = 0; r < world; ++r) {
      for (size_t p = 0; p < one[r].params.size(); ++p) {
        EXPECT_TRUE(bit_identical(few[r].params[p], one[r].params[p])) << "rank " << r << " " << p;
        EXPECT_TRUE(bit_identical(whole[r].params[p], one[r].params[p]))
            << "rank " << r << " " << p;
      }
      for (int s = 0; s < steps; ++s) {
        EXPECT_EQ(few[r].losses[s], one[r].losses[s]);
        EXPECT_EQ(whole[r].losses[s], one[r].losses[s]);
      }
    }
  }
}

TEST(DataParallel, BucketsStartBeforeTheBackwardPassEndsAndUpdatesWaitOnlyForTheirOwn) {
  // One AllReduce per gradient: fc3's gradients are the first computed, so their AllReduce is
  // moved ahead of fc2's and fc1's backward MatMuls, which run while it is in flight.
  const int world = 2, b = 4;
  set_seed(23);
  const Tensor x = Tensor::uniform({world * b, 16});
  const Tensor y = Tensor::uniform({world * b, 8});
  runtime::AutoParallelContext per_gradient = kMean;
  per_gradient.bucket_cap_mb = 0;
  for (const TrainRun& r : train_ranks(per_gradient, world, b, x, y, 1)) {
    EXPECT_TRUE(r.overlapped);
    // The other 5 updates run while the AllReduce of the last gradient computed (one of fc1's)
    // is in flight: each update waits only for its own bucket. (In trace order fc1's updates
    // come first and every update waited for the last AllReduce: 0.)
    EXPECT_EQ(r.updates_before_last_wait, 5);
  }
  // One bucket for everything starts after the last gradient: nothing left to overlap.
  for (const TrainRun& r : train_ranks(kMean, world, b, x, y, 1)) {
    EXPECT_FALSE(r.overlapped);
    EXPECT_EQ(r.updates_before_last_wait, 0);
  }
}

TEST(DataParallel, ParameterBroadcastMakesRanksStartedFromDifferentSeedsEqual) {
  const int world = 2, b = 4, steps = 2;
  set_seed(24);
  const Tensor x = Tensor::uniform({world * b, 16});
  const Tensor y = Tensor::uniform({world * b, 8});
  runtime::AutoParallelContext broadcast = kMean;
  broadcast.parameter_broadcast = true;
  const std::vector<TrainRun> with = train_ranks(broadcast, world, b, x, y, steps, false);
  const std::vector<TrainRun> without = train_ranks(kMean, world, b, x, y, steps, false);
  bool differ = false;
  for (size_t p = 0; p < with[0].params.size(); ++p) {
    EXPECT_TRUE(bit_identical(with[1].params[p], with[0].params[p])) << "parameter " << p;
    differ = differ || !bit_identical(without[1].params[p], without[0].params[p]);
  }
  EXPECT_TRUE(differ) << "without parameter_broadcast, ranks from other seeds should differ";
}

class ConvBn : public nn::Cell {
 public:
  ConvBn() : Cell("ConvBn") {
    conv = register_module("conv", std::make_shared<nn::Conv2d>(2, 4, 3));
    bn = register_module("bn", std::make_shared<nn::BatchNorm2d>(4));
    fc = register_module("fc", std::make_shared<nn::Dense>(4 * 4 * 4, 3));
  }
  Tensor construct(const Tensor& x) override {
    return (*fc)(ops::flatten(ops::relu((*bn)((*conv)(x)))));
  }
  std::shared_ptr<nn::Conv2d> conv;
  std::shared_ptr<nn::BatchNorm2d> bn;
  std::shared_ptr<nn::Dense> fc;
};

struct BnRun {
  std::vector<Tensor> trainable, moving;
};

BnRun train_bn(const Tensor& x, const Tensor& y, int steps) {
  std::shared_ptr<ConvBn> net;
  {
    const SeededScope seeded(9);  // NOTE [Global generator]
    net = std::make_shared<ConvBn>();
  }
  auto loss = std::make_shared<nn::WithLossCell>(net, std::make_shared<nn::MSELoss>());
  optim::TrainOneStep step(loss,
                           std::make_shared<optim::Momentum>(net->trainable_params(), 0.1, 0.9));
  for (int s = 0; s < steps; ++s) step(x, y);
  BnRun run;
  for (const Tensor& p : net->trainable_params()) run.trainable.push_back(p.clone());
  run.moving = {net->bn->moving_mean.clone(), net->bn->moving_variance.clone()};
  return run;
}

// BatchNorm: each rank normalises with its own sub-batch's statistics (as MindSpore's data
// parallel does). What holds: the ranks' trainable parameters are bit-identical (every rank
// applies the same averaged gradient); the moving statistics are each rank's own; and when every
// rank's batch is the same, the job equals one process on that batch.
TEST(DataParallel, BatchNormNormalisesEachRanksOwnBatch) {
  const int world = 2, b = 4, steps = 3;
  set_seed(25);
  const Tensor x = Tensor::uniform({world * b, 2, 4, 4});
  const Tensor y = Tensor::uniform({world * b, 3});
  runtime::set_auto_parallel_context(kMean);
  std::vector<BnRun> own(world), same(world);
  testing::run_thread_job(world, [&](int rank) {
    own[rank] =
        train_bn(x.narrow_rows(rank * b, b).clone(), y.narrow_rows(rank * b, b).clone(), steps);
  });
  testing::run_thread_job(world, [&](int rank) {
    same[rank] = train_bn(x.narrow_rows(0, b).clone(), y.narrow_rows(0, b).clone(), steps);
  });
  runtime::reset_auto_parallel_context();
  const BnRun single = train_bn(x.narrow_rows(0, b).clone(), y.narrow_rows(0, b).clone(), steps);
  for (size_t p = 0; p < own[0].trainable.size(); ++p) {
    EXPECT_TRUE(bit_identical(own[1].trainable[p], own[0].trainable[p])) << "parameter " << p;
    EXPECT_TRUE(testing::all_close(same[0].trainable[p], single.trainable[p], 1e-6, 1e-5))
        << "parameter " << p;
  }
  EXPECT_FALSE(testing::all_close(own[1].moving[0], own[0].moving[0], 1e-5, 1e-3))
      << "each rank's moving mean follows its own batches: rank 0 "
      << fmt::format("{}", own[0].moving[0].to_vector<float>()) << ", rank 1 "
      << fmt::format("{}", own[1].moving[0].to_vector<float>()) << ", one process "
      << fmt::format("{}", single.moving[0].to_vector<float>());
  EXPECT_TRUE(testing::all_close(same[0].moving[0], single.moving[0], 1e-6, 1e-5));
}

// 24 samples of 16 features with labels in 0..7; shard k of 2 (batch 4) holds samples k, k + 2, ...
dataset::DatasetPtr eval_set(int64_t shards, int64_t shard) {
  set_seed(31);
  const Tensor x = Tensor::uniform({24, 16});
  auto get_item = [x](int64_t i) -> dataset::Row {
    return {x.narrow_rows(i, 1).view({16}).clone(),
            Tensor::scalar(static_cast<int32_t>((i * 5) % 8), DType::kInt32)};
  };
  return dataset::GeneratorDataset(get_item, 24, {"data", "label"},
                                   {.num_shards = shards, .shard_id = shard})
      ->batch(4, true);
}

// A metric of the user's that cannot be added over ranks (no sums()): the samples seen.
class SamplesSeen : public train::Metric {
 public:
  void clear() override { n_ = 0; }
  void update(const std::vector<Tensor>& inputs) override { n_ += inputs[1].shape()[0]; }
  double eval() const override { return static_cast<double>(n_); }

 private:
  int64_t n_ = 0;
};

train::EvalResult evaluate(const dataset::DatasetPtr& data) {
  std::shared_ptr<Mlp> net;
  {
    const SeededScope seeded(5);  // NOTE [Global generator]
    net = std::make_shared<Mlp>();
  }
  train::Model model(net, std::make_shared<nn::SoftmaxCrossEntropyWithLogits>(true, "mean"),
                     nullptr,
                     {{"Accuracy", std::make_shared<train::Accuracy>()},
                      {"Loss", std::make_shared<train::Loss>()},
                      {"Seen", std::make_shared<SamplesSeen>()}});
  return model.eval(data);
}

// NOTE [Metrics over ranks] in src/train/model.cc.
TEST(DataParallel, EvalGivesEveryRankTheMetricsOfTheWholeSet) {
  const int world = 2;
  runtime::reset_auto_parallel_context();
  const train::EvalResult whole = evaluate(eval_set(1, 0));
  const train::EvalResult shard0 = evaluate(eval_set(world, 0));
  const train::EvalResult shard1 = evaluate(eval_set(world, 1));
  // Each shard alone gives another value, so equal results below come from adding the shards.
  EXPECT_NE(shard0["Accuracy"], shard1["Accuracy"]);
  EXPECT_NE(shard0["Loss"], shard1["Loss"]);
  EXPECT_EQ(whole["Seen"], 24);
  std::vector<train::EvalResult> results(world);
  runtime::set_auto_parallel_context(kMean);
  // The data sets are made here: the global generator they draw from is not thread-safe.
  const std::vector<dataset::DatasetPtr> shards = {eval_set(world, 0), eval_set(world, 1)};
  testing::run_thread_job(world, [&](int rank) { results[rank] = evaluate(shards[rank]); });
  runtime::reset_auto_parallel_context();
  for (int rank = 0; rank < world; ++rank) {
    EXPECT_EQ(results[rank]["Accuracy"], whole["Accuracy"]) << "rank " << rank;
    // The mean of 6 batch losses either way; the batches hold other samples (each loss is a
    // float32 mean), so equal within float32 rounding.
    EXPECT_NEAR(results[rank]["Loss"], whole["Loss"], 1e-6 * std::abs(whole["Loss"]))
        << "rank " << rank;
    EXPECT_EQ(results[rank]["Seen"], 12) << "rank " << rank << ": its own shard, not added";
  }
}

TEST(DataParallel, ABadBucketSizeIsNamed) {
  runtime::AutoParallelContext c = kMean;
  c.bucket_cap_mb = -1;
  EXPECT_ERROR(runtime::set_auto_parallel_context(c), "bucket_cap_mb is -1", "expected a size");
  runtime::reset_auto_parallel_context();
}

}  // namespace
}  // namespace cleave

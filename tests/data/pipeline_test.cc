// map / shuffle / batch / repeat / take, GeneratorDataset, determinism, prefetch shutdown and
// errors from background threads.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <thread>

#include "cleave/data/dataset.h"
#include "cleave/data/transforms.h"
#include "data/data_files.h"
#include "testing/gradcheck.h"

namespace cleave::dataset {
namespace {

using testing::collect;

// Rows (x = i as Float32 of shape (2), y = i as Int32 scalar) for i in [0, n).
DatasetPtr numbers(int64_t n, GeneratorOptions options = {}) {
  return GeneratorDataset(
      [](int64_t i) -> Row {
        return {Tensor::from_vector<float>({static_cast<float>(i), static_cast<float>(i)}),
                Tensor::scalar(static_cast<double>(i), DType::kInt32)};
      },
      n, {"x", "y"}, options);
}

std::vector<int64_t> labels_of(const std::vector<Row>& rows) {
  std::vector<int64_t> out;
  for (const Row& row : rows) {
    for (double v : row[1].to_double_vector()) out.push_back(static_cast<int64_t>(v));
  }
  return out;
}

std::vector<int64_t> iota(int64_t n) {
  std::vector<int64_t> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[i] = i;
  return v;
}

TEST(Generator, IterableFormRunsTheSourceEachEpoch) {
  int epochs = 0;
  auto ds = GeneratorDataset(
      [&epochs]() -> RowGenerator {
        ++epochs;
        auto i = std::make_shared<int>(0);
        return [i](Row& row) {
          if (*i == 4) return false;
          row = {Tensor::scalar(*i, DType::kFloat32), Tensor::scalar(*i * 10, DType::kInt32)};
          ++*i;
          return true;
        };
      },
      {"input", "label"});
  EXPECT_EQ(ds->get_dataset_size(), 4);
  auto rows = collect(ds->batch(3));
  ASSERT_EQ(rows.size(), 2u);
  EXPECT_EQ(rows[0][1].to_vector<int32_t>(), (std::vector<int32_t>{0, 10, 20}));
  EXPECT_EQ(rows[1][1].to_vector<int32_t>(), (std::vector<int32_t>{30}));
  EXPECT_EQ(epochs, 2);
}

TEST(Batch, StacksRowsAndKeepsOrDropsTheRemainder) {
  auto ds = numbers(10, {});
  auto kept = ds->batch(4);
  EXPECT_EQ(kept->get_dataset_size(), 3);
  auto rows = collect(kept);
  ASSERT_EQ(rows.size(), 3u);
  EXPECT_EQ(rows[0][0].shape(), (Shape{4, 2}));
  EXPECT_EQ(rows[0][1].shape(), (Shape{4}));
  EXPECT_EQ(rows[2][0].shape(), (Shape{2, 2}));
  EXPECT_EQ(rows[1][0].to_vector<float>(), (std::vector<float>{4, 4, 5, 5, 6, 6, 7, 7}));
  auto dropped = ds->batch(4, true);
  EXPECT_EQ(dropped->get_dataset_size(), 2);
  EXPECT_EQ(collect(dropped).size(), 2u);
  EXPECT_EQ(labels_of(collect(dropped)), (std::vector<int64_t>{0, 1, 2, 3, 4, 5, 6, 7}));
}

TEST(Batch, RowsOfDifferentShapesAreAnError) {
  auto ds =
      GeneratorDataset([](int64_t i) -> Row { return {Tensor::zeros(Shape{i + 1})}; }, 3, {"x"});
  auto it = ds->batch(2)->create_tuple_iterator();
  Row row;
  EXPECT_ERROR(it->next(row), "batch", "row 1", "column 'x'", "shape (2)", "expected shape (1)");
}

TEST(Repeat, PassesOverTheChildCountTimesWithNewOrders) {
  GeneratorOptions options;
  options.shuffle = true;
  set_seed(1);
  auto ds = numbers(6, options)->repeat(3);
  EXPECT_EQ(ds->get_dataset_size(), 18);
  auto labels = labels_of(collect(ds));
  ASSERT_EQ(labels.size(), 18u);
  std::vector<std::vector<int64_t>> passes;
  for (int p = 0; p < 3; ++p) {
    std::vector<int64_t> pass(labels.begin() + 6 * p, labels.begin() + 6 * (p + 1));
    passes.push_back(pass);
    std::sort(pass.begin(), pass.end());
    EXPECT_EQ(pass, iota(6));
  }
  EXPECT_TRUE(passes[0] != passes[1] || passes[1] != passes[2]);
}

TEST(Take, KeepsTheFirstRowsOfEveryEpochInTheFullRunsOrder) {
  GeneratorOptions options;
  options.shuffle = true;
  auto build = [&](int64_t take) {
    set_seed(4);
    auto ds = numbers(10, options)->batch(2, true);
    return take == 0 ? ds : ds->take(take);
  };
  auto full = build(0);
  auto taken = build(3);
  EXPECT_EQ(taken->get_dataset_size(), 3);
  // Two epochs through one iterator, as Model.train iterates.
  for (int epoch = 0; epoch < 2; ++epoch) {
    auto a = collect(full), b = collect(taken);
    ASSERT_EQ(a.size(), 5u);
    ASSERT_EQ(b.size(), 3u);
    for (size_t i = 0; i < b.size(); ++i) {
      EXPECT_EQ(b[i][1].to_vector<int32_t>(), a[i][1].to_vector<int32_t>()) << "epoch " << epoch;
    }
  }
  // More than there is, and -1: every row.
  EXPECT_EQ(build(0)->take(50)->get_dataset_size(), 5);
  EXPECT_EQ(collect(build(0)->take(50)).size(), 5u);
  EXPECT_EQ(collect(build(0)->take(-1)).size(), 5u);
}

TEST(Take, StopsPullingFromItsChildAfterCountRows) {
  auto pulled = std::make_shared<std::atomic<int64_t>>(0);
  auto ds = GeneratorDataset(
      [pulled](int64_t i) -> Row {
        ++*pulled;
        return {Tensor::scalar(static_cast<double>(i))};
      },
      1000, {"x"});
  auto it = ds->take(4)->create_tuple_iterator();
  Row row;
  int64_t rows = 0;
  while (it->next(row)) ++rows;
  EXPECT_EQ(rows, 4);
  it.reset();
  // The prefetch queue may have pulled a few rows ahead, never the whole epoch.
  EXPECT_LE(pulled->load(), 4 + config::get_prefetch_size() + 1);
}

TEST(Shuffle, IsAPermutationDeterministicPerSeedAndEpoch) {
  auto run = [](uint64_t seed) {
    set_seed(seed);
    auto ds = numbers(100)->shuffle(16);
    std::vector<std::vector<int64_t>> epochs;
    for (int e = 0; e < 3; ++e) epochs.push_back(labels_of(collect(ds)));
    return epochs;
  };
  auto a = run(7), b = run(7), c = run(8);
  EXPECT_EQ(a, b);
  EXPECT_NE(a[0], c[0]);
  EXPECT_NE(a[0], a[1]);
  EXPECT_NE(a[0], iota(100));
  for (auto epoch : a) {
    std::sort(epoch.begin(), epoch.end());
    EXPECT_EQ(epoch, iota(100));
  }
  // A buffer of 1 keeps the order.
  EXPECT_EQ(labels_of(collect(numbers(10)->shuffle(1))), iota(10));
}

TEST(Pipeline, MultiEpochIteratorGivesTheEpochsOfSeparateIterators) {
  auto build = [] {
    set_seed(21);
    return numbers(30)->shuffle(8)->batch(4);
  };
  auto separate = build();
  std::vector<std::vector<int64_t>> expected;
  for (int e = 0; e < 3; ++e) expected.push_back(labels_of(collect(separate)));
  auto chained = build();
  auto it = chained->create_tuple_iterator(3);
  Row row;
  for (int e = 0; e < 3; ++e) {
    std::vector<Row> rows;
    while (it->next(row)) rows.push_back(row);
    EXPECT_EQ(rows.size(), 8u) << "epoch " << e;
    EXPECT_EQ(labels_of(rows), expected[e]) << "epoch " << e;
  }
  EXPECT_FALSE(it->next(row));
  EXPECT_FALSE(it->next(row));
  // The next call continues with epoch 3, as a fourth separate iterator would.
  EXPECT_EQ(labels_of(collect(chained)), labels_of(collect(separate)));
  EXPECT_ERROR(chained->create_tuple_iterator(0), "create_tuple_iterator", "num_epochs is 0");
  // Destroyed mid-way through its second epoch.
  auto partial = chained->create_tuple_iterator(5);
  while (partial->next(row)) {
  }
  ASSERT_TRUE(partial->next(row));
  partial.reset();
}

TEST(Map, AppliesOperationsInOrderToTheNamedColumns) {
  auto ds = numbers(5)
                ->map({vision::Rescale(2.0, 1.0), vision::Rescale(1.0, -1.0)}, {"x"})
                ->map({transforms::TypeCast(DType::kFloat32)}, {"y"});
  auto rows = collect(ds);
  ASSERT_EQ(rows.size(), 5u);
  EXPECT_EQ(rows[3][0].to_vector<float>(), (std::vector<float>{6, 6}));
  EXPECT_EQ(rows[3][1].dtype(), DType::kFloat32);
  EXPECT_ERROR(numbers(5)->map({vision::HWC2CHW()}, {"image"}), "map", "input column 'image'",
               "'x', 'y'");
  EXPECT_ERROR(numbers(5)->map({}, {"x"}), "map", "operations is empty");
  EXPECT_ERROR(numbers(5)->map({vision::HWC2CHW()}, {"x"}, 0), "num_parallel_workers is 0");
}

// With random transforms and several workers the rows come out in order and equal to those of one
// worker: randomness depends on the seed, epoch and position only.
TEST(Map, ParallelWorkersKeepOrderAndDeterminism) {
  auto build = [](int workers) {
    set_seed(42);
    auto ds = GeneratorDataset(
        [](int64_t i) -> Row {
          std::vector<float> pixels(8 * 8);
          for (size_t k = 0; k < pixels.size(); ++k) pixels[k] = static_cast<float>(i * 100 + k);
          return {Tensor::from_vector(pixels, Shape{8, 8, 1}), Tensor::scalar(i, DType::kInt32)};
        },
        64, {"image", "label"});
    return ds->map({vision::RandomCrop({6, 6}, {2}), vision::RandomHorizontalFlip(0.5)}, {"image"},
                   workers);
  };
  auto one = collect(build(1));
  auto four = build(4);
  auto parallel = collect(four);
  ASSERT_EQ(one.size(), 64u);
  ASSERT_EQ(parallel.size(), 64u);
  for (size_t i = 0; i < one.size(); ++i) {
    EXPECT_EQ(parallel[i][1].item(), static_cast<double>(i));
    EXPECT_EQ(one[i][0].to_vector<float>(), parallel[i][0].to_vector<float>()) << "row " << i;
  }
  // The next epoch draws differently.
  auto next_epoch = collect(four);
  int differ = 0;
  for (size_t i = 0; i < one.size(); ++i) {
    differ += next_epoch[i][0].to_vector<float>() != parallel[i][0].to_vector<float>();
  }
  EXPECT_GT(differ, 32);
}

TEST(Pipeline, SeedCreateDatasetIsDeterministic) {
  testing::TempDir dir;
  testing::write_mnist(dir.path(), "train", 40);
  auto build = [&] {
    set_seed(9);
    auto ds = MnistDataset(dir.path());
    ds = ds->map({transforms::TypeCast(DType::kInt32)}, {"label"});
    ds = ds->map({vision::Resize({32, 32}, vision::Inter::kLinear)}, {"image"});
    ds = ds->map({vision::Rescale(1.0 / 255.0, 0.0)}, {"image"}, 2);
    ds = ds->map({vision::Rescale(1 / 0.3081, -1 * 0.1307 / 0.3081)}, {"image"});
    ds = ds->map({vision::HWC2CHW()}, {"image"}, 3);
    return ds->shuffle(10000)->batch(8, true)->repeat(2);
  };
  auto a = build();
  auto b = build();
  EXPECT_EQ(a->get_dataset_size(), 10);
  auto ra = collect(a), rb = collect(b);
  ASSERT_EQ(ra.size(), 10u);
  EXPECT_EQ(ra[0][0].shape(), (Shape{8, 1, 32, 32}));
  EXPECT_EQ(ra[0][1].shape(), (Shape{8}));
  EXPECT_EQ(ra[0][1].dtype(), DType::kInt32);
  for (size_t i = 0; i < ra.size(); ++i) {
    EXPECT_EQ(ra[i][0].to_vector<float>(), rb[i][0].to_vector<float>());
    EXPECT_EQ(ra[i][1].to_vector<int32_t>(), rb[i][1].to_vector<int32_t>());
  }
}

TEST(Pipeline, BadArgumentsAreErrors) {
  auto ds = numbers(4);
  EXPECT_ERROR(ds->batch(0), "batch", "batch_size is 0", "> 0");
  EXPECT_ERROR(ds->shuffle(0), "shuffle", "buffer_size is 0", "> 0");
  EXPECT_ERROR(ds->shuffle(-3), "buffer_size is -3");
  EXPECT_ERROR(ds->repeat(0), "repeat", "count is 0");
  EXPECT_ERROR(ds->take(0), "take", "count is 0", ">= 1, or -1");
  EXPECT_ERROR(ds->take(-2), "take", "count is -2");
  EXPECT_ERROR(config::set_prefetch_size(0), "set_prefetch_size", "size is 0");
  EXPECT_ERROR(GeneratorDataset([](int64_t) -> Row { return {}; }, 3, {"x"},
                                {.num_shards = 2, .shard_id = 2}),
               "GeneratorDataset", "shard_id is 2");
}

// Destroying an iterator mid-epoch stops its threads (the test would hang otherwise) and
// releases the rows it buffered.
TEST(Pipeline, DestroyingAnIteratorMidEpochStopsItsThreads) {
  auto produced = std::make_shared<std::atomic<int64_t>>(0);
  auto alive = std::make_shared<int>(0);
  std::weak_ptr<int> watch = alive;
  {
    auto ds = GeneratorDataset(
        [produced, alive](int64_t i) -> Row {
          ++*produced;
          return {Tensor::scalar(static_cast<double>(i))};
        },
        1000000, {"x"});
    alive.reset();
    ds = ds->map({vision::Rescale(2.0, 0.0)}, {"x"}, 4)->shuffle(4)->batch(2);
    for (int trial = 0; trial < 3; ++trial) {
      auto it = ds->create_tuple_iterator();
      Row row;
      ASSERT_TRUE(it->next(row));
      ASSERT_TRUE(it->next(row));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    // Bounded queues: only a few rows beyond those taken were produced.
    EXPECT_LT(produced->load(), 3 * 200);
  }
  EXPECT_TRUE(watch.expired());  // the pipeline and its source are freed with the last handle
}

TEST(Pipeline, ErrorsOnWorkerThreadsReachTheCallerIntact) {
  auto failing = [](const Tensor& x) -> Tensor {
    if (x.item() == 5) throw Error("my transform: cannot handle row 5");
    return x;
  };
  for (int workers : {1, 3}) {
    auto ds = numbers(10)->map({failing}, {"y"}, workers);
    auto it = ds->create_tuple_iterator();
    Row row;
    for (int i = 0; i < 5; ++i) {
      ASSERT_TRUE(it->next(row));
      EXPECT_EQ(row[1].item(), i);
    }
    EXPECT_ERROR(it->next(row), "my transform: cannot handle row 5");
  }
  // From a source (a worker thread of the prefetch queue).
  auto bad_source = GeneratorDataset(
      [](int64_t i) -> Row {
        if (i == 2) throw Error("source: row 2 is unreadable");
        return {Tensor::scalar(0.0)};
      },
      4, {"x"});
  auto it = bad_source->create_tuple_iterator();
  Row row;
  EXPECT_TRUE(it->next(row));
  EXPECT_TRUE(it->next(row));
  EXPECT_ERROR(it->next(row), "source: row 2 is unreadable");
  EXPECT_FALSE(it->next(row));
  // A transform given the wrong input names itself.
  auto wrong = numbers(3)->map({vision::HWC2CHW()}, {"y"}, 2);
  auto it2 = wrong->create_tuple_iterator();
  EXPECT_ERROR(it2->next(row), "HWC2CHW", "shape ()", "(H, W, C)");
}

}  // namespace
}  // namespace cleave::dataset

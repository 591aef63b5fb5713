// NOTE [Column projection]: iterators that compute only some columns skip the maps of the others
// and give the needed columns exactly as the unprojected pipeline does, in the same order.
#include <gtest/gtest.h>

#include <atomic>
#include <memory>
#include <random>

#include "cleave/data/dataset.h"
#include "cleave/data/transforms.h"
#include "data/data_files.h"
#include "testing/gradcheck.h"

namespace cleave::dataset {
namespace {

// A transform that counts its calls (a user transform, as PyFunc would be).
Transform counted(Transform op, std::shared_ptr<std::atomic<int>> calls) {
  return [op = std::move(op), calls](const Tensor& x) {
    ++*calls;
    return op(x);
  };
}

// Every row of `num_epochs` epochs through one iterator asking for `needed`.
std::vector<Row> rows_of(const DatasetPtr& ds, int64_t num_epochs, const ColumnMask& needed) {
  std::vector<Row> rows;
  auto it = ds->create_tuple_iterator(num_epochs, needed);
  Row row;
  for (int64_t e = 0; e < num_epochs; ++e) {
    while (it->next(row)) rows.push_back(row);
  }
  return rows;
}

// Seed 000's create_dataset (examples/common/lenet.h) over `dir`, each map's calls counted.
struct SeedPipeline {
  DatasetPtr ds;
  std::shared_ptr<std::atomic<int>> label_calls = std::make_shared<std::atomic<int>>(0);
  std::shared_ptr<std::atomic<int>> image_calls = std::make_shared<std::atomic<int>>(0);
};

SeedPipeline seed_pipeline(const std::string& dir, int workers) {
  set_seed(5);
  SeedPipeline p;
  auto ds = MnistDataset(dir);
  ds = ds->map({counted(transforms::TypeCast(DType::kInt32), p.label_calls)}, {"label"}, workers);
  ds = ds->map({counted(vision::Resize({32, 32}, vision::Inter::kLinear), p.image_calls)},
               {"image"}, workers);
  ds = ds->map({counted(vision::Rescale(1.0 / 255.0, 0.0), p.image_calls)}, {"image"}, workers);
  ds = ds->map({counted(vision::Rescale(1 / 0.3081, -1 * 0.1307 / 0.3081), p.image_calls)},
               {"image"}, workers);
  ds = ds->map({counted(vision::HWC2CHW(), p.image_calls)}, {"image"}, workers);
  p.ds = ds->shuffle(10000)->batch(8, true)->repeat(2);
  return p;
}

TEST(Projection, SeedPipelineSkipsTheMapsOfTheUnneededColumn) {
  testing::TempDir dir;
  testing::write_mnist(dir.path(), "train", 40);
  for (int workers : {1, 2}) {
    SCOPED_TRACE(workers);
    SeedPipeline full = seed_pipeline(dir.path(), workers);
    const std::vector<Row> all = rows_of(full.ds, 2, {true, true});
    ASSERT_EQ(all.size(), 20u);  // 2 epochs of 2 passes of 5 batches
    EXPECT_EQ(full.label_calls->load(), 160);
    EXPECT_EQ(full.image_calls->load(), 4 * 160);

    SeedPipeline labels = seed_pipeline(dir.path(), workers);
    const std::vector<Row> label_rows = rows_of(labels.ds, 2, {false, true});
    EXPECT_EQ(labels.label_calls->load(), 160);
    EXPECT_EQ(labels.image_calls->load(), 0);

    SeedPipeline images = seed_pipeline(dir.path(), workers);
    const std::vector<Row> image_rows = rows_of(images.ds, 2, {true, false});
    EXPECT_EQ(images.label_calls->load(), 0);
    EXPECT_EQ(images.image_calls->load(), 4 * 160);

    // No column (a worker that only needs the row count): no map runs, no column is decoded.
    SeedPipeline none = seed_pipeline(dir.path(), workers);
    const std::vector<Row> empty_rows = rows_of(none.ds, 2, {false, false});
    EXPECT_EQ(none.label_calls->load() + none.image_calls->load(), 0);
    ASSERT_EQ(empty_rows.size(), all.size());
    for (const Row& row : empty_rows) {
      ASSERT_EQ(row.size(), 2u);
      EXPECT_FALSE(row[0].defined() || row[1].defined());
    }

    ASSERT_EQ(label_rows.size(), all.size());
    ASSERT_EQ(image_rows.size(), all.size());
    for (size_t i = 0; i < all.size(); ++i) {
      EXPECT_FALSE(label_rows[i][0].defined());
      EXPECT_FALSE(image_rows[i][1].defined());
      ASSERT_EQ(label_rows[i][1].shape(), (Shape{8}));
      ASSERT_EQ(image_rows[i][0].shape(), (Shape{8, 1, 32, 32}));
      EXPECT_EQ(label_rows[i][1].dtype(), DType::kInt32);
      // Bit-identical: the same rows in the same (shuffled) order.
      EXPECT_EQ(label_rows[i][1].to_vector<int32_t>(), all[i][1].to_vector<int32_t>());
      EXPECT_EQ(image_rows[i][0].to_vector<float>(), all[i][0].to_vector<float>());
    }
  }
}

// Rows (x = (i, i) Float32, y = i Int32) for i in [0, n), counting how often x and y are read.
DatasetPtr numbers(int64_t n) {
  return GeneratorDataset(
      [](int64_t i) -> Row {
        return {Tensor::from_vector<float>({static_cast<float>(i), static_cast<float>(i)}),
                Tensor::scalar(static_cast<double>(i), DType::kInt32)};
      },
      n, {"x", "y"}, {.shuffle = true});
}

// Adds a number drawn from transform_generator() (a random transform).
Tensor add_draw(const Tensor& t) {
  std::uniform_int_distribution<int> pick(0, 1000);
  Tensor out = t.clone();
  const double draw = pick(transform_generator());
  if (t.dtype() == DType::kInt32) {
    out.data<int32_t>()[0] += static_cast<int32_t>(draw);
  } else {
    out.data<float>()[0] += static_cast<float>(draw);
  }
  return out;
}

// A map over a needed and an unneeded column runs (on both: its transforms draw random numbers
// column after column), and so do the maps feeding its unneeded column; a map of unneeded
// columns only is skipped.
TEST(Projection, AMapWithANeededColumnRunsOnAllItsColumns) {
  auto build = [](std::shared_ptr<std::atomic<int>> x_calls,
                  std::shared_ptr<std::atomic<int>> xy_calls,
                  std::shared_ptr<std::atomic<int>> x_after_calls) {
    set_seed(11);
    auto ds = numbers(30);
    ds = ds->map({counted(vision::Rescale(2.0, 1.0), x_calls)}, {"x"});
    ds = ds->map({counted(add_draw, xy_calls), add_draw}, {"x", "y"}, 2);
    ds = ds->map({counted(vision::Rescale(3.0, 0.0), x_after_calls)}, {"x"});
    return ds->shuffle(7)->batch(4);
  };
  auto counter = [] { return std::make_shared<std::atomic<int>>(0); };
  auto fx = counter(), fxy = counter(), fafter = counter();
  const std::vector<Row> all = rows_of(build(fx, fxy, fafter), 1, {true, true});
  auto px = counter(), pxy = counter(), pafter = counter();
  const std::vector<Row> only_y = rows_of(build(px, pxy, pafter), 1, {false, true});
  EXPECT_EQ(fx->load(), 30);
  EXPECT_EQ(px->load(), 30);       // feeds the {x, y} map: runs
  EXPECT_EQ(pxy->load(), 2 * 30);  // on x and y
  EXPECT_EQ(fafter->load(), 30);
  EXPECT_EQ(pafter->load(), 0);  // only x, after the {x, y} map: skipped
  ASSERT_EQ(only_y.size(), all.size());
  ASSERT_EQ(all.size(), 8u);
  for (size_t i = 0; i < all.size(); ++i) {
    EXPECT_FALSE(only_y[i][0].defined()) << i;
    EXPECT_EQ(only_y[i][1].to_vector<int32_t>(), all[i][1].to_vector<int32_t>()) << i;
  }
}

TEST(Projection, SetNeededColumnsAppliesToTheEpochsNotBegun) {
  // One row read ahead: the iterator has not begun epoch 2 when the request comes.
  struct PrefetchOne {
    PrefetchOne() { config::set_prefetch_size(1); }
    ~PrefetchOne() { config::set_prefetch_size(8); }
  } prefetch_one;
  auto calls = std::make_shared<std::atomic<int>>(0);
  set_seed(3);
  auto ds = numbers(20)->map({counted(vision::Rescale(1.0, 1.0), calls)}, {"x"})->batch(2);
  set_seed(3);
  auto reference = numbers(20)->map({vision::Rescale(1.0, 1.0)}, {"x"})->batch(2);
  const std::vector<Row> all = rows_of(reference, 3, {true, true});
  ASSERT_EQ(all.size(), 30u);

  auto it = ds->create_tuple_iterator(3);
  Row row;
  ASSERT_TRUE(it->next(row));
  EXPECT_TRUE(it->set_needed_columns({false, true}));
  std::vector<Row> rows = {row};
  for (int e = 0; e < 3; ++e) {
    while (it->next(row)) rows.push_back(row);
  }
  ASSERT_EQ(rows.size(), all.size());
  // Epoch 1 had begun: every column; epochs 2 and 3: y only, the same values.
  for (size_t i = 0; i < rows.size(); ++i) {
    EXPECT_EQ(rows[i][0].defined(), i < 10) << i;
    if (i < 10) {
      EXPECT_EQ(rows[i][0].to_vector<float>(), all[i][0].to_vector<float>());
    }
    EXPECT_EQ(rows[i][1].to_vector<int32_t>(), all[i][1].to_vector<int32_t>()) << i;
  }
  EXPECT_EQ(calls->load(), 20);

  // A single-epoch iterator does not take a request once running.
  auto single = ds->create_tuple_iterator();
  EXPECT_FALSE(single->set_needed_columns({false, true}));
}

TEST(Projection, SourcesDecodeOnlyTheNeededColumns) {
  testing::TempDir dir;
  testing::write_mnist(dir.path(), "train", 12);
  testing::write_cifar(dir.file("test_batch.bin"), 0, 12);
  for (const bool cifar : {false, true}) {
    SCOPED_TRACE(cifar);
    auto build = [&] {
      set_seed(8);
      return cifar ? Cifar10Dataset(dir.path()) : MnistDataset(dir.path());
    };
    const std::vector<Row> all = rows_of(build(), 1, {true, true});
    const std::vector<Row> images = rows_of(build(), 1, {true, false});
    const std::vector<Row> labels = rows_of(build(), 1, {false, true});
    ASSERT_EQ(all.size(), 12u);
    ASSERT_EQ(images.size(), 12u);
    ASSERT_EQ(labels.size(), 12u);
    for (size_t i = 0; i < all.size(); ++i) {
      EXPECT_FALSE(images[i][1].defined());
      EXPECT_FALSE(labels[i][0].defined());
      EXPECT_EQ(images[i][0].to_vector<float>(), all[i][0].to_vector<float>());
      EXPECT_EQ(labels[i][1].to_vector<int32_t>(), all[i][1].to_vector<int32_t>());
    }
  }
}

TEST(Projection, AMaskOfTheWrongSizeIsAnError) {
  auto ds = numbers(4);
  EXPECT_ERROR(ds->create_tuple_iterator(1, {true}), "create_tuple_iterator", "needed has 1 flags",
               "one per column ('x', 'y')");
  auto it = ds->create_tuple_iterator(2);
  EXPECT_ERROR(it->set_needed_columns({true, true, false}), "set_needed_columns",
               "needed has 3 flags");
}

}  // namespace
}  // namespace cleave::dataset

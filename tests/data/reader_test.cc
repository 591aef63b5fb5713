// MnistDataset and Cifar10Dataset on files the tests write (and corrupt).
#include <gtest/gtest.h>

#include <algorithm>

#include "cleave/data/dataset.h"
#include "data/data_files.h"
#include "testing/gradcheck.h"

namespace cleave::dataset {
namespace {

using testing::collect;
using testing::TempDir;

// The index i of an MNIST test image, recovered from its first pixel (i < 256).
int64_t mnist_index(const Tensor& image) {
  const int first = static_cast<int>(image.data<float>()[0]);
  for (int64_t i = 0; i < 256; ++i) {
    if (testing::mnist_pixel(i, 0) == first) return i;
  }
  return -1;
}

TEST(MnistDataset, ReadsEveryImageAndLabelOfTheFiles) {
  TempDir dir;
  testing::write_mnist(dir.path(), "train", 12);
  MnistOptions options;
  options.shuffle = false;
  auto ds = MnistDataset(dir.path(), options);
  EXPECT_EQ(ds->column_names(), (std::vector<std::string>{"image", "label"}));
  EXPECT_EQ(ds->get_dataset_size(), 12);
  auto rows = collect(ds);
  ASSERT_EQ(rows.size(), 12u);
  for (int64_t i = 0; i < 12; ++i) {
    const Tensor& image = rows[i][0];
    const Tensor& label = rows[i][1];
    ASSERT_EQ(image.shape(), (Shape{28, 28, 1}));
    EXPECT_EQ(image.dtype(), DType::kFloat32);
    EXPECT_EQ(label.dtype(), DType::kInt32);
    EXPECT_EQ(label.rank(), 0);
    EXPECT_EQ(label.item(), i % 10);
    for (int64_t p : {0, 1, 300, 783}) {
      EXPECT_EQ(image.data<float>()[p], testing::mnist_pixel(i, p))
          << "image " << i << " pixel " << p;
    }
  }
}

TEST(MnistDataset, ReadsWhicheverSetTheFolderHolds) {
  TempDir train, test, both;
  testing::write_mnist(train.path(), "train", 5);
  testing::write_mnist(test.path(), "t10k", 3);
  testing::write_mnist(both.path(), "train", 5);
  testing::write_mnist(both.path(), "t10k", 3);
  EXPECT_EQ(MnistDataset(train.path())->get_dataset_size(), 5);
  EXPECT_EQ(MnistDataset(test.path())->get_dataset_size(), 3);
  EXPECT_EQ(MnistDataset(both.path())->get_dataset_size(), 8);
  MnistOptions only_test;
  only_test.usage = "test";
  EXPECT_EQ(MnistDataset(both.path(), only_test)->get_dataset_size(), 3);
  EXPECT_ERROR(MnistDataset(train.path(), only_test), "MnistDataset", "missing file",
               "t10k-images-idx3-ubyte");
}

TEST(MnistDataset, ShuffleGivesAPermutationThatChangesPerEpoch) {
  TempDir dir;
  testing::write_mnist(dir.path(), "train", 50);
  set_seed(3);
  auto ds = MnistDataset(dir.path());
  std::vector<int64_t> first, second;
  for (const Row& row : collect(ds)) first.push_back(mnist_index(row[0]));
  for (const Row& row : collect(ds)) second.push_back(mnist_index(row[0]));
  EXPECT_NE(first, second);
  std::vector<int64_t> sorted = first;
  std::sort(sorted.begin(), sorted.end());
  for (int64_t i = 0; i < 50; ++i) EXPECT_EQ(sorted[i], i);
  // The same seed gives the same orders.
  set_seed(3);
  auto again = MnistDataset(dir.path());
  std::vector<int64_t> replay;
  for (const Row& row : collect(again)) replay.push_back(mnist_index(row[0]));
  EXPECT_EQ(replay, first);
}

// Every sample lands in exactly one shard when the shard count divides the size; otherwise the
// shards are padded (NOTE [Dataset sharding]) to equal sizes with the fewest repeats.
TEST(MnistDataset, ShardsCoverEverySampleOnce) {
  TempDir dir;
  testing::write_mnist(dir.path(), "train", 24);
  for (int64_t shards : {1, 2, 3, 4, 5, 7, 8, 24, 30}) {
    for (bool shuffle : {false, true}) {
      std::vector<int> seen(24, 0);
      int64_t total = 0;
      for (int64_t id = 0; id < shards; ++id) {
        MnistOptions options;
        options.num_shards = shards;
        options.shard_id = id;
        options.shuffle = shuffle;
        set_seed(11);  // every rank builds its dataset after the same set_seed
        auto ds = MnistDataset(dir.path(), options);
        const int64_t expected = (24 + shards - 1) / shards;
        EXPECT_EQ(ds->get_dataset_size(), expected);
        auto rows = collect(ds);
        EXPECT_EQ(static_cast<int64_t>(rows.size()), expected) << shards << " shards, id " << id;
        for (const Row& row : rows) ++seen[mnist_index(row[0])];
        total += static_cast<int64_t>(rows.size());
      }
      const int64_t padding = total - 24;
      EXPECT_LT(padding, shards);
      int64_t repeats = 0;
      for (int64_t i = 0; i < 24; ++i) {
        EXPECT_GE(seen[i], 1) << "sample " << i << " with " << shards << " shards";
        EXPECT_LE(seen[i], 2);
        repeats += seen[i] - 1;
      }
      EXPECT_EQ(repeats, padding);
      if (24 % shards == 0) {
        EXPECT_EQ(padding, 0);
      }
    }
  }
}

TEST(MnistDataset, NumSamplesLimitsTheShard) {
  TempDir dir;
  testing::write_mnist(dir.path(), "train", 20);
  MnistOptions options;
  options.num_samples = 6;
  auto ds = MnistDataset(dir.path(), options);
  EXPECT_EQ(ds->get_dataset_size(), 6);
  EXPECT_EQ(collect(ds).size(), 6u);
}

TEST(MnistDataset, BadInputNamesTheFileAndWhatWasExpected) {
  TempDir dir;
  EXPECT_ERROR(MnistDataset(dir.file("nope")), "MnistDataset", "folder", "nope", "does not exist");
  EXPECT_ERROR(MnistDataset(dir.path()), "MnistDataset", "holds no MNIST files",
               "train-images-idx3-ubyte");

  testing::write_mnist(dir.path(), "train", 10);
  const std::string images = dir.file("train-images-idx3-ubyte");
  const std::string labels = dir.file("train-labels-idx1-ubyte");
  const std::vector<uint8_t> good_images = testing::read_bytes(images);
  const std::vector<uint8_t> good_labels = testing::read_bytes(labels);

  std::filesystem::remove(labels);
  EXPECT_ERROR(MnistDataset(dir.path()), "missing file", "train-labels-idx1-ubyte");
  testing::write_bytes(labels, good_labels);

  std::vector<uint8_t> truncated(good_images.begin(), good_images.end() - 100);
  testing::write_bytes(images, truncated);
  EXPECT_ERROR(MnistDataset(dir.path()), "train-images-idx3-ubyte", "truncated", "7756 bytes",
               "expected 7856");
  testing::write_bytes(images, std::vector<uint8_t>(good_images.begin(), good_images.begin() + 9));
  EXPECT_ERROR(MnistDataset(dir.path()), "train-images-idx3-ubyte", "truncated", "16-byte header");

  std::vector<uint8_t> huge = good_images;
  huge[8] = huge[9] = huge[12] = huge[13] = 0xff;  // rows and cols near 2^32
  testing::write_bytes(images, huge);
  EXPECT_ERROR(MnistDataset(dir.path()), "train-images-idx3-ubyte", "corrupt", "[1, 65536]");

  std::vector<uint8_t> bad_magic = good_images;
  bad_magic[3] = 0x01;
  testing::write_bytes(images, bad_magic);
  EXPECT_ERROR(MnistDataset(dir.path()), "train-images-idx3-ubyte", "magic number 0x00000801",
               "expected 0x00000803");
  testing::write_bytes(images, good_images);
  std::vector<uint8_t> labels_as_images = good_labels;
  labels_as_images[3] = 0x03;
  testing::write_bytes(labels, labels_as_images);
  EXPECT_ERROR(MnistDataset(dir.path()), "train-labels-idx1-ubyte", "magic number 0x00000803",
               "expected 0x00000801");

  std::vector<uint8_t> bad_label = good_labels;
  bad_label[8 + 4] = 10;
  testing::write_bytes(labels, bad_label);
  EXPECT_ERROR(MnistDataset(dir.path()), "train-labels-idx1-ubyte", "label 10 at index 4",
               "[0, 10)");

  TempDir other;
  testing::write_mnist(other.path(), "train", 9);
  testing::write_bytes(labels, testing::read_bytes(other.file("train-labels-idx1-ubyte")));
  EXPECT_ERROR(MnistDataset(dir.path()), "holds 9 labels", "holds 10 images", "equal counts");
  testing::write_bytes(labels, good_labels);

  MnistOptions options;
  options.num_shards = 2;
  options.shard_id = 2;
  EXPECT_ERROR(MnistDataset(dir.path(), options), "MnistDataset", "shard_id is 2", "[0, 2)");
  options.num_shards = 0;
  options.shard_id = 0;
  EXPECT_ERROR(MnistDataset(dir.path(), options), "num_shards is 0", ">= 1");
  options = {};
  options.usage = "valid";
  EXPECT_ERROR(MnistDataset(dir.path(), options), "usage is 'valid'", "'train', 'test' or 'all'");
  EXPECT_EQ(MnistDataset(dir.path())->get_dataset_size(), 10);  // the repaired files read again
}

// ---- CIFAR-10 ----

TEST(Cifar10Dataset, ReadsRecordsAsHwcImages) {
  TempDir dir;
  for (int k = 1; k <= 5; ++k) {
    testing::write_cifar(dir.file("data_batch_" + std::to_string(k) + ".bin"), (k - 1) * 4, 4);
  }
  testing::write_cifar(dir.file("test_batch.bin"), 100, 3);
  Cifar10Options options;
  options.shuffle = false;
  auto all = Cifar10Dataset(dir.path(), options);
  EXPECT_EQ(all->get_dataset_size(), 23);
  options.usage = "train";
  auto rows = collect(Cifar10Dataset(dir.path(), options));
  ASSERT_EQ(rows.size(), 20u);
  for (int64_t i = 0; i < 20; ++i) {
    const Tensor& image = rows[i][0];
    ASSERT_EQ(image.shape(), (Shape{32, 32, 3}));
    EXPECT_EQ(rows[i][1].item(), i % 10);
    EXPECT_EQ(rows[i][1].dtype(), DType::kInt32);
    for (int64_t p : {0, 33, 1023}) {
      for (int64_t c = 0; c < 3; ++c) {
        EXPECT_EQ(image.at({p / 32, p % 32, c}), testing::cifar_pixel(i, c, p));
      }
    }
  }
  options.usage = "test";
  auto test = collect(Cifar10Dataset(dir.path(), options));
  ASSERT_EQ(test.size(), 3u);
  EXPECT_EQ(test[2][0].at({0, 5, 2}), testing::cifar_pixel(102, 2, 5));
}

TEST(Cifar10Dataset, ShardsCoverEverySampleOnce) {
  TempDir dir;
  testing::write_cifar(dir.file("test_batch.bin"), 0, 12);
  for (int64_t shards : {1, 2, 3, 4, 6, 12}) {
    std::vector<int> seen(12, 0);
    for (int64_t id = 0; id < shards; ++id) {
      Cifar10Options options;
      options.num_shards = shards;
      options.shard_id = id;
      set_seed(5);
      for (const Row& row : collect(Cifar10Dataset(dir.path(), options))) {
        // Record i has channel-0 pixel 0 equal to i * 13 % 256.
        const int first = static_cast<int>(row[0].at({0, 0, 0}));
        for (int64_t i = 0; i < 12; ++i) seen[i] += testing::cifar_pixel(i, 0, 0) == first;
      }
    }
    for (int64_t i = 0; i < 12; ++i) EXPECT_EQ(seen[i], 1) << "record " << i << ", " << shards;
  }
}

TEST(Cifar10Dataset, BadInputNamesTheFileAndWhatWasExpected) {
  TempDir dir;
  EXPECT_ERROR(Cifar10Dataset(dir.file("missing")), "Cifar10Dataset", "does not exist");
  EXPECT_ERROR(Cifar10Dataset(dir.path()), "holds no CIFAR-10 files", "data_batch_1.bin");
  for (int k : {1, 2, 4, 5}) {
    testing::write_cifar(dir.file("data_batch_" + std::to_string(k) + ".bin"), 0, 2);
  }
  EXPECT_ERROR(Cifar10Dataset(dir.path()), "missing file", "data_batch_3.bin");
  const std::string third = dir.file("data_batch_3.bin");
  testing::write_cifar(third, 0, 2);
  const std::vector<uint8_t> good = testing::read_bytes(third);
  testing::write_bytes(third, std::vector<uint8_t>(good.begin(), good.end() - 1));
  EXPECT_ERROR(Cifar10Dataset(dir.path()), "data_batch_3.bin", "truncated", "6145 bytes",
               "multiple of 3073");
  std::vector<uint8_t> bad_label = good;
  bad_label[3073] = 12;
  testing::write_bytes(third, bad_label);
  EXPECT_ERROR(Cifar10Dataset(dir.path()), "data_batch_3.bin", "label 12 in record 1", "[0, 10)");
  testing::write_bytes(third, good);
  Cifar10Options options;
  options.num_shards = 3;
  options.shard_id = -1;
  EXPECT_ERROR(Cifar10Dataset(dir.path(), options), "Cifar10Dataset", "shard_id is -1");
  EXPECT_EQ(Cifar10Dataset(dir.path())->get_dataset_size(), 10);
}

}  // namespace
}  // namespace cleave::dataset

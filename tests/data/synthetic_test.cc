// The synthetic data sets: determinism, the real formats (read back by the readers), balance and
// learnability (nearest-class-mean accuracy far above chance).
#include "cleave/data/synthetic.h"

#include <gtest/gtest.h>

#include <array>

#include "cleave/data/dataset.h"
#include "data/data_files.h"
#include "testing/gradcheck.h"

namespace cleave::dataset {
namespace {

// Accuracy of the nearest class mean (computed on the first `train` images) on the remaining
// ones, in pixel space.
double nearest_mean_accuracy(const synthetic::Images& images, int64_t train) {
  const int64_t size = images.height * images.width * images.channels;
  std::vector<std::vector<double>> mean(10, std::vector<double>(static_cast<size_t>(size), 0.0));
  std::array<int64_t, 10> count{};
  for (int64_t i = 0; i < train; ++i) {
    const int label = images.labels[i];
    ++count[label];
    for (int64_t p = 0; p < size; ++p) mean[label][p] += images.pixels[i * size + p];
  }
  for (int k = 0; k < 10; ++k) {
    for (double& v : mean[k]) v /= static_cast<double>(std::max<int64_t>(count[k], 1));
  }
  int64_t correct = 0;
  for (int64_t i = train; i < images.count; ++i) {
    int best = 0;
    double best_distance = 1e300;
    for (int k = 0; k < 10; ++k) {
      double d = 0;
      for (int64_t p = 0; p < size; ++p) {
        const double e = images.pixels[i * size + p] - mean[k][p];
        d += e * e;
      }
      if (d < best_distance) {
        best_distance = d;
        best = k;
      }
    }
    correct += best == images.labels[i];
  }
  return static_cast<double>(correct) / static_cast<double>(images.count - train);
}

TEST(Synthetic, MnistDigitsAreDeterministicBalancedAndSeparable) {
  const synthetic::Images a = synthetic::mnist_images(600, 5);
  const synthetic::Images b = synthetic::mnist_images(600, 5);
  const synthetic::Images c = synthetic::mnist_images(600, 6);
  EXPECT_EQ(a.pixels, b.pixels);
  EXPECT_EQ(a.labels, b.labels);
  EXPECT_NE(a.pixels, c.pixels);
  ASSERT_EQ(a.pixels.size(), 600u * 28 * 28);
  std::array<int, 10> per_class{};
  for (uint8_t label : a.labels) ++per_class[label];
  for (int n : per_class) EXPECT_EQ(n, 60);
  // Images differ within a class (distortions), and carry ink.
  EXPECT_NE(std::vector<uint8_t>(a.pixels.begin(), a.pixels.begin() + 784),
            std::vector<uint8_t>(a.pixels.begin() + 784, a.pixels.begin() + 2 * 784));
  // Chance is 0.1; the template classes are far apart even for this crude classifier.
  EXPECT_GT(nearest_mean_accuracy(a, 400), 0.6);
}

TEST(Synthetic, Cifar10ClassesAreSeparable) {
  const synthetic::Images a = synthetic::cifar10_images(400, 2);
  ASSERT_EQ(a.pixels.size(), 400u * 32 * 32 * 3);
  EXPECT_EQ(synthetic::cifar10_images(400, 2).pixels, a.pixels);
  EXPECT_GT(nearest_mean_accuracy(a, 300), 0.3);
}

TEST(Synthetic, WritesTheRealLayoutsThatTheReadersRead) {
  testing::TempDir dir;
  synthetic::write_mnist(dir.path(), 30, 20, 1);
  MnistOptions options;
  options.shuffle = false;
  auto train = MnistDataset(dir.path() + "/MNIST_Data/train", options);
  auto test = MnistDataset(dir.path() + "/MNIST_Data/test", options);
  EXPECT_EQ(train->get_dataset_size(), 30);
  EXPECT_EQ(test->get_dataset_size(), 20);
  // The files hold exactly the generated images (the train split's own seed stream).
  const auto rows = testing::collect(train);
  const std::vector<uint8_t> labels =
      testing::read_bytes(dir.path() + "/MNIST_Data/train/train-labels-idx1-ubyte");
  for (size_t i = 0; i < rows.size(); ++i) EXPECT_EQ(rows[i][1].item(), labels[8 + i]);

  synthetic::write_cifar10(dir.path(), 23, 7, 1);
  const std::string cifar = dir.path() + "/cifar-10-batches-bin";
  EXPECT_EQ(testing::read_bytes(cifar + "/data_batch_1.bin").size(), 4u * 3073);
  EXPECT_EQ(testing::read_bytes(cifar + "/data_batch_5.bin").size(), 5u * 3073);
  Cifar10Options cifar_options;
  EXPECT_EQ(Cifar10Dataset(cifar, cifar_options)->get_dataset_size(), 30);
  cifar_options.usage = "test";
  EXPECT_EQ(Cifar10Dataset(cifar, cifar_options)->get_dataset_size(), 7);

  EXPECT_ERROR(synthetic::write_mnist(dir.path(), -1, 2, 0), "--train -1", ">= 0");
  testing::write_bytes(dir.file("blocker"), {1});  // a file where a folder must go
  EXPECT_ERROR(synthetic::write_mnist(dir.file("blocker"), 1, 1, 0), "cleave-datagen",
               "cannot create folder", "blocker/MNIST_Data");
}

}  // namespace
}  // namespace cleave::dataset

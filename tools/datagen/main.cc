// cleave-datagen: writes learnable MNIST or CIFAR-10 stand-ins in the real file formats.
//
//   cleave-datagen mnist   --out DIR [--train N] [--test N] [--seed S]
//       -> DIR/MNIST_Data/train/train-{images-idx3,labels-idx1}-ubyte
//          DIR/MNIST_Data/test/t10k-{images-idx3,labels-idx1}-ubyte
//   cleave-datagen cifar10 --out DIR [--train N] [--test N] [--seed S]
//       -> DIR/cifar-10-batches-bin/data_batch_{1..5}.bin, test_batch.bin
#include <CLI/CLI.hpp>
#include <chrono>
#include <cstdio>
#include <limits>
#include <string>

#include "cleave/core/error.h"
#include "cleave/data/synthetic.h"
#include "cleave/flags.h"

int main(int argc, char** argv) {
  CLI::App app{"Writes learnable MNIST or CIFAR-10 stand-ins in the real file formats."};
  cleave::flags::setup(app);
  app.require_subcommand(1);
  std::string out;
  constexpr int64_t kUnset = std::numeric_limits<int64_t>::min();
  int64_t train = kUnset, test = kUnset;
  uint64_t seed = 0;
  auto add_options = [&](CLI::App* sub) {
    sub->add_option("--out", out, "output folder (created if missing)")->required();
    // No captured default: "unset" is a sentinel, the description says the default.
    sub->add_option("--train", train, "train images (default: as the real data set)")
        ->check(cleave::flags::non_negative())
        ->default_str("");
    sub->add_option("--test", test, "test images (default: 10000)")
        ->check(cleave::flags::non_negative())
        ->default_str("");
    sub->add_option("--seed", seed, "seed; the same seed writes the same files")->default_val(0);
  };
  CLI::App* mnist = app.add_subcommand("mnist", "MNIST in IDX files, MNIST_Data/{train,test}");
  CLI::App* cifar = app.add_subcommand("cifar10", "CIFAR-10 binary batches, cifar-10-batches-bin");
  add_options(mnist);
  add_options(cifar);
  if (auto status = cleave::flags::parse(app, argc, argv)) return *status;

  const auto start = std::chrono::steady_clock::now();
  try {
    if (mnist->parsed()) {
      if (train == kUnset) train = 60000;
      if (test == kUnset) test = 10000;
      cleave::dataset::synthetic::write_mnist(out, train, test, seed);
      std::printf("cleave-datagen: wrote %lld train and %lld test MNIST images to %s/MNIST_Data\n",
                  static_cast<long long>(train), static_cast<long long>(test), out.c_str());
    } else {
      if (train == kUnset) train = 50000;
      if (test == kUnset) test = 10000;
      cleave::dataset::synthetic::write_cifar10(out, train, test, seed);
      std::printf(
          "cleave-datagen: wrote %lld train and %lld test CIFAR-10 images to "
          "%s/cifar-10-batches-bin\n",
          static_cast<long long>(train), static_cast<long long>(test), out.c_str());
    }
  } catch (const cleave::Error& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 1;
  }
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::printf("cleave-datagen: %.2f s\n", seconds);
  return 0;
}

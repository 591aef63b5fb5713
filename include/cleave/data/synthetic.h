// Learnable stand-ins for MNIST and CIFAR-10, written in exactly the real file formats (the real
// data sets cannot be downloaded here). Behind the cleave-datagen tool; the readers of
// cleave/data/dataset.h read them as they read the real files.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace cleave::dataset::synthetic {

// `count` images of height x width x channels bytes each (HWC), with their labels 0..9.
struct Images {
  int64_t count = 0, height = 0, width = 0, channels = 0;
  std::vector<uint8_t> pixels;
  std::vector<uint8_t> labels;
};

// Handwritten-looking digits, 28 x 28 x 1: a stroke template per digit with its control points
// jittered, drawn through a random affine map (rotation, scale, shear, shift) with a random stroke
// width, anti-aliased, plus pixel noise. Labels cycle 0..9 in a shuffled order. Deterministic for
// (count, seed); images are drawn in parallel.
Images mnist_images(int64_t count, uint64_t seed);

// Ten visually distinct classes, 32 x 32 x 3: each a shape with its own colour family and
// texture (disc, square, triangle, striped patch, ring, cross, checkerboard, diagonal stripes,
// diamond, bars) at a random place, size and shade on a random two-colour gradient background
// with noise. Deterministic for (count, seed).
Images cifar10_images(int64_t count, uint64_t seed);

// Writes `dir`/MNIST_Data/train/train-{images-idx3,labels-idx1}-ubyte (train images) and
// `dir`/MNIST_Data/test/t10k-{images-idx3,labels-idx1}-ubyte (test images), creating folders.
// Each file is written to a temporary name and renamed. Throws Error when a file cannot be
// written or a count is negative.
void write_mnist(const std::string& dir, int64_t train, int64_t test, uint64_t seed);

// Writes `dir`/cifar-10-batches-bin/data_batch_1.bin .. data_batch_5.bin (the train images split
// in five nearly equal parts) and test_batch.bin.
void write_cifar10(const std::string& dir, int64_t train, int64_t test, uint64_t seed);

}  // namespace cleave::dataset::synthetic

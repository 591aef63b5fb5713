// Helpers for the data tests: a temporary folder, and writers of MNIST (IDX) and CIFAR-10 files
// byte by byte, independent of the readers and of cleave-datagen.
#pragma once

#include <unistd.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "cleave/data/dataset.h"

namespace cleave::testing {

// A fresh folder under the system temp folder, removed with everything in it on destruction.
class TempDir {
 public:
  TempDir() {
    std::string pattern = (std::filesystem::temp_directory_path() / "cleave_data_XXXXXX").string();
    path_ = mkdtemp(pattern.data());
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  const std::string& path() const { return path_; }
  std::string file(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

inline void write_bytes(const std::string& path, const std::vector<uint8_t>& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(bytes.data()),
            static_cast<std::streamsize>(bytes.size()));
}

inline std::vector<uint8_t> read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

inline void put_be32(std::vector<uint8_t>& bytes, uint32_t v) {
  for (int shift = 24; shift >= 0; shift -= 8) bytes.push_back(static_cast<uint8_t>(v >> shift));
}

// Pixel p of MNIST image i: a value that identifies both.
inline uint8_t mnist_pixel(int64_t i, int64_t p) { return static_cast<uint8_t>((i * 7 + p) % 256); }

// Writes `count` 28 x 28 images (pixels mnist_pixel) with label i % 10 as set `prefix` ("train" or
// "t10k") into dir.
inline void write_mnist(const std::string& dir, const std::string& prefix, int64_t count,
                        int64_t rows = 28, int64_t cols = 28) {
  std::vector<uint8_t> images, labels;
  put_be32(images, 0x803);
  put_be32(images, static_cast<uint32_t>(count));
  put_be32(images, static_cast<uint32_t>(rows));
  put_be32(images, static_cast<uint32_t>(cols));
  for (int64_t i = 0; i < count; ++i) {
    for (int64_t p = 0; p < rows * cols; ++p) images.push_back(mnist_pixel(i, p));
  }
  put_be32(labels, 0x801);
  put_be32(labels, static_cast<uint32_t>(count));
  for (int64_t i = 0; i < count; ++i) labels.push_back(static_cast<uint8_t>(i % 10));
  write_bytes(dir + "/" + prefix + "-images-idx3-ubyte", images);
  write_bytes(dir + "/" + prefix + "-labels-idx1-ubyte", labels);
}

// Byte of CIFAR record i at channel c, pixel p.
inline uint8_t cifar_pixel(int64_t i, int64_t c, int64_t p) {
  return static_cast<uint8_t>((i * 13 + c * 101 + p) % 256);
}

// Writes one CIFAR-10 batch file of `count` records numbered from `first` (label first % 10...).
inline void write_cifar(const std::string& path, int64_t first, int64_t count) {
  std::vector<uint8_t> bytes;
  for (int64_t i = first; i < first + count; ++i) {
    bytes.push_back(static_cast<uint8_t>(i % 10));
    for (int64_t c = 0; c < 3; ++c) {
      for (int64_t p = 0; p < 1024; ++p) bytes.push_back(cifar_pixel(i, c, p));
    }
  }
  write_bytes(path, bytes);
}

// Every row of one epoch.
inline std::vector<dataset::Row> collect(const dataset::DatasetPtr& ds) {
  std::vector<dataset::Row> rows;
  auto it = ds->create_tuple_iterator();
  dataset::Row row;
  while (it->next(row)) rows.push_back(row);
  return rows;
}

}  // namespace cleave::testing

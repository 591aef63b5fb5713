// MnistDataset on IDX files: the input is split into an image file and a label file (its first
// byte picks where), and the set either loads, its first rows read, or a cleave::Error comes.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "cleave/core/error.h"
#include "cleave/data/dataset.h"
#include "fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const std::string_view bytes(reinterpret_cast<const char*>(data) + 1, size - 1);
  // The labels are the last (first byte) x 4 bytes (MNIST's label files are short).
  const size_t labels = std::min(bytes.size(), static_cast<size_t>(data[0]) * 4);
  const std::string_view images = bytes.substr(0, bytes.size() - labels);
  cleave::fuzz::write_file("t10k-images-idx3-ubyte", images);
  cleave::fuzz::write_file("t10k-labels-idx1-ubyte", bytes.substr(bytes.size() - labels));
  cleave::dataset::MnistOptions options;
  options.usage = "test";
  options.shuffle = false;
  try {
    auto ds = cleave::dataset::MnistDataset(cleave::fuzz::scratch_dir().string(), options);
    auto it = ds->create_tuple_iterator(1);
    cleave::dataset::Row row;
    for (int i = 0; i < 2 && it->next(row); ++i) {
    }
  } catch (const cleave::Error&) {
  }
  return 0;
}

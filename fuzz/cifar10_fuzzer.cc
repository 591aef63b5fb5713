// Cifar10Dataset on a binary batch (test_batch.bin): any bytes give a set whose first rows read,
// or a cleave::Error.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "cleave/core/error.h"
#include "cleave/data/dataset.h"
#include "fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  cleave::fuzz::write_file("test_batch.bin",
                           std::string_view(reinterpret_cast<const char*>(data), size));
  cleave::dataset::Cifar10Options options;
  options.usage = "test";
  options.shuffle = false;
  try {
    auto ds = cleave::dataset::Cifar10Dataset(cleave::fuzz::scratch_dir().string(), options);
    auto it = ds->create_tuple_iterator(1);
    cleave::dataset::Row row;
    for (int i = 0; i < 2 && it->next(row); ++i) {
    }
  } catch (const cleave::Error&) {
  }
  return 0;
}

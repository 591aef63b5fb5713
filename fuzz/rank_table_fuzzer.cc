// read_rank_table (RANK_TABLE_FILE, JSON): any bytes give ranks 0..n-1 or a cleave::Error.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "cleave/core/error.h"
#include "cluster/rank_table.h"
#include "fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path = cleave::fuzz::write_file(
      "rank_table.json", std::string_view(reinterpret_cast<const char*>(data), size));
  try {
    const auto entries = cleave::cluster::read_rank_table(path);
    for (size_t i = 0; i < entries.size(); ++i) {
      if (entries[i].rank != static_cast<int>(i)) {
        cleave::fuzz::fail("read_rank_table returned rank " + std::to_string(entries[i].rank) +
                           " at index " + std::to_string(i) + "; expected ranks 0..n-1");
      }
    }
  } catch (const cleave::Error&) {
  }
  return 0;
}

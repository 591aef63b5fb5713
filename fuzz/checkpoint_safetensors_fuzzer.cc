// load_checkpoint on a safetensors file (a JSON header, then the data): any bytes give tensors or a
// cleave::Error.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "cleave/core/error.h"
#include "cleave/train/checkpoint.h"
#include "fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path = cleave::fuzz::write_file(
      "input.safetensors", std::string_view(reinterpret_cast<const char*>(data), size));
  try {
    cleave::train::load_checkpoint(path, {.non_finite = cleave::train::NonFinite::kRefuse});
  } catch (const cleave::Error&) {
  }
  try {
    cleave::train::load_checkpoint_metadata(path);
  } catch (const cleave::Error&) {
  }
  return 0;
}

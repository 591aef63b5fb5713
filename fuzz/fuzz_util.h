// Helpers shared by the fuzz targets (fuzz/README.md).
//
// The readers under test take paths, so a target writes its input to a file of its own in
// /dev/shm (memory, not disk) and reads it back. Only cleave::Error may leave a reader: any other
// exception reaches libFuzzer uncaught and counts as a crash, as do aborts, sanitizer reports and
// hangs.
#pragma once

#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <string_view>

#include "cleave/core/allocation_limit.h"

namespace cleave::fuzz {

// No input may make a reader allocate a tensor of more than 1 GiB: a few bytes of text asking for
// gigabytes (a constant of shape (2999499993) in IR text, whose values default to zeros) is then a
// cleave::Error, as it would be beyond the machine's memory, instead of tripping libFuzzer's
// 4 GiB malloc limit.
inline const bool kAllocationLimitSet = [] {
  set_cpu_allocation_limit(size_t{1} << 30);
  return true;
}();

// A folder of this process's own under /dev/shm (or the temporary folder), made once.
inline const std::filesystem::path& scratch_dir() {
  static const std::filesystem::path dir = [] {
    std::filesystem::path base = std::filesystem::exists("/dev/shm")
                                     ? std::filesystem::path("/dev/shm")
                                     : std::filesystem::temp_directory_path();
    std::filesystem::path d = base / ("cleave_fuzz_" + std::to_string(::getpid()));
    std::filesystem::create_directories(d);
    return d;
  }();
  return dir;
}

// Writes `bytes` to scratch_dir()/name and returns its path.
inline std::string write_file(const std::string& name, std::string_view bytes) {
  const std::string path = (scratch_dir() / name).string();
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  return path;
}

// Stops the process so that libFuzzer records the input as a crash, saying why.
[[noreturn]] inline void fail(const std::string& why) {
  std::fprintf(stderr, "cleave fuzz check failed: %s\n", why.c_str());
  std::fflush(stderr);
  __builtin_trap();
}

// Reads bytes from the front of a fuzz input as small integers (0 when it runs out).
class ByteReader {
 public:
  ByteReader(const uint8_t* data, size_t size) : data_(data), size_(size) {}
  // A value in [lo, hi].
  int64_t in_range(int64_t lo, int64_t hi) {
    const uint64_t span = static_cast<uint64_t>(hi - lo) + 1;
    uint64_t v = 0;
    for (int i = 0; i < 2 && pos_ < size_; ++i) v = (v << 8) | data_[pos_++];
    return lo + static_cast<int64_t>(v % span);
  }
  bool empty() const { return pos_ >= size_; }

 private:
  const uint8_t* data_;
  size_t size_;
  size_t pos_ = 0;
};

}  // namespace cleave::fuzz

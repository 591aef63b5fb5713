// write_file_atomically: every way a part reaches the file (writev for small parts, splice from
// memory for large ones: NOTE [Splicing from memory], copy_file_range for large parts lying in a
// mapped file) gives the file the parts' bytes in order.
#include "cleave/core/atomic_file.h"

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include "cleave/core/error.h"

namespace cleave {
namespace {

namespace fs = std::filesystem;

std::string random_bytes(size_t n, uint32_t seed) {
  std::mt19937 random(seed);
  std::string s(n, '\0');
  for (char& c : s) c = static_cast<char>(random());
  return s;
}

fs::path fresh_dir(const std::string& name) {
  const fs::path dir = fs::temp_directory_path() / fmt::format("{}_{}", name, ::getpid());
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

TEST(AtomicFile, SmallAndLargePartsFromMemoryAndFromAMappedFileKeepTheirOrder) {
  const fs::path dir = fresh_dir("atomic_file_parts");
  // Sizes around the thresholds: small (writev), 64 KiB and up (splice), 1 MiB and up in a file
  // (copy_file_range), an odd size that cuts a pipe's worth.
  const std::string small = random_bytes(100, 1), edge = random_bytes(64 << 10, 2),
                    large = random_bytes((3 << 20) + 12345, 3), tiny = random_bytes(7, 4);
  const std::string source_path = (dir / "source.bin").string();
  write_file_atomically(source_path, {small, large, edge}, "test file");
  EXPECT_EQ(read_whole_file(source_path, "test file"), small + large + edge);

  const MappedFile source(source_path, "test file");
  const std::string_view mapped_large = source.bytes().substr(small.size(), large.size());
  const std::string_view mapped_small = source.bytes().substr(0, small.size());
  const std::string out = (dir / "out.bin").string();
  write_file_atomically(out, {tiny, mapped_large, edge, mapped_small, large, tiny}, "test file",
                        {source.region()});
  EXPECT_EQ(read_whole_file(out, "test file"), tiny + large + edge + small + large + tiny);
  // Replacing a file keeps no byte of the old one.
  write_file_atomically(out, std::string_view(tiny), "test file");
  EXPECT_EQ(read_whole_file(out, "test file"), tiny);
  fs::remove_all(dir);
}

TEST(AtomicFile, AMissingFolderIsNamed) {
  try {
    write_file_atomically("/nonexistent_folder_cleave/x.bin", std::string(1 << 20, 'x'),
                          "test file");
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("the folder '/nonexistent_folder_cleave' does not exist"),
              std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace cleave

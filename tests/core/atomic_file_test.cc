// write_file_atomically and PendingFile: every way a part reaches the file (batches of parts
// spliced from memory: NOTE [Splicing from memory], copy_file_range for large parts lying in a
// mapped file) gives the file the parts' bytes in order; a file is in place only once committed
// (NOTE [Files committed together]).
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
  // Sizes around the thresholds: small, 64 KiB, 1 MiB and up in a file (copy_file_range), an
  // odd size that cuts a pipe's worth.
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

// A transform's column pieces: thousands of rows of a few KiB, in place in a mapped file, in an
// order that jumps around it (more parts than one batch, more bytes than one pipe).
TEST(AtomicFile, ThousandsOfSmallMappedPartsKeepTheirOrder) {
  const fs::path dir = fresh_dir("atomic_file_rows");
  const std::string bytes = random_bytes(size_t{8} << 20, 5);
  const std::string source_path = (dir / "source.bin").string();
  write_file_atomically(source_path, bytes, "test file");
  const MappedFile source(source_path, "test file");
  std::vector<std::string_view> parts;
  std::string want;
  constexpr size_t kRow = 4099;  // not a page: pieces straddle pages
  for (size_t row = 0; row < 3000; ++row) {
    const size_t at = (row * 7919 * kRow) % (bytes.size() - kRow);
    parts.push_back(source.bytes().substr(at, kRow - row % 5));
    want += bytes.substr(at, kRow - row % 5);
  }
  const std::string out = (dir / "out.bin").string();
  write_file_atomically(out, parts, "test file", {source.region()});
  EXPECT_EQ(read_whole_file(out, "test file"), want);
  fs::remove_all(dir);
}

TEST(AtomicFile, APendingFileIsInPlaceOnlyOnceCommitted) {
  const fs::path dir = fresh_dir("atomic_file_pending");
  const std::string path = (dir / "a.bin").string();
  write_file_atomically(path, std::string_view("old"), "test file");
  const std::string fresh = random_bytes(1 << 20, 6);
  {
    PendingFile dropped(path, {fresh}, "test file");  // an Error before commit: never committed
  }
  EXPECT_EQ(read_whole_file(path, "test file"), "old");
  std::vector<fs::path> left;
  for (const auto& e : fs::directory_iterator(dir)) left.push_back(e.path().filename());
  EXPECT_EQ(left, std::vector<fs::path>{"a.bin"}) << "the temporary file was not removed";

  std::vector<PendingFile> files;
  files.emplace_back(path, std::vector<std::string_view>{fresh}, "test file");
  files.emplace_back((dir / "b.bin").string(), std::vector<std::string_view>{"b"}, "test file");
  EXPECT_EQ(read_whole_file(path, "test file"), "old");
  EXPECT_FALSE(fs::exists(dir / "b.bin"));
  for (PendingFile& f : files) f.commit();
  EXPECT_EQ(read_whole_file(path, "test file"), fresh);
  EXPECT_EQ(read_whole_file((dir / "b.bin").string(), "test file"), "b");
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

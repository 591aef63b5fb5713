#include "data/files.h"

#include <filesystem>
#include <fstream>

#include "cleave/core/error.h"

namespace cleave::dataset::detail {

void check_folder(const std::string& source, const std::string& dir) {
  std::error_code ec;
  CLEAVE_CHECK_ARG(std::filesystem::is_directory(dir, ec),
                   "{}: folder '{}' does not exist or is not a folder; expected the folder that "
                   "holds the data set files",
                   source, dir);
}

bool file_exists(const std::string& path) {
  std::error_code ec;
  return std::filesystem::is_regular_file(path, ec);
}

std::vector<uint8_t> read_file(const std::string& source, const std::string& path) {
  std::ifstream in(path, std::ios::binary | std::ios::ate);
  CLEAVE_CHECK_ARG(in.good(), "{}: cannot open file '{}'", source, path);
  const std::streamsize size = in.tellg();
  std::vector<uint8_t> bytes(static_cast<size_t>(size));
  in.seekg(0);
  in.read(reinterpret_cast<char*>(bytes.data()), size);
  CLEAVE_CHECK_ARG(in.good() || size == 0, "{}: cannot read file '{}'", source, path);
  return bytes;
}

uint32_t read_be32(const std::vector<uint8_t>& bytes, size_t offset) {
  return (uint32_t{bytes[offset]} << 24) | (uint32_t{bytes[offset + 1]} << 16) |
         (uint32_t{bytes[offset + 2]} << 8) | uint32_t{bytes[offset + 3]};
}

}  // namespace cleave::dataset::detail

// File helpers shared by the MNIST and CIFAR-10 readers.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace cleave::dataset::detail {

// Throws Error "<source>: folder '<dir>' does not exist (...)" unless dir is a directory.
void check_folder(const std::string& source, const std::string& dir);
bool file_exists(const std::string& path);
// The whole file; throws Error naming `source` and the path when it cannot be read.
std::vector<uint8_t> read_file(const std::string& source, const std::string& path);
// Big-endian 32-bit unsigned integer at bytes[offset..offset+4).
uint32_t read_be32(const std::vector<uint8_t>& bytes, size_t offset);

}  // namespace cleave::dataset::detail

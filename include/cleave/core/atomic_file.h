// Whole-file reads and atomic whole-file writes (checkpoints, strategy files; NOTE [Atomic
// checkpoint writes] in cleave/train/checkpoint.h).
#pragma once

#include <string>
#include <string_view>

namespace cleave {

// Replaces `path` by `contents` atomically: a temporary file in the same folder, fsync, rename,
// fsync of the folder. Throws Error naming `path` and the system error; the temporary file is
// removed on failure. `what` names the file's kind in errors ("checkpoint").
void write_file_atomically(const std::string& path, std::string_view contents, const char* what);

// The whole contents of `path`; throws Error naming it when it cannot be read.
std::string read_whole_file(const std::string& path, const char* what);

}  // namespace cleave

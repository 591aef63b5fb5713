// Whole-file reads and atomic whole-file writes (checkpoints, strategy files; NOTE [Atomic
// checkpoint writes] in cleave/train/checkpoint.h).
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace cleave {

// Replaces `path` by `contents` atomically: a temporary file in the same folder, fsync, rename,
// fsync of the folder. Throws Error naming `path` and the system error; the temporary file is
// removed on failure. `what` names the file's kind in errors ("checkpoint").
void write_file_atomically(const std::string& path, std::string_view contents, const char* what);
// Bytes of an open file mapped in memory (MappedFile::region()).
struct FileRegion {
  std::string_view bytes;
  int fd = -1;
};
// The same with the contents given as consecutive parts (written in order, none copied). A part of
// at least 1 MiB lying inside one of `regions` is copied from that file inside the kernel
// (copy_file_range) instead of from memory, where the file systems allow it.
void write_file_atomically(const std::string& path, const std::vector<std::string_view>& parts,
                           const char* what, const std::vector<FileRegion>& regions = {});

// NOTE [Files committed together]
// write_file_atomically in two halves, for a program writing several files (cleave-ckpt
// transform: one per destination rank): the constructor writes the parts to a temporary file in
// the target's folder and starts its writeback (sync_file_range), and commit() waits for it
// (fsync), renames the file into place and makes the rename durable (fsync of the folder). Writing
// every file before committing any lets the disk take one file while this process prepares the
// next, where committing each in turn left the disk idle during the preparing and the processor
// idle during the fsync (bench/README.md, "ckpt"). Each file is still replaced atomically; one
// destroyed uncommitted (an Error before commit) removes its temporary file and leaves the target
// as it was. Errors are write_file_atomically's.
class PendingFile {
 public:
  PendingFile(const std::string& path, const std::vector<std::string_view>& parts, const char* what,
              const std::vector<FileRegion>& regions = {});
  PendingFile(PendingFile&& other) noexcept;
  PendingFile& operator=(PendingFile&&) = delete;
  PendingFile(const PendingFile&) = delete;
  PendingFile& operator=(const PendingFile&) = delete;
  ~PendingFile();
  void commit();

 private:
  std::string path_, temp_;
  const char* what_ = "";
  int fd_ = -1;  // the temporary file until commit()
};

// The whole contents of `path`; throws Error naming it when it cannot be read.
std::string read_whole_file(const std::string& path, const char* what);

// The contents of `path` mapped read-only (mmap, pre-faulted), for reading large files without
// copying them (checkpoints: NOTE [Encoding .ckpt by hand] in src/train/checkpoint_io.cc). Throws
// Error naming the file when it cannot be opened or is not a regular file. The file must not be
// truncated while it is mapped (reading past its new end would fault): cleave replaces files
// only by renaming new ones over them, which leaves a mapped file whole.
class MappedFile {
 public:
  MappedFile(const std::string& path, const char* what);
  ~MappedFile();
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;
  std::string_view bytes() const { return {data_, size_}; }
  // Its bytes and the file, open while this lives (write_file_atomically's regions).
  FileRegion region() const { return {bytes(), fd_}; }

 private:
  const char* data_ = nullptr;
  size_t size_ = 0;
  int fd_ = -1;
};

}  // namespace cleave

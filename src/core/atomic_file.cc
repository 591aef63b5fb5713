#include "cleave/core/atomic_file.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <random>
#include <utility>

#include "cleave/core/error.h"

namespace cleave {
namespace {

std::string system_error() { return std::strerror(errno); }

// Closes a descriptor on scope exit unless released.
struct Fd {
  int fd = -1;
  ~Fd() {
    if (fd >= 0) ::close(fd);
  }
};

// `path` opened for reading, and its size; an Error naming it when it cannot be opened or is not
// a regular file.
size_t open_for_reading(Fd& file, const std::string& path, const char* what) {
  file.fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  CLEAVE_CHECK_ARG(file.fd >= 0, "cannot load {} '{}': {}", what, path, system_error());
  struct stat st {};
  CLEAVE_CHECK_ARG(::fstat(file.fd, &st) == 0 && S_ISREG(st.st_mode),
                   "cannot load {} '{}': not a regular file", what, path);
  return static_cast<size_t>(st.st_size);
}

}  // namespace

void write_file_atomically(const std::string& path, std::string_view contents, const char* what) {
  write_file_atomically(path, std::vector<std::string_view>{contents}, what);
}

void write_file_atomically(const std::string& path, const std::vector<std::string_view>& parts,
                           const char* what, const std::vector<FileRegion>& regions) {
  PendingFile(path, parts, what, regions).commit();
}

PendingFile::PendingFile(const std::string& path, const std::vector<std::string_view>& parts,
                         const char* what, const std::vector<FileRegion>& regions)
    : path_(path), what_(what) {
  namespace fs = std::filesystem;
  const fs::path target(path);
  const fs::path dir = target.has_parent_path() ? target.parent_path() : fs::path(".");
  std::error_code ec;
  CLEAVE_CHECK_ARG(fs::is_directory(dir, ec),
                   "cannot save {} '{}': the folder '{}' does not exist; create it first", what,
                   path, dir.string());

  std::random_device rd;
  const fs::path temp =
      dir / fmt::format(".{}.tmp.{}.{:08x}", target.filename().string(), ::getpid(), rd());
  Fd file;
  file.fd = ::open(temp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  CLEAVE_CHECK_ARG(file.fd >= 0, "cannot save {} '{}': creating '{}' failed: {}", what, path,
                   temp.string(), system_error());
  auto fail = [&](const std::string& step) {
    const std::string reason = system_error();
    ::close(file.fd);
    file.fd = -1;
    ::unlink(temp.c_str());
    CLEAVE_FAIL("cannot save {} '{}': {} failed: {}; the previous file (if any) is unchanged", what,
                path, step, reason);
  };
  // NOTE [Splicing from memory]: the parts in this process's memory go to the file through a pipe
  // (vmsplice hands the kernel their pages, splice copies them into the file) rather than write():
  // on the virtual machines measured, write() from user memory ran at a fifth of splice's speed
  // (bench/README.md, "ckpt"). They go in batches of up to kBatch parts (a transform's column
  // slices are thousands of rows of a few KiB, each in place in a mapped source file), so small
  // parts need no gathering into one buffer first. A part is not touched after splice has copied
  // it: when a batch's splice returns, the pipe is empty again. Where vmsplice or splice is
  // refused, writev does it. A large part lying in an open file is copied from it by the kernel
  // instead (copy_file_range: no copy through this process's memory, as cp does), falling back to
  // the batches where the file systems refuse.
  constexpr size_t kBatch = 1024;  // IOV_MAX on Linux
  constexpr size_t kCopyInKernel = size_t{1} << 20;
  std::vector<iovec> batch;
  bool splice_from_memory = true;
  Fd pipe_in, pipe_out;
  // Moves the start of `batch` into the file by splicing: the bytes moved, or 0 once splicing is
  // refused (splice_from_memory is then false and nothing was moved).
  const auto splice_batch = [&](const iovec* v, size_t count) -> size_t {
    if (pipe_in.fd < 0) {
      int ends[2];
      if (::pipe2(ends, O_CLOEXEC) != 0) {
        splice_from_memory = false;
        return 0;
      }
      pipe_out.fd = ends[0];
      pipe_in.fd = ends[1];
      ::fcntl(pipe_in.fd, F_SETPIPE_SZ, 1 << 20);  // else the default 64 KiB
    }
    ssize_t in = 0;  // the pipe holds what it can of the batch; vmsplice returns that much
    do {
      in = ::vmsplice(pipe_in.fd, v, std::min(count, kBatch), 0);
    } while (in < 0 && errno == EINTR);
    if (in <= 0) {
      splice_from_memory = false;
      return 0;
    }
    for (ssize_t out = 0; out < in;) {
      const ssize_t n =
          ::splice(pipe_out.fd, nullptr, file.fd, nullptr, static_cast<size_t>(in - out), 0);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0 && out == 0 && (errno == EINVAL || errno == ENOSYS)) {
        // The file system takes no splice: drain the pipe, and write from memory from now on.
        splice_from_memory = false;
        char sink[4096];
        for (ssize_t left = in; left > 0;) {
          const ssize_t r = ::read(pipe_out.fd, sink, std::min<ssize_t>(left, sizeof sink));
          if (r <= 0) fail("draining the pipe");
          left -= r;
        }
        return 0;
      }
      if (n <= 0) fail("writing");
      out += n;
    }
    return static_cast<size_t>(in);
  };
  const auto flush = [&] {
    size_t first = 0;
    while (first < batch.size()) {
      const iovec* v = batch.data() + first;
      const size_t count = batch.size() - first;
      size_t n = splice_from_memory ? splice_batch(v, count) : 0;
      if (n == 0) {
        const ssize_t w = ::writev(file.fd, v, static_cast<int>(std::min(count, kBatch)));
        if (w < 0 && errno == EINTR) continue;
        if (w < 0) fail("writing");
        n = static_cast<size_t>(w);
      }
      while (first < batch.size() && n >= batch[first].iov_len) n -= batch[first++].iov_len;
      if (n > 0) {  // a part was cut: drop what was written of it
        batch[first].iov_base = static_cast<char*>(batch[first].iov_base) + n;
        batch[first].iov_len -= n;
      }
    }
    batch.clear();
  };
  bool copy_in_kernel = true;  // until a file system refuses
  for (std::string_view part : parts) {
    if (part.empty()) continue;
    const FileRegion* in = nullptr;
    if (copy_in_kernel && part.size() >= kCopyInKernel) {
      for (const FileRegion& r : regions) {
        if (r.fd >= 0 && part.data() >= r.bytes.data() &&
            part.data() + part.size() <= r.bytes.data() + r.bytes.size()) {
          in = &r;
        }
      }
    }
    if (in != nullptr) {
      flush();
      auto offset = static_cast<off64_t>(part.data() - in->bytes.data());
      size_t done = 0;
      while (done < part.size()) {
        const ssize_t n =
            ::copy_file_range(in->fd, &offset, file.fd, nullptr, part.size() - done, 0);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0 && done == 0 &&
            (n == 0 || errno == EXDEV || errno == ENOSYS || errno == EOPNOTSUPP ||
             errno == EINVAL)) {
          copy_in_kernel = false;  // write it, and every later part, from memory
          break;
        }
        if (n <= 0) fail("copying");
        done += static_cast<size_t>(n);
      }
      if (done == part.size()) continue;
    }
    batch.push_back({const_cast<char*>(part.data()), part.size()});
    if (batch.size() == kBatch) flush();
  }
  flush();
  // Start the writeback now (NOTE [Files committed together]); commit() waits for it. Where the
  // file system refuses, fsync does all of it.
  ::sync_file_range(file.fd, 0, 0, SYNC_FILE_RANGE_WRITE);
  temp_ = temp.string();
  std::swap(fd_, file.fd);
}

PendingFile::PendingFile(PendingFile&& other) noexcept
    : path_(std::move(other.path_)),
      temp_(std::move(other.temp_)),
      what_(other.what_),
      fd_(std::exchange(other.fd_, -1)) {}

PendingFile::~PendingFile() {
  if (fd_ < 0) return;
  ::close(fd_);
  ::unlink(temp_.c_str());
}

void PendingFile::commit() {
  namespace fs = std::filesystem;
  CLEAVE_ASSERT(fd_ >= 0, "PendingFile::commit: '{}' is already committed", path_);
  const int fd = std::exchange(fd_, -1);
  const auto fail = [&](const char* step, bool close_it) {
    const std::string reason = system_error();
    if (close_it) ::close(fd);
    ::unlink(temp_.c_str());
    CLEAVE_FAIL("cannot save {} '{}': {} failed: {}; the previous file (if any) is unchanged",
                what_, path_, step, reason);
  };
  if (::fsync(fd) != 0) fail("fsync", true);
  if (::close(fd) != 0) fail("close", false);
  if (::rename(temp_.c_str(), path_.c_str()) != 0) fail("renaming the temporary file", false);
  // The rename is durable once the folder's entry is on disk.
  const fs::path target(path_);
  const fs::path dir = target.has_parent_path() ? target.parent_path() : fs::path(".");
  Fd dir_fd;
  dir_fd.fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  CLEAVE_CHECK_ARG(dir_fd.fd >= 0 && ::fsync(dir_fd.fd) == 0,
                   "cannot save {} '{}': fsync of the folder '{}' failed: {}", what_, path_,
                   dir.string(), system_error());
}

std::string read_whole_file(const std::string& path, const char* what) {
  Fd file;
  std::string out(open_for_reading(file, path, what), '\0');
  size_t done = 0;
  while (done < out.size()) {
    const ssize_t n = ::read(file.fd, out.data() + done, out.size() - done);
    if (n < 0 && errno == EINTR) continue;
    CLEAVE_CHECK_ARG(n >= 0, "cannot load {} '{}': reading failed: {}", what, path, system_error());
    if (n == 0) break;
    done += static_cast<size_t>(n);
  }
  out.resize(done);
  return out;
}

MappedFile::MappedFile(const std::string& path, const char* what) {
  Fd file;
  size_ = open_for_reading(file, path, what);
  if (size_ == 0) return;
  void* p = ::mmap(nullptr, size_, PROT_READ, MAP_PRIVATE | MAP_POPULATE, file.fd, 0);
  CLEAVE_CHECK_ARG(p != MAP_FAILED, "cannot load {} '{}': mapping it failed: {}", what, path,
                   system_error());
  data_ = static_cast<const char*>(p);
  std::swap(fd_, file.fd);  // kept open for region()
}

MappedFile::~MappedFile() {
  if (data_ != nullptr) ::munmap(const_cast<char*>(data_), size_);
  if (fd_ >= 0) ::close(fd_);
}

}  // namespace cleave

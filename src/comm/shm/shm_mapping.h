// A POSIX shared-memory segment mapped into this process: the one way the shared-memory
// transports (the collectives' segment, the placed graphs' mailboxes) create and map segments.
// Internal to comm.
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <utility>

#if defined(__SANITIZE_THREAD__)
#define CLEAVE_SHM_ONE_MAPPING_PER_PROCESS 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define CLEAVE_SHM_ONE_MAPPING_PER_PROCESS 1
#endif
#endif

namespace cleave::comm::shm {

// Whether this process maps each segment once, whoever creates or opens it: in a ThreadSanitizer
// build (NOTE [One mapping per process under TSan] in shm_mapping.cc).
#ifdef CLEAVE_SHM_ONE_MAPPING_PER_PROCESS
inline constexpr bool kOneMappingPerProcess = true;
#else
inline constexpr bool kOneMappingPerProcess = false;
#endif

class Mapping {
 public:
  // Creates segment `name` ("/...", which must not exist) of `bytes` zero bytes and maps it. Its
  // memory is reserved now (posix_fallocate), so a full /dev/shm fails here instead of raising
  // SIGBUS at a later write. Null on any failure, after unlinking what it created.
  static std::unique_ptr<Mapping> create(const std::string& name, size_t bytes);
  // Maps the first `bytes` of the existing segment `name`; null on failure.
  static std::unique_ptr<Mapping> open(const std::string& name, size_t bytes);
  // Unmaps (built with TSan: once no other Mapping of this process shares the mapping, NOTE [One
  // mapping per process under TSan] in shm_mapping.cc); the segment itself lives on until it is
  // unlinked and unmapped everywhere.
  ~Mapping();
  Mapping(const Mapping&) = delete;
  Mapping& operator=(const Mapping&) = delete;

  std::byte* data() const { return data_; }
  size_t size() const { return size_; }

 private:
  Mapping(std::shared_ptr<void> region, std::byte* data, size_t size)
      : region_(std::move(region)), data_(data), size_(size) {}
  static std::unique_ptr<Mapping> map(int fd, size_t bytes);  // closes fd
  std::shared_ptr<void> region_;  // the mmap, unmapped with its last owner
  std::byte* data_;
  size_t size_;
};

}  // namespace cleave::comm::shm

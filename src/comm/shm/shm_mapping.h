// A POSIX shared-memory segment mapped into this process: the one way the shared-memory
// transports (the collectives' segment, the placed graphs' mailboxes) create and map segments.
// Internal to comm.
#pragma once

#include <cstddef>
#include <memory>
#include <string>

namespace cleave::comm::shm {

class Mapping {
 public:
  // Creates segment `name` ("/...", which must not exist) of `bytes` zero bytes and maps it. Its
  // memory is reserved now (posix_fallocate), so a full /dev/shm fails here instead of raising
  // SIGBUS at a later write. Null on any failure, after unlinking what it created.
  static std::unique_ptr<Mapping> create(const std::string& name, size_t bytes);
  // Maps the first `bytes` of the existing segment `name`; null on failure.
  static std::unique_ptr<Mapping> open(const std::string& name, size_t bytes);
  ~Mapping();  // unmaps; the segment itself lives on until it is unlinked and unmapped everywhere
  Mapping(const Mapping&) = delete;
  Mapping& operator=(const Mapping&) = delete;

  std::byte* data() const { return data_; }
  size_t size() const { return size_; }

 private:
  Mapping(std::byte* data, size_t size) : data_(data), size_(size) {}
  static std::unique_ptr<Mapping> map(int fd, size_t bytes);  // closes fd
  std::byte* data_;
  size_t size_;
};

}  // namespace cleave::comm::shm

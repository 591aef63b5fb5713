// Creating and mapping shared-memory segments (comm/shm/shm_mapping.h).
#include "comm/shm/shm_mapping.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

namespace cleave::comm::shm {

std::unique_ptr<Mapping> Mapping::map(int fd, size_t bytes) {
  void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  close(fd);
  if (p == MAP_FAILED) return nullptr;
  return std::unique_ptr<Mapping>(new Mapping(static_cast<std::byte*>(p), bytes));
}

std::unique_ptr<Mapping> Mapping::create(const std::string& name, size_t bytes) {
  const int fd = shm_open(name.c_str(), O_CREAT | O_EXCL | O_RDWR, 0600);
  if (fd < 0) return nullptr;
  std::unique_ptr<Mapping> mapping;
  if (posix_fallocate(fd, 0, static_cast<off_t>(bytes)) == 0) {
    mapping = map(fd, bytes);
  } else {
    close(fd);
  }
  if (mapping == nullptr) shm_unlink(name.c_str());
  return mapping;
}

std::unique_ptr<Mapping> Mapping::open(const std::string& name, size_t bytes) {
  const int fd = shm_open(name.c_str(), O_RDWR, 0600);
  if (fd < 0) return nullptr;
  return map(fd, bytes);
}

Mapping::~Mapping() { munmap(data_, size_); }

}  // namespace cleave::comm::shm

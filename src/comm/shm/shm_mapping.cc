// Creating and mapping shared-memory segments (comm/shm/shm_mapping.h).
#include "comm/shm/shm_mapping.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <map>
#include <mutex>
#include <utility>

namespace cleave::comm::shm {
namespace {

// One mmap of a segment, unmapped when its last Mapping goes.
struct Region {
  Region(std::byte* d, size_t b) : data(d), bytes(b) {}
  std::byte* data;
  size_t bytes;
  ~Region() { munmap(data, bytes); }
  Region(const Region&) = delete;
  Region& operator=(const Region&) = delete;
};

std::shared_ptr<Region> map_region(int fd, size_t bytes) {
  void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (p == MAP_FAILED) return nullptr;
  return std::shared_ptr<Region>(new Region(static_cast<std::byte*>(p), bytes));
}

#ifdef CLEAVE_SHM_ONE_MAPPING_PER_PROCESS
// NOTE [One mapping per process under TSan]
// ThreadSanitizer knows memory by its address. Ranks that are threads of one process (the tests)
// would each map a segment at an address of their own, and TSan could then relate no rank's
// access inside the segment to another rank's: the protocol in the segment would go unchecked.
// Built with TSan, a process maps each segment once (by device and inode): a later create() or
// open() of it in the same process shares that mapping. Other builds map it once per call.
struct Regions {
  std::mutex mutex;
  std::map<std::pair<dev_t, ino_t>, std::weak_ptr<Region>> by_file;
};

Regions& regions() {
  static auto* r = new Regions;  // never destroyed: a mapping may go during static destruction
  return *r;
}

std::shared_ptr<Region> shared_region(int fd, size_t bytes) {
  struct stat st {};
  if (fstat(fd, &st) != 0) return nullptr;
  Regions& r = regions();
  std::lock_guard<std::mutex> lock(r.mutex);
  std::erase_if(r.by_file, [](const auto& entry) { return entry.second.expired(); });
  std::weak_ptr<Region>& slot = r.by_file[{st.st_dev, st.st_ino}];
  std::shared_ptr<Region> region = slot.lock();
  if (region == nullptr || region->bytes < bytes) {
    region = map_region(fd, bytes);
    if (region != nullptr) slot = region;
  }
  return region;
}
#endif

}  // namespace

std::unique_ptr<Mapping> Mapping::map(int fd, size_t bytes) {
#ifdef CLEAVE_SHM_ONE_MAPPING_PER_PROCESS
  std::shared_ptr<Region> region = shared_region(fd, bytes);
#else
  std::shared_ptr<Region> region = map_region(fd, bytes);
#endif
  close(fd);
  if (region == nullptr) return nullptr;
  std::byte* data = region->data;
  return std::unique_ptr<Mapping>(new Mapping(std::move(region), data, bytes));
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

Mapping::~Mapping() = default;

}  // namespace cleave::comm::shm

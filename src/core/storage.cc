#include "cleave/core/storage.h"

#include <sys/sysinfo.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <limits>
#include <mutex>
#include <new>
#include <unordered_map>
#include <vector>

#include "cleave/core/allocation_limit.h"
#include "cleave/core/env.h"
#include "cleave/core/error.h"

namespace cleave {
namespace {

constexpr size_t kAlignment = 64;
DeviceAllocator g_cuda_allocator{nullptr, nullptr};
std::atomic<size_t> g_cpu_live_bytes{0};
std::atomic<size_t> g_cpu_peak_live_bytes{0};

// NOTE [CPU allocation cache]
// A training step allocates the same large buffers (activations, gradients) every step. glibc
// serves blocks this large with mmap and returns them with munmap, so each step paid for fresh
// zeroed pages (page faults, a large share of a small model's step). Freed blocks of at least
// kCacheMinBytes are therefore kept in free lists keyed by their size (rounded up to a page) and
// handed out again.
//
// Small blocks (the data pipeline's per-image tensors of 0.8-4 KB, scalars, shapes of transient
// values) are cached too, by size rounded up to 64 bytes, at most kSmallBlocksPerSize of each
// size: aligned_alloc(64, n) takes glibc's memalign path, which bypasses its per-thread cache and
// splits chunks (perf found the placed LeNet's image pipeline thread there much of its time).
// Blocks freed by another thread than the one that allocated them (a batch made by the pipeline,
// freed by the training thread) are reused alike: one mutex guards the lists. The cache holds at
// most CLEAVE_CPU_CACHE_MB (default 2048) MiB; beyond that blocks are freed at once.
// Measurements: bench/README.md, 'core'.
constexpr size_t kCacheMinBytes = size_t{64} << 10;
constexpr size_t kPage = 4096;
constexpr size_t kSmallBlocksPerSize = 256;

// Physical memory and swap: no allocation can be larger.
size_t machine_memory_bytes() {
  static const size_t bytes = [] {
    struct sysinfo info {};
    if (sysinfo(&info) != 0) return std::numeric_limits<size_t>::max();
    return (static_cast<size_t>(info.totalram) + info.totalswap) * info.mem_unit;
  }();
  return bytes;
}

// set_cpu_allocation_limit's value; 0: the machine's memory and swap.
std::atomic<size_t> g_allocation_limit{0};

class CpuBlockCache {
 public:
  static CpuBlockCache& instance() {
    static CpuBlockCache* cache = new CpuBlockCache();  // never destroyed: used by static dtors
    return *cache;
  }

  void* allocate(size_t nbytes) {
    const size_t size = rounded(nbytes);
    {
      std::lock_guard<std::mutex> lock(mutex_);
      std::vector<void*>* blocks = nullptr;
      if (size < kCacheMinBytes) {
        blocks = &small_[size / kAlignment];
      } else if (auto it = large_.find(size); it != large_.end()) {
        blocks = &it->second;
      }
      if (blocks != nullptr && !blocks->empty()) {
        void* p = blocks->back();
        blocks->pop_back();
        cached_bytes_ -= size;
        return p;
      }
    }
    // A tensor larger than the machine's memory and swap is a mistake (a shape read from a
    // file, a wrong batch size), not an allocation to try: the kernel may grant it and kill the
    // process later, and sanitizers abort on it (found by the ir_text fuzzer).
    const size_t set = g_allocation_limit.load(std::memory_order_relaxed);
    CLEAVE_CHECK_ARG(set == 0 || size <= set,
                     "cannot allocate {} bytes for a tensor: this process allows at most {} bytes "
                     "for one (set_cpu_allocation_limit); expected a smaller shape",
                     nbytes, set);
    CLEAVE_CHECK_ARG(size <= machine_memory_bytes(),
                     "cannot allocate {} bytes for a tensor: this machine has {} bytes of memory "
                     "and swap; expected a smaller shape",
                     nbytes, machine_memory_bytes());
    void* p = std::aligned_alloc(kAlignment, size);
    CLEAVE_CHECK_ARG(p != nullptr,
                     "cannot allocate {} bytes for a tensor: out of memory ({} bytes are held by "
                     "live tensors)",
                     nbytes, g_cpu_live_bytes.load());
    return p;
  }

  void deallocate(void* p, size_t nbytes) {
    const size_t size = rounded(nbytes);
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (cached_bytes_ + size <= limit_bytes_) {
        std::vector<void*>& blocks =
            size < kCacheMinBytes ? small_[size / kAlignment] : large_[size];
        if (size >= kCacheMinBytes || blocks.size() < kSmallBlocksPerSize) {
          blocks.push_back(p);
          cached_bytes_ += size;
          return;
        }
      }
    }
    std::free(p);
  }

  void release() {
    std::lock_guard<std::mutex> lock(mutex_);
    for (auto& [size, blocks] : large_) {
      for (void* p : blocks) std::free(p);
    }
    large_.clear();
    for (std::vector<void*>& blocks : small_) {
      for (void* p : blocks) std::free(p);
      blocks.clear();
    }
    cached_bytes_ = 0;
  }

  size_t cached_bytes() {
    std::lock_guard<std::mutex> lock(mutex_);
    return cached_bytes_;
  }

 private:
  CpuBlockCache() : small_(kCacheMinBytes / kAlignment) {
    limit_bytes_ = static_cast<size_t>(env::integer("CLEAVE_CPU_CACHE_MB", 0, 1 << 20)) << 20;
  }
  static size_t rounded(size_t nbytes) {
    const size_t n = std::max<size_t>(nbytes, 1);
    const size_t unit = n >= kCacheMinBytes ? kPage : kAlignment;
    return (n + unit - 1) / unit * unit;
  }

  std::mutex mutex_;
  std::vector<std::vector<void*>> small_;  // [size / kAlignment], sizes below kCacheMinBytes
  std::unordered_map<size_t, std::vector<void*>> large_;
  size_t cached_bytes_ = 0;
  size_t limit_bytes_ = 0;
};

}  // namespace

size_t cpu_cached_bytes() { return CpuBlockCache::instance().cached_bytes(); }
void release_cpu_cache() { CpuBlockCache::instance().release(); }

void set_device_allocator(DeviceType type, DeviceAllocator allocator) {
  CLEAVE_ASSERT(type == DeviceType::kCUDA, "only CUDA takes a device allocator");
  g_cuda_allocator = allocator;
}

size_t cpu_live_bytes() { return g_cpu_live_bytes.load(); }
size_t cpu_peak_live_bytes() { return g_cpu_peak_live_bytes.load(); }
void reset_cpu_peak_live_bytes() { g_cpu_peak_live_bytes.store(g_cpu_live_bytes.load()); }

Storage::Storage(size_t nbytes, Device device) : nbytes_(nbytes), device_(device) {
  if (device.is_cpu()) {
    data_ = CpuBlockCache::instance().allocate(nbytes);
    const size_t live = g_cpu_live_bytes.fetch_add(nbytes) + nbytes;
    size_t peak = g_cpu_peak_live_bytes.load();
    while (live > peak && !g_cpu_peak_live_bytes.compare_exchange_weak(peak, live)) {
    }
    return;
  }
  if (g_cuda_allocator.allocate == nullptr) {
    CLEAVE_UNIMPLEMENTED(
        "cannot allocate on {}: this build of cleave has no CUDA support (configure with "
        "-DCLEAVE_WITH_CUDA=ON on a machine with the CUDA toolkit)",
        device.to_string());
  }
  data_ = g_cuda_allocator.allocate(nbytes, device.index);
}

std::shared_ptr<Storage> Storage::borrow(void* data, size_t nbytes, Device device) {
  std::shared_ptr<Storage> storage(new Storage(data, nbytes, device));
  storage->owned_ = false;
  return storage;
}

Storage::~Storage() {
  if (!owned_) return;
  if (device_.is_cpu()) {
    g_cpu_live_bytes.fetch_sub(nbytes_);
    CpuBlockCache::instance().deallocate(data_, nbytes_);
  } else if (data_ != nullptr) {
    g_cuda_allocator.deallocate(data_, device_.index);
  }
}

size_t cpu_allocation_limit() {
  const size_t set = g_allocation_limit.load(std::memory_order_relaxed);
  return set == 0 ? machine_memory_bytes() : std::min(set, machine_memory_bytes());
}

void set_cpu_allocation_limit(size_t bytes) {
  g_allocation_limit.store(bytes, std::memory_order_relaxed);
}

}  // namespace cleave

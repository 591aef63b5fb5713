// Storage: one aligned allocation shared by every tensor that views it; owned, or borrowed from
// memory that something else manages (Storage::borrow).
#pragma once

#include <cstddef>
#include <memory>

#include "cleave/core/device.h"

namespace cleave {

class Storage {
 public:
  // Allocates `nbytes` (64-byte aligned) on `device`. Contents are uninitialised.
  Storage(size_t nbytes, Device device);
  // Memory owned elsewhere (e.g. a shared-memory mailbox), which must outlive every tensor that
  // views it; the storage never frees it and it does not count as live tensor memory.
  static std::shared_ptr<Storage> borrow(void* data, size_t nbytes, Device device);
  ~Storage();
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;

  void* data() const { return data_; }
  size_t nbytes() const { return nbytes_; }
  Device device() const { return device_; }

 private:
  Storage(void* data, size_t nbytes, Device device)
      : data_(data), nbytes_(nbytes), device_(device) {}

  void* data_ = nullptr;
  size_t nbytes_ = 0;
  Device device_;
  bool owned_ = true;
};

// Bytes held in the CPU block cache (NOTE [CPU allocation cache] in storage.cc), and a way to
// return them all to the system.
size_t cpu_cached_bytes();
// Bytes of CPU tensor storage alive now (requested sizes, not counting the block cache), and the
// highest value since the last reset_cpu_peak_live_bytes(): the peak memory figure of the benches.
size_t cpu_live_bytes();
size_t cpu_peak_live_bytes();
void reset_cpu_peak_live_bytes();
void release_cpu_cache();

// Pluggable allocation for non-CPU devices; the CUDA kernels library installs one.
struct DeviceAllocator {
  void* (*allocate)(size_t nbytes, int device_index);
  void (*deallocate)(void* ptr, int device_index);
};
void set_device_allocator(DeviceType type, DeviceAllocator allocator);

}  // namespace cleave

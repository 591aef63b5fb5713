#include "cleave/core/storage.h"

#include <cstdlib>
#include <new>

#include "cleave/core/error.h"

namespace cleave {
namespace {

constexpr size_t kAlignment = 64;
DeviceAllocator g_cuda_allocator{nullptr, nullptr};

}  // namespace

void set_device_allocator(DeviceType type, DeviceAllocator allocator) {
  CLEAVE_ASSERT(type == DeviceType::kCUDA, "only CUDA takes a device allocator");
  g_cuda_allocator = allocator;
}

Storage::Storage(size_t nbytes, Device device) : nbytes_(nbytes), device_(device) {
  if (device.is_cpu()) {
    const size_t rounded = (std::max<size_t>(nbytes, 1) + kAlignment - 1) / kAlignment * kAlignment;
    data_ = std::aligned_alloc(kAlignment, rounded);
    if (data_ == nullptr) throw std::bad_alloc();
    return;
  }
  CLEAVE_CHECK_ARG(
      g_cuda_allocator.allocate != nullptr,
      "cannot allocate on {}: this build of cleave has no CUDA support (configure with "
      "-DCLEAVE_WITH_CUDA=ON on a machine with the CUDA toolkit)",
      device.to_string());
  data_ = g_cuda_allocator.allocate(nbytes, device.index);
}

Storage::~Storage() {
  if (device_.is_cpu()) {
    std::free(data_);
  } else if (data_ != nullptr) {
    g_cuda_allocator.deallocate(data_, device_.index);
  }
}

}  // namespace cleave

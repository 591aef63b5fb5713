#include <cuda_runtime.h>

#include "kernels/cuda/runtime.h"

namespace cleave::kernels::cuda {
namespace {

// Clears the runtime's sticky "last error" and returns `err` as an int.
int report(cudaError_t err) {
  if (err != cudaSuccess) (void)cudaGetLastError();
  return static_cast<int>(err);
}

// Makes device `index` current while alive and restores the previous one. `status` is the
// result of switching; callers do nothing else when it is non-zero.
class DeviceGuard {
 public:
  explicit DeviceGuard(int index) {
    if (cudaGetDevice(&previous_) != cudaSuccess) previous_ = -1;
    if (previous_ != index) status = report(cudaSetDevice(index));
  }
  ~DeviceGuard() {
    if (previous_ >= 0) (void)cudaSetDevice(previous_);
  }
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

  int status = 0;

 private:
  int previous_ = -1;
};

}  // namespace

int get_device_count(int* count) {
  *count = 0;
  const int status = report(cudaGetDeviceCount(count));
  if (status != 0) *count = 0;
  return status;
}

int malloc_on(int index, size_t nbytes, void** ptr) {
  *ptr = nullptr;
  DeviceGuard guard(index);
  if (guard.status != 0) return guard.status;
  return report(cudaMalloc(ptr, nbytes));
}

int free_on(int index, void* ptr) {
  DeviceGuard guard(index);
  if (guard.status != 0) return guard.status;
  return report(cudaFree(ptr));
}

int copy_bytes(void* dst, Device dst_device, const void* src, Device src_device, size_t nbytes) {
  if (nbytes == 0) return 0;
  if (src_device.is_cpu() && dst_device.is_cpu()) {
    return report(cudaMemcpy(dst, src, nbytes, cudaMemcpyHostToHost));
  }
  if (!src_device.is_cpu() && !dst_device.is_cpu() && src_device.index != dst_device.index) {
    return report(cudaMemcpyPeer(dst, dst_device.index, src, src_device.index, nbytes));
  }
  // One CUDA device is involved: make it current, so the copy runs in its context.
  const int index = src_device.is_cpu() ? dst_device.index : src_device.index;
  const cudaMemcpyKind kind = src_device.is_cpu()   ? cudaMemcpyHostToDevice
                              : dst_device.is_cpu() ? cudaMemcpyDeviceToHost
                                                    : cudaMemcpyDeviceToDevice;
  DeviceGuard guard(index);
  if (guard.status != 0) return guard.status;
  return report(cudaMemcpy(dst, src, nbytes, kind));
}

std::string error_text(int code) {
  const auto err = static_cast<cudaError_t>(code);
  return std::string(cudaGetErrorString(err)) + " (" + cudaGetErrorName(err) + ")";
}

}  // namespace cleave::kernels::cuda

#include "cleave/kernels/device.h"

#include <mutex>

#include "cleave/core/error.h"
#include "cleave/core/storage.h"

#ifdef CLEAVE_HAVE_CUDA
#include "kernels/cuda/runtime.h"
#endif

namespace cleave {

#ifdef CLEAVE_HAVE_CUDA

namespace {

struct Probe {
  int count = 0;
  std::string reason;  // why count is 0
};

// NOTE [CUDA probe]
// The first CUDA call of the process asks for the device count once. On a machine without a
// driver or a GPU it fails (cudaErrorNoDevice, cudaErrorInsufficientDriver, ...) rather than
// crashing; the failure is kept as text so that every later error can say why CUDA is unusable.
const Probe& probe() {
  static const Probe result = [] {
    Probe p;
    int n = 0;
    const int status = kernels::cuda::get_device_count(&n);
    if (status != 0) {
      p.reason = "cudaGetDeviceCount failed: " + kernels::cuda::error_text(status);
    } else if (n <= 0) {
      p.reason = "cudaGetDeviceCount found no CUDA device";
    } else {
      p.count = n;
    }
    return p;
  }();
  return result;
}

// Throws Error unless `device` is a CUDA device that exists and is usable.
void check_cuda_device(Device device, const char* what) {
  const Probe& p = probe();
  CLEAVE_CHECK_ARG(p.count > 0, "{}: cannot use {}: no usable CUDA device on this machine ({})",
                   what, device.to_string(), p.reason);
  CLEAVE_CHECK_ARG(device.index >= 0 && device.index < p.count,
                   "{}: cannot use {}: this machine has {} CUDA device(s), CUDA:0 to CUDA:{}", what,
                   device.to_string(), p.count, p.count - 1);
}

void* cuda_allocate(size_t nbytes, int index) {
  check_cuda_device(Device::cuda(index), "Storage");
  if (nbytes == 0) return nullptr;
  void* ptr = nullptr;
  const int status = kernels::cuda::malloc_on(index, nbytes, &ptr);
  CLEAVE_CHECK_ARG(status == 0, "cannot allocate {} bytes on CUDA:{}: {}", nbytes, index,
                   kernels::cuda::error_text(status));
  return ptr;
}

// Called from Storage's destructor, so it must not throw. A failure here can only follow an
// earlier CUDA failure (a lost device), which was reported where it happened.
void cuda_deallocate(void* ptr, int index) noexcept {
  if (ptr != nullptr) (void)kernels::cuda::free_on(index, ptr);
}

void install_cuda_allocator() {
  static std::once_flag once;
  std::call_once(once, [] {
    set_device_allocator(DeviceType::kCUDA, DeviceAllocator{&cuda_allocate, &cuda_deallocate});
  });
}

const bool kCudaAllocatorInstalled = (install_cuda_allocator(), true);

}  // namespace

bool cuda_available() { return probe().count > 0; }
int cuda_device_count() { return probe().count; }
std::string cuda_unavailable_reason() { return probe().reason; }

Tensor to_device(const Tensor& t, Device device) {
  CLEAVE_CHECK_ARG(t.defined(), "to_device: the tensor is undefined");
  if (t.device() == device) return t;
  if (!t.device().is_cpu()) check_cuda_device(t.device(), "to_device");
  if (!device.is_cpu()) check_cuda_device(device, "to_device");
  install_cuda_allocator();
  Tensor out = Tensor::empty(t.shape(), t.dtype(), device);
  const int status =
      kernels::cuda::copy_bytes(out.raw_data(), device, t.raw_data(), t.device(), t.nbytes());
  CLEAVE_CHECK_ARG(status == 0, "to_device: copying {} bytes from {} to {} failed: {}", t.nbytes(),
                   t.device().to_string(), device.to_string(), kernels::cuda::error_text(status));
  return out;
}

#else  // no CUDA in this build

namespace {
constexpr const char* kNoCudaBuild =
    "this build of cleave has no CUDA support (configure with -DCLEAVE_WITH_CUDA=ON on a machine "
    "with the CUDA toolkit)";
}  // namespace

bool cuda_available() { return false; }
int cuda_device_count() { return 0; }
std::string cuda_unavailable_reason() { return kNoCudaBuild; }

Tensor to_device(const Tensor& t, Device device) {
  CLEAVE_CHECK_ARG(t.defined(), "to_device: the tensor is undefined");
  if (t.device() == device) return t;
  CLEAVE_UNIMPLEMENTED("to_device: cannot copy a tensor from {} to {}: {}", t.device().to_string(),
                       device.to_string(), kNoCudaBuild);
}

#endif

}  // namespace cleave

#ifdef CLEAVE_HAVE_CUDA
// Named with the linker's --undefined by every target linking a static cleave_kernels, so this
// object file, and with it the static initializer above that installs the CUDA allocator, is
// linked into every program, even one that creates CUDA tensors only through Tensor::empty (NOTE
// [The CUDA allocator in every program] in the top CMakeLists.txt).
extern "C" const bool cleave_cuda_runtime_anchor = cleave::kCudaAllocatorInstalled;
#endif

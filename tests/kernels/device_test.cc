#include "cleave/kernels/device.h"

#include <gtest/gtest.h>

#include "testing/gradcheck.h"

namespace cleave {
namespace {

TEST(Device, ToSameDeviceReturnsTheSameTensor) {
  Tensor t = Tensor::arange(0, 6, 1, DType::kFloat32).view({2, 3});
  Tensor u = to_device(t, Device::cpu());
  EXPECT_TRUE(u.shares_storage_with(t));
  EXPECT_EQ(u.shape(), t.shape());
}

TEST(Device, AvailabilityIsConsistent) {
  // Must not crash or throw on a machine without a driver or GPU.
  const bool available = cuda_available();
  EXPECT_EQ(available, cuda_device_count() > 0);
  EXPECT_EQ(available, cuda_unavailable_reason().empty()) << cuda_unavailable_reason();
}

#ifndef CLEAVE_HAVE_CUDA
TEST(Device, BuildWithoutCudaRejectsCudaDevicesClearly) {
  EXPECT_FALSE(cuda_available());
  EXPECT_EQ(cuda_device_count(), 0);
  EXPECT_ERROR(to_device(Tensor::ones({2}), Device::cuda()), "to_device", "CPU", "CUDA:0",
               "this build of cleave has no CUDA support", "-DCLEAVE_WITH_CUDA=ON");
  EXPECT_ERROR(Tensor::empty({2}, DType::kFloat32, Device::cuda()), "CUDA:0", "no CUDA support");
}
#else
TEST(Device, CudaBuildWithoutGpuRejectsCudaDevicesClearly) {
  if (cuda_available()) GTEST_SKIP() << "a CUDA device is present; this tests the no-GPU path";
  EXPECT_ERROR(to_device(Tensor::ones({2}), Device::cuda()), "to_device", "CUDA:0",
               "no usable CUDA device", "cudaGetDeviceCount");
  EXPECT_ERROR(Tensor::empty({2}, DType::kFloat32, Device::cuda()), "CUDA:0",
               "no usable CUDA device");
}

TEST(Device, OutOfRangeCudaIndexIsRejected) {
  if (!cuda_available()) GTEST_SKIP() << "no usable CUDA device: " << cuda_unavailable_reason();
  const int n = cuda_device_count();
  EXPECT_ERROR(to_device(Tensor::ones({2}), Device::cuda(n)), "to_device",
               fmt::format("CUDA:{}", n), fmt::format("has {} CUDA device(s)", n));
}

TEST(Device, CpuCudaCpuRoundTripKeepsValues) {
  if (!cuda_available()) GTEST_SKIP() << "no usable CUDA device: " << cuda_unavailable_reason();
  for (DType dtype : {DType::kFloat32, DType::kFloat64, DType::kInt32, DType::kInt64}) {
    Tensor t = Tensor::arange(-5, 7, 1, dtype).view({3, 4});
    Tensor on_gpu = to_device(t, Device::cuda());
    EXPECT_EQ(on_gpu.device(), Device::cuda());
    EXPECT_EQ(on_gpu.shape(), t.shape());
    EXPECT_EQ(on_gpu.dtype(), dtype);
    Tensor back = to_device(on_gpu, Device::cpu());
    EXPECT_TRUE(back.device().is_cpu());
    EXPECT_FALSE(back.shares_storage_with(t));
    EXPECT_EQ(back.to_double_vector(), t.to_double_vector()) << dtype_name(dtype);
  }
}

TEST(Device, CudaTensorsComeFromTheInstalledAllocatorAndCopyBetweenDevices) {
  if (!cuda_available()) GTEST_SKIP() << "no usable CUDA device: " << cuda_unavailable_reason();
  Tensor t = testing::random_f64({5, 7});
  Tensor a = to_device(t, Device::cuda());
  Tensor b = Tensor::empty(t.shape(), t.dtype(), Device::cuda());  // the installed allocator
  EXPECT_EQ(b.device(), Device::cuda());
  Tensor empty = to_device(Tensor::zeros({0, 3}), Device::cuda());
  EXPECT_EQ(to_device(empty, Device::cpu()).numel(), 0);
  if (cuda_device_count() > 1) {
    Tensor c = to_device(a, Device::cuda(1));
    EXPECT_TRUE(testing::all_close(to_device(c, Device::cpu()), t, 0, 0));
  }
  EXPECT_TRUE(testing::all_close(to_device(a, Device::cpu()), t, 0, 0));
}
#endif

}  // namespace
}  // namespace cleave

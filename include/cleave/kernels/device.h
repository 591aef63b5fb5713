// Moving tensors between the CPU and CUDA devices.
//
// These functions exist in every build. A build without CUDA (CLEAVE_WITH_CUDA=OFF) reports
// cuda_available() == false and throws cleave::Error from to_device() for any CUDA device; a
// CUDA build on a machine without a usable GPU or driver does the same, with the reason.
#pragma once

#include <string>

#include "cleave/core/device.h"
#include "cleave/core/tensor.h"

namespace cleave {

// True when this build has CUDA support and at least one CUDA device is usable (the driver
// loads and cudaGetDeviceCount returns > 0). Never throws; the probe runs once per process.
bool cuda_available();

// Number of usable CUDA devices; 0 when cuda_available() is false.
int cuda_device_count();

// Why CUDA cannot be used, for messages ("this build of cleave has no CUDA support ...",
// "cudaGetDeviceCount failed: ..."); empty when cuda_available() is true.
std::string cuda_unavailable_reason();

// A copy of `t` on `device` with the same shape, dtype and contents (CPU <-> CUDA and between
// CUDA devices). When `t` is already on `device` it is returned unchanged (same storage).
// Otherwise the result owns new storage and has no autograd history (requires_grad false).
// Blocks until the copy is complete. Throws Error when `device` or `t` is on a CUDA device that
// cannot be used (no CUDA in this build, no usable GPU, index out of range).
Tensor to_device(const Tensor& t, Device device);

}  // namespace cleave

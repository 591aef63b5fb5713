// Thin wrappers of the CUDA runtime (runtime.cu), compiled only when CLEAVE_WITH_CUDA is ON
// (CLEAVE_HAVE_CUDA defined).
//
// NOTE [No fmt in .cu files]
// nvcc's C++ front end cannot compile fmt's constexpr/consteval format machinery, so .cu files
// include neither fmt nor cleave/core/error.h (which includes fmt). CUDA code reports failures as
// a cudaError_t code (an int here, 0 = success); C++ code compiled by g++ (src/kernels/device.cc)
// turns codes into cleave::Error messages with error_text(). This header includes no CUDA
// header, so either side can include it.
#pragma once

#include <cstddef>
#include <string>

#include "cleave/core/device.h"

namespace cleave::kernels::cuda {

// cudaGetDeviceCount. Without a driver or a GPU it returns a non-zero code (it does not crash)
// and clears the error so that it does not leak into a later cudaGetLastError.
int get_device_count(int* count);

// cudaMalloc / cudaFree on device `index`; the current device is restored afterwards.
int malloc_on(int index, size_t nbytes, void** ptr);
int free_on(int index, void* ptr);

// Copies `nbytes` from `src` (memory on `src_device`) to `dst` (memory on `dst_device`), for any
// pair of CPU and CUDA devices. Blocks until the copy is complete.
int copy_bytes(void* dst, Device dst_device, const void* src, Device src_device, size_t nbytes);

// "no CUDA-capable device is detected (cudaErrorNoDevice)".
std::string error_text(int code);

}  // namespace cleave::kernels::cuda

#include "cleave/core/device.h"

namespace cleave {

std::string Device::to_string() const {
  return type == DeviceType::kCPU ? "CPU" : "CUDA:" + std::to_string(index);
}

}  // namespace cleave

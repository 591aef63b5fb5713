#include "loops.h"

namespace cleave::kernels::cpu {

std::vector<int64_t> broadcast_strides(const Shape& in, const Shape& out) {
  const int64_t rank = out.rank();
  std::vector<int64_t> strides(static_cast<size_t>(rank), 0);
  const int64_t lead = rank - in.rank();
  int64_t acc = 1;
  for (int64_t d = in.rank() - 1; d >= 0; --d) {
    strides[static_cast<size_t>(d + lead)] = in[d] == 1 ? 0 : acc;
    acc *= in[d];
  }
  return strides;
}

}  // namespace cleave::kernels::cpu

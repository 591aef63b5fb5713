#include "onednn.h"

#include "cleave/core/error.h"

namespace cleave::kernels::cpu {

dnnl::engine& onednn_engine() {
  static dnnl::engine engine(dnnl::engine::kind::cpu, 0);
  return engine;
}

dnnl::stream& onednn_stream() {
  thread_local dnnl::stream stream(onednn_engine());
  return stream;
}

dnnl::memory::data_type onednn_dtype(DType dtype) {
  switch (dtype) {
    case DType::kFloat32:
      return dnnl::memory::data_type::f32;
    case DType::kInt32:
      return dnnl::memory::data_type::s32;
    default:
      break;
  }
  CLEAVE_ASSERT(false, "oneDNN has no {} kernels; callers must check the dtype first",
                dtype_name(dtype));
}

dnnl::memory::dims onednn_dims(const Shape& shape) {
  return dnnl::memory::dims(shape.dims().begin(), shape.dims().end());
}

}  // namespace cleave::kernels::cpu

#include "cleave/core/dtype.h"

#include "cleave/core/error.h"

namespace cleave {

size_t dtype_size(DType dtype) {
  switch (dtype) {
    case DType::kFloat32:
      return 4;
    case DType::kFloat64:
      return 8;
    case DType::kInt32:
      return 4;
    case DType::kInt64:
      return 8;
    case DType::kBool:
      return 1;
  }
  CLEAVE_ASSERT(false, "bad dtype {}", static_cast<int>(dtype));
}

std::string_view dtype_name(DType dtype) {
  switch (dtype) {
    case DType::kFloat32:
      return "Float32";
    case DType::kFloat64:
      return "Float64";
    case DType::kInt32:
      return "Int32";
    case DType::kInt64:
      return "Int64";
    case DType::kBool:
      return "Bool";
  }
  CLEAVE_ASSERT(false, "bad dtype {}", static_cast<int>(dtype));
}

bool is_floating(DType dtype) { return dtype == DType::kFloat32 || dtype == DType::kFloat64; }
bool is_integral(DType dtype) { return dtype == DType::kInt32 || dtype == DType::kInt64; }

}  // namespace cleave

// Element types of tensors.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

namespace cleave {

enum class DType : uint8_t { kFloat32, kFloat64, kInt32, kInt64, kBool };

// Bytes per element.
size_t dtype_size(DType dtype);
// The name used in IR dumps and errors: "Float32", "Float64", "Int32", "Int64", "Bool".
std::string_view dtype_name(DType dtype);
bool is_floating(DType dtype);
bool is_integral(DType dtype);  // Int32, Int64 (not Bool)

// The C++ type for a dtype, and back.
template <typename T>
constexpr DType dtype_of();
template <>
constexpr DType dtype_of<float>() {
  return DType::kFloat32;
}
template <>
constexpr DType dtype_of<double>() {
  return DType::kFloat64;
}
template <>
constexpr DType dtype_of<int32_t>() {
  return DType::kInt32;
}
template <>
constexpr DType dtype_of<int64_t>() {
  return DType::kInt64;
}
template <>
constexpr DType dtype_of<bool>() {
  return DType::kBool;
}

// Calls fn.template operator()<T>() with T the C++ type of `dtype`; every dtype.
#define CLEAVE_DISPATCH_ALL(dtype, ...) \
  [&] {                                 \
    switch (dtype) {                    \
      case ::cleave::DType::kFloat32: { \
        using T = float;                \
        return __VA_ARGS__();           \
      }                                 \
      case ::cleave::DType::kFloat64: { \
        using T = double;               \
        return __VA_ARGS__();           \
      }                                 \
      case ::cleave::DType::kInt32: {   \
        using T = int32_t;              \
        return __VA_ARGS__();           \
      }                                 \
      case ::cleave::DType::kInt64: {   \
        using T = int64_t;              \
        return __VA_ARGS__();           \
      }                                 \
      case ::cleave::DType::kBool: {    \
        using T = bool;                 \
        return __VA_ARGS__();           \
      }                                 \
    }                                   \
    CLEAVE_ASSERT(false, "bad dtype");  \
  }()

// Same for the floating dtypes; others are a broken invariant (check before dispatching).
#define CLEAVE_DISPATCH_FLOAT(dtype, ...)              \
  [&] {                                                \
    switch (dtype) {                                   \
      case ::cleave::DType::kFloat32: {                \
        using T = float;                               \
        return __VA_ARGS__();                          \
      }                                                \
      case ::cleave::DType::kFloat64: {                \
        using T = double;                              \
        return __VA_ARGS__();                          \
      }                                                \
      default:                                         \
        break;                                         \
    }                                                  \
    CLEAVE_ASSERT(false, "expected a floating dtype"); \
  }()

// Numeric dtypes (no Bool).
#define CLEAVE_DISPATCH_NUMERIC(dtype, ...)           \
  [&] {                                               \
    switch (dtype) {                                  \
      case ::cleave::DType::kFloat32: {               \
        using T = float;                              \
        return __VA_ARGS__();                         \
      }                                               \
      case ::cleave::DType::kFloat64: {               \
        using T = double;                             \
        return __VA_ARGS__();                         \
      }                                               \
      case ::cleave::DType::kInt32: {                 \
        using T = int32_t;                            \
        return __VA_ARGS__();                         \
      }                                               \
      case ::cleave::DType::kInt64: {                 \
        using T = int64_t;                            \
        return __VA_ARGS__();                         \
      }                                               \
      default:                                        \
        break;                                        \
    }                                                 \
    CLEAVE_ASSERT(false, "expected a numeric dtype"); \
  }()

}  // namespace cleave

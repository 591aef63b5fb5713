// The oneDNN engine and stream cleave's CPU kernels share, and a cache of primitives by key.
//
// NOTE [oneDNN primitive cache]
// Creating a oneDNN primitive (JIT code generation) costs far more than running a small one, so
// kernels look primitives up by a key built from everything that determines them (op, shapes,
// dtype, attributes) and create each at most once per process. The cache is per thread: oneDNN
// primitives may be executed concurrently, but keeping one cache per thread avoids a lock on the
// hot path.
#pragma once

#include <any>
#include <functional>
#include <oneapi/dnnl/dnnl.hpp>
#include <string>
#include <unordered_map>

#include "cleave/core/dtype.h"
#include "cleave/core/shape.h"

namespace cleave::kernels::cpu {

dnnl::engine& onednn_engine();
dnnl::stream& onednn_stream();

dnnl::memory::data_type onednn_dtype(DType dtype);
dnnl::memory::dims onednn_dims(const Shape& shape);

// Returns the cached object for `key`, creating it with `make` on first use.
template <typename T>
T& cached_primitive(const std::string& key, const std::function<T()>& make) {
  thread_local std::unordered_map<std::string, std::any> cache;
  auto it = cache.find(key);
  if (it == cache.end()) it = cache.emplace(key, std::any(make())).first;
  return *std::any_cast<T>(&it->second);
}

}  // namespace cleave::kernels::cpu

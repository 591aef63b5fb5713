// Moving a plain cleave buffer in and out of the memory layout a oneDNN primitive works in.
//
// cleave tensors are plain row-major (NOTE [Tensor layout]); some oneDNN primitives run much
// faster on blocked layouts (nChw8c, OIhw8i8o, ...). A LayoutBridge is made once with the
// primitive (and cached with it) and, on every call, either hands the primitive the plain buffer
// itself (layouts equal: no copy) or a reordered copy.
#pragma once

#include <oneapi/dnnl/dnnl.hpp>
#include <optional>

namespace cleave::kernels::cpu {

class LayoutBridge {
 public:
  LayoutBridge() = default;
  // For a primitive input: `plain` data is converted to `layout` before the primitive runs.
  static LayoutBridge input(const dnnl::memory::desc& plain, const dnnl::memory::desc& layout);
  // For a primitive output: the primitive writes `layout`, converted to `plain` afterwards.
  static LayoutBridge output(const dnnl::memory::desc& plain, const dnnl::memory::desc& layout);

  const dnnl::memory::desc& layout() const { return layout_; }

  // Input bridges: memory in layout() holding the contents of the plain buffer `data`.
  dnnl::memory bring_in(const void* data, dnnl::stream& stream) const;
  // Output bridges: memory in layout() for the primitive to write; then take_out(...) it.
  dnnl::memory place_out(void* data) const;
  // Output bridges: copies what the primitive wrote into `place_out`'s memory to `data`.
  void take_out(dnnl::memory written, void* data, dnnl::stream& stream) const;

 private:
  dnnl::memory::desc plain_, layout_;
  std::optional<dnnl::reorder> reorder_;  // absent when the layouts are equal
};

}  // namespace cleave::kernels::cpu

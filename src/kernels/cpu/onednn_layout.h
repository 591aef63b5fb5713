// Moving a plain cleave buffer in and out of the memory layout a oneDNN primitive works in.
//
// cleave tensors are plain row-major (NOTE [Tensor layout]); some oneDNN primitives run much
// faster on blocked layouts (nChw8c, OIhw8i8o, ...). A LayoutBridge is made once with the
// primitive (and cached with it) and, on every call, either hands the primitive the plain buffer
// itself (layouts equal: no copy) or a reordered copy.
//
// NOTE [Bridge buffers from the allocation cache]
// A reordered copy lives in `storage`, a tensor from cleave's CPU allocation cache (NOTE [CPU
// allocation cache] in src/core/storage.cc), which the caller keeps until the primitive has run.
// They used to be oneDNN memory objects that allocated their own buffer on every call: glibc's
// malloc, which serves a block of 128 KiB or more with a fresh mmap (page faults on every call)
// or from its heap depending on what the process freed before. LeNet's conv2 backward passes ran
// 11-45% slower in one step than in another for that alone (bench/README.md, "search", run K).
#pragma once

#include <oneapi/dnnl/dnnl.hpp>
#include <optional>

#include "cleave/core/tensor.h"

namespace cleave::kernels::cpu {

class LayoutBridge {
 public:
  LayoutBridge() = default;
  // For a primitive input: `plain` data is converted to `layout` before the primitive runs.
  static LayoutBridge input(const dnnl::memory::desc& plain, const dnnl::memory::desc& layout);
  // For a primitive output: the primitive writes `layout`, converted to `plain` afterwards.
  static LayoutBridge output(const dnnl::memory::desc& plain, const dnnl::memory::desc& layout);

  const dnnl::memory::desc& layout() const { return layout_; }

  // Input bridges: memory in layout() holding the contents of the plain buffer `data`; a copy's
  // buffer is `storage`, to keep until the primitive has run (NOTE [Bridge buffers from the
  // allocation cache]).
  dnnl::memory bring_in(const void* data, dnnl::stream& stream, Tensor& storage) const;
  // Output bridges: memory in layout() for the primitive to write (in `storage` when it is not
  // `data`); then take_out(...) it.
  dnnl::memory place_out(void* data, Tensor& storage) const;
  // Output bridges: copies what the primitive wrote into `place_out`'s memory to `data`.
  void take_out(dnnl::memory written, void* data, dnnl::stream& stream) const;

 private:
  dnnl::memory::desc plain_, layout_;
  std::optional<dnnl::reorder> reorder_;  // absent when the layouts are equal

  // Memory in layout() over a new buffer from the allocation cache, kept in `storage`.
  dnnl::memory cached_memory(Tensor& storage) const;
};

}  // namespace cleave::kernels::cpu

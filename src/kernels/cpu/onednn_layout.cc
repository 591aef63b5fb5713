#include "kernels/cpu/onednn_layout.h"

#include "kernels/cpu/onednn.h"

namespace cleave::kernels::cpu {

namespace {

std::optional<dnnl::reorder> reorder_between(const dnnl::memory::desc& from,
                                             const dnnl::memory::desc& to) {
  if (from == to) return std::nullopt;
  return dnnl::reorder(dnnl::reorder::primitive_desc(onednn_engine(), from, onednn_engine(), to));
}

}  // namespace

LayoutBridge LayoutBridge::input(const dnnl::memory::desc& plain,
                                 const dnnl::memory::desc& layout) {
  LayoutBridge b;
  b.plain_ = plain;
  b.layout_ = layout;
  b.reorder_ = reorder_between(plain, layout);
  return b;
}

LayoutBridge LayoutBridge::output(const dnnl::memory::desc& plain,
                                  const dnnl::memory::desc& layout) {
  LayoutBridge b;
  b.plain_ = plain;
  b.layout_ = layout;
  b.reorder_ = reorder_between(layout, plain);
  return b;
}

dnnl::memory LayoutBridge::cached_memory(Tensor& storage) const {
  // NOTE [Bridge buffers from the allocation cache]
  const auto bytes = static_cast<int64_t>(layout_.get_size());
  storage = Tensor::empty(Shape({(bytes + 3) / 4}), DType::kFloat32);
  return dnnl::memory(layout_, onednn_engine(), storage.raw_data());
}

dnnl::memory LayoutBridge::bring_in(const void* data, dnnl::stream& stream, Tensor& storage) const {
  // oneDNN takes handles as void*; an input bridge only reads through it.
  dnnl::memory user(plain_, onednn_engine(), const_cast<void*>(data));
  if (!reorder_) return user;
  dnnl::memory converted = cached_memory(storage);
  reorder_->execute(stream, user, converted);
  return converted;
}

dnnl::memory LayoutBridge::place_out(void* data, Tensor& storage) const {
  return reorder_ ? cached_memory(storage) : dnnl::memory(plain_, onednn_engine(), data);
}

void LayoutBridge::take_out(dnnl::memory written, void* data, dnnl::stream& stream) const {
  if (!reorder_) return;
  dnnl::memory user(plain_, onednn_engine(), data);
  reorder_->execute(stream, written, user);
}

}  // namespace cleave::kernels::cpu

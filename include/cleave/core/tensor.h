// Tensor: a shape, a dtype and a contiguous window into a shared Storage.
//
// NOTE [Tensor layout]
// Every tensor is contiguous, row-major, starting `offset_bytes` into its storage. A view
// (reshape, detach, a leading-dim slice) is a new TensorImpl on the same storage; writes through
// one are seen by the other. Kernels may therefore assume dense row-major buffers, which keeps
// every kernel simple and lets oneDNN take them without reorders. Strided views are not needed by
// any operator: ops that would produce them (transpose, strided slice) copy.
//
// A Tensor handle is cheap to copy (one shared_ptr). An undefined Tensor (default-constructed)
// stands for "no value", e.g. a gradient that is absent.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <memory>
#include <ostream>
#include <string>
#include <vector>

#include "cleave/core/device.h"
#include "cleave/core/dtype.h"
#include "cleave/core/error.h"
#include "cleave/core/shape.h"
#include "cleave/core/storage.h"

namespace cleave {

struct GradNode;  // autograd record of the op that produced a tensor; defined by the ir layer
// A value of a graph being traced (GRAPH_MODE); defined by the ir layer (cleave/ir/graph.h).
struct SymbolicValue;

struct TensorImpl {
  std::shared_ptr<Storage> storage;
  size_t offset_bytes = 0;
  Shape shape;
  DType dtype = DType::kFloat32;

  // Autograd state (see ir/grad_node.h). A leaf has no grad_fn; `grad` accumulates into leaves
  // with requires_grad.
  bool requires_grad = false;
  std::shared_ptr<TensorImpl> grad;
  std::shared_ptr<GradNode> grad_fn;
  int output_index = 0;  // which output of grad_fn's op this tensor is

  // Set on a symbolic tensor: a value of a graph being traced, with a shape and dtype but no
  // storage (NOTE [Symbolic tensors] in cleave/ir/graph.h). Reading its elements throws Error.
  std::shared_ptr<SymbolicValue> symbol;
};

class Tensor {
 public:
  Tensor() = default;
  explicit Tensor(std::shared_ptr<TensorImpl> impl) : impl_(std::move(impl)) {}

  // ---- creation (CPU unless a device is given) ----
  // Uninitialised contents.
  static Tensor empty(const Shape& shape, DType dtype = DType::kFloat32,
                      Device device = Device::cpu());
  static Tensor zeros(const Shape& shape, DType dtype = DType::kFloat32);
  static Tensor ones(const Shape& shape, DType dtype = DType::kFloat32);
  static Tensor full(const Shape& shape, double value, DType dtype = DType::kFloat32);
  // A rank-0 tensor.
  static Tensor scalar(double value, DType dtype = DType::kFloat32);
  // [start, stop) by step; step must be non-zero.
  static Tensor arange(double start, double stop, double step = 1.0, DType dtype = DType::kFloat32);
  // Copies `values` into a tensor of `shape` (numel must equal values.size()).
  template <typename T>
  static Tensor from_vector(const std::vector<T>& values, const Shape& shape);
  template <typename T>
  static Tensor from_vector(const std::vector<T>& values) {
    return from_vector(values, Shape{static_cast<int64_t>(values.size())});
  }
  // Random draws from the global generator (cleave::set_seed). std must be > 0, low < high.
  static Tensor normal(const Shape& shape, double mean = 0.0, double std = 1.0,
                       DType dtype = DType::kFloat32);
  static Tensor uniform(const Shape& shape, double low = 0.0, double high = 1.0,
                        DType dtype = DType::kFloat32);
  // Normal(mean, std) redrawn until within mean ± 2·std (MindSpore's TruncatedNormal).
  static Tensor truncated_normal(const Shape& shape, double mean = 0.0, double std = 1.0,
                                 DType dtype = DType::kFloat32);

  // ---- properties ----
  bool defined() const { return impl_ != nullptr; }
  const Shape& shape() const { return checked().shape; }
  DType dtype() const { return checked().dtype; }
  // A symbolic tensor reports the CPU (it has no storage yet).
  Device device() const {
    const TensorImpl& impl = checked();
    return impl.storage ? impl.storage->device() : Device::cpu();
  }
  int64_t rank() const { return shape().rank(); }
  int64_t numel() const { return shape().numel(); }
  // Size of `axis` (negative counts from the end).
  int64_t dim(int64_t axis) const { return shape().dim(axis); }
  size_t nbytes() const { return static_cast<size_t>(numel()) * dtype_size(dtype()); }

  // ---- data ----
  void* raw_data() const;
  // Typed pointer; throws Error when T does not match dtype().
  template <typename T>
  T* data() const;
  // Element at a multi-index, converted to double (any dtype). For tests and printing.
  double at(std::initializer_list<int64_t> index) const;
  // The single element of a one-element tensor, converted to double.
  double item() const;
  template <typename T>
  std::vector<T> to_vector() const;
  // All elements converted to double.
  std::vector<double> to_double_vector() const;

  // ---- views and copies (no autograd; see cleave::ops for differentiable versions) ----
  // Same storage, new shape with the same numel.
  Tensor view(const Shape& shape) const;
  // Same storage, rows [start, start+length) of dim 0.
  Tensor narrow_rows(int64_t start, int64_t length) const;
  // Same storage, no autograd history, requires_grad false.
  Tensor detach() const;
  // A new storage with the same contents.
  Tensor clone() const;
  // Copies src's elements into this tensor (same shape and dtype).
  void copy_from(const Tensor& src) const;
  void fill(double value) const;
  bool shares_storage_with(const Tensor& other) const;

  // ---- autograd ----
  bool requires_grad() const { return checked().requires_grad; }
  // Marks a leaf as needing a gradient; only floating tensors can.
  Tensor& set_requires_grad(bool requires_grad);
  // The accumulated gradient of a leaf (undefined until a backward pass reaches it).
  Tensor grad() const;
  void set_grad(const Tensor& grad) const;
  bool is_leaf() const { return checked().grad_fn == nullptr; }
  // True for a tensor traced in GRAPH_MODE: it has a shape and dtype but no value yet.
  bool is_symbolic() const { return checked().symbol != nullptr; }

  // "Tensor(shape=(2, 3), dtype=Float32, value=[[...]])".
  std::string to_string() const;

  TensorImpl* impl() const { return impl_.get(); }
  const std::shared_ptr<TensorImpl>& impl_ptr() const { return impl_; }

 private:
  const TensorImpl& checked() const;
  std::shared_ptr<TensorImpl> impl_;
};

std::ostream& operator<<(std::ostream& os, const Tensor& t);

// Seeds the global generator used by Tensor::normal/uniform/truncated_normal, initializers and
// Dropout. The same seed gives the same draws.
void set_seed(uint64_t seed);

// Disables autograd recording on this thread while alive (PyNative `no_grad`).
class NoGradGuard {
 public:
  NoGradGuard();
  ~NoGradGuard();
  NoGradGuard(const NoGradGuard&) = delete;
  NoGradGuard& operator=(const NoGradGuard&) = delete;

 private:
  bool previous_;
};
bool grad_mode_enabled();
void set_grad_mode_enabled(bool enabled);

}  // namespace cleave

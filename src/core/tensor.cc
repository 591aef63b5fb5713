#include "cleave/core/tensor.h"

#include <cmath>
#include <cstring>
#include <sstream>

#include "cleave/core/random.h"

namespace cleave {
namespace {

thread_local bool t_grad_mode = true;

void check_dims(const Shape& shape, const char* what) {
  for (int64_t i = 0; i < shape.rank(); ++i) {
    CLEAVE_CHECK_ARG(shape[i] >= 0, "{}: dimension {} of shape {} is negative; sizes must be >= 0",
                     what, i, shape.to_string());
  }
}

template <typename T>
void fill_typed(void* data, int64_t n, double value) {
  T* p = static_cast<T*>(data);
  const T v = static_cast<T>(value);
  for (int64_t i = 0; i < n; ++i) p[i] = v;
}

// Writes doubles produced by `draw` into a floating tensor.
template <typename Draw>
Tensor random_tensor(const Shape& shape, DType dtype, const char* what, Draw draw) {
  CLEAVE_CHECK_ARG(is_floating(dtype), "{}: dtype {} is not supported; expected Float32 or Float64",
                   what, dtype_name(dtype));
  Tensor t = Tensor::empty(shape, dtype);
  const int64_t n = t.numel();
  // NOTE [Global generator]: one tensor's draws are not interleaved with another thread's.
  std::lock_guard<std::recursive_mutex> lock(global_generator_lock());
  CLEAVE_DISPATCH_FLOAT(dtype, [&] {
    T* p = t.data<T>();
    for (int64_t i = 0; i < n; ++i) p[i] = static_cast<T>(draw());
  });
  return t;
}

void format_elements(std::ostringstream& os, const Tensor& t, const std::vector<double>& v,
                     int64_t axis, int64_t offset) {
  const Shape& s = t.shape();
  if (axis == s.rank()) {
    os << v[static_cast<size_t>(offset)];
    return;
  }
  const int64_t stride = [&] {
    int64_t st = 1;
    for (int64_t i = axis + 1; i < s.rank(); ++i) st *= s[i];
    return st;
  }();
  os << '[';
  const int64_t n = s[axis];
  const int64_t kEdge = 3;
  for (int64_t i = 0; i < n; ++i) {
    if (n > 2 * kEdge && i == kEdge) {
      os << "..., ";
      i = n - kEdge;
    }
    if (i > 0 && !(n > 2 * kEdge && i == n - kEdge)) os << ", ";
    format_elements(os, t, v, axis + 1, offset + i * stride);
  }
  os << ']';
}

}  // namespace

bool grad_mode_enabled() { return t_grad_mode; }
void set_grad_mode_enabled(bool enabled) { t_grad_mode = enabled; }
NoGradGuard::NoGradGuard() : previous_(t_grad_mode) { t_grad_mode = false; }
NoGradGuard::~NoGradGuard() { t_grad_mode = previous_; }

const TensorImpl& Tensor::checked() const {
  CLEAVE_CHECK_ARG(impl_ != nullptr, "use of an undefined Tensor (no value was assigned to it)");
  return *impl_;
}

Tensor Tensor::empty(const Shape& shape, DType dtype, Device device) {
  check_dims(shape, "Tensor::empty");
  size_t bytes = 0;
  CLEAVE_CHECK_ARG(
      !__builtin_mul_overflow(static_cast<size_t>(shape.numel()), dtype_size(dtype), &bytes),
      "Tensor::empty: a {} tensor of shape {} has more bytes than memory can address; expected a "
      "smaller shape",
      dtype_name(dtype), shape.to_string());
  auto impl = std::make_shared<TensorImpl>();
  impl->storage = std::make_shared<Storage>(bytes, device);
  impl->shape = shape;
  impl->dtype = dtype;
  return Tensor(std::move(impl));
}

Tensor Tensor::zeros(const Shape& shape, DType dtype) { return full(shape, 0.0, dtype); }
Tensor Tensor::ones(const Shape& shape, DType dtype) { return full(shape, 1.0, dtype); }

Tensor Tensor::full(const Shape& shape, double value, DType dtype) {
  Tensor t = empty(shape, dtype);
  t.fill(value);
  return t;
}

Tensor Tensor::scalar(double value, DType dtype) { return full(Shape{}, value, dtype); }

Tensor Tensor::arange(double start, double stop, double step, DType dtype) {
  CLEAVE_CHECK_ARG(step != 0.0, "Tensor::arange: step is 0; expected a non-zero step");
  const double span = (stop - start) / step;
  const int64_t n = span > 0 ? static_cast<int64_t>(std::ceil(span)) : 0;
  Tensor t = empty(Shape{n}, dtype);
  CLEAVE_DISPATCH_ALL(dtype, [&] {
    T* p = t.data<T>();
    for (int64_t i = 0; i < n; ++i) p[i] = static_cast<T>(start + static_cast<double>(i) * step);
  });
  return t;
}

template <typename T>
Tensor Tensor::from_vector(const std::vector<T>& values, const Shape& shape) {
  CLEAVE_CHECK_ARG(static_cast<int64_t>(values.size()) == shape.numel(),
                   "Tensor::from_vector: {} values given for shape {}, which holds {}",
                   values.size(), shape.to_string(), shape.numel());
  Tensor t = empty(shape, dtype_of<T>());
  T* p = t.data<T>();
  for (size_t i = 0; i < values.size(); ++i) p[i] = values[i];
  return t;
}
template Tensor Tensor::from_vector(const std::vector<float>&, const Shape&);
template Tensor Tensor::from_vector(const std::vector<double>&, const Shape&);
template Tensor Tensor::from_vector(const std::vector<int32_t>&, const Shape&);
template Tensor Tensor::from_vector(const std::vector<int64_t>&, const Shape&);
template <>
Tensor Tensor::from_vector(const std::vector<bool>& values, const Shape& shape) {
  CLEAVE_CHECK_ARG(static_cast<int64_t>(values.size()) == shape.numel(),
                   "Tensor::from_vector: {} values given for shape {}, which holds {}",
                   values.size(), shape.to_string(), shape.numel());
  Tensor t = empty(shape, DType::kBool);
  bool* p = t.data<bool>();
  for (size_t i = 0; i < values.size(); ++i) p[i] = values[i];
  return t;
}

Tensor Tensor::normal(const Shape& shape, double mean, double std, DType dtype) {
  CLEAVE_CHECK_ARG(std > 0, "Tensor::normal: std is {}; expected std > 0", std);
  std::normal_distribution<double> dist(mean, std);
  return random_tensor(shape, dtype, "Tensor::normal", [&] { return dist(global_generator()); });
}

Tensor Tensor::uniform(const Shape& shape, double low, double high, DType dtype) {
  CLEAVE_CHECK_ARG(low < high, "Tensor::uniform: low {} is not below high {}; expected low < high",
                   low, high);
  std::uniform_real_distribution<double> dist(low, high);
  return random_tensor(shape, dtype, "Tensor::uniform", [&] { return dist(global_generator()); });
}

Tensor Tensor::truncated_normal(const Shape& shape, double mean, double std, DType dtype) {
  CLEAVE_CHECK_ARG(std > 0, "Tensor::truncated_normal: std is {}; expected std > 0", std);
  std::normal_distribution<double> dist(0.0, 1.0);
  return random_tensor(shape, dtype, "Tensor::truncated_normal", [&] {
    double z = dist(global_generator());
    while (z < -2.0 || z > 2.0) z = dist(global_generator());
    return mean + std * z;
  });
}

void* Tensor::raw_data() const {
  const TensorImpl& impl = checked();
  CLEAVE_CHECK_ARG(impl.symbol == nullptr,
                   "the value of a {} tensor of shape {} is not known while a graph is being "
                   "traced: in GRAPH_MODE, construct (and everything it calls) runs once on "
                   "symbolic tensors to build the graph, and values exist only when the compiled "
                   "graph executes. Move the read out of construct (read the returned tensors "
                   "after the step), or run in PYNATIVE_MODE "
                   "(runtime::set_context({{.mode = runtime::PYNATIVE_MODE}}))",
                   dtype_name(impl.dtype), impl.shape.to_string());
  return static_cast<char*>(impl.storage->data()) + impl.offset_bytes;
}

template <typename T>
T* Tensor::data() const {
  CLEAVE_CHECK_ARG(dtype() == dtype_of<T>(),
                   "Tensor::data: the tensor holds {} but {} was requested", dtype_name(dtype()),
                   dtype_name(dtype_of<T>()));
  return static_cast<T*>(raw_data());
}
template float* Tensor::data<float>() const;
template double* Tensor::data<double>() const;
template int32_t* Tensor::data<int32_t>() const;
template int64_t* Tensor::data<int64_t>() const;
template bool* Tensor::data<bool>() const;

double Tensor::at(std::initializer_list<int64_t> index) const {
  const Shape& s = shape();
  CLEAVE_CHECK_ARG(static_cast<int64_t>(index.size()) == s.rank(),
                   "Tensor::at: {} indices given for a tensor of rank {}", index.size(), s.rank());
  int64_t flat = 0;
  int64_t axis = 0;
  for (int64_t i : index) {
    CLEAVE_CHECK_ARG(i >= 0 && i < s[axis],
                     "Tensor::at: index {} is out of range for dim {} of size {}", i, axis,
                     s[axis]);
    flat = flat * s[axis] + i;
    ++axis;
  }
  return CLEAVE_DISPATCH_ALL(dtype(), [&] { return static_cast<double>(data<T>()[flat]); });
}

double Tensor::item() const {
  CLEAVE_CHECK_ARG(numel() == 1,
                   "Tensor::item: the tensor has {} elements (shape {}); expected exactly one",
                   numel(), shape().to_string());
  return CLEAVE_DISPATCH_ALL(dtype(), [&] { return static_cast<double>(data<T>()[0]); });
}

template <typename T>
std::vector<T> Tensor::to_vector() const {
  const T* p = data<T>();
  return std::vector<T>(p, p + numel());
}
template std::vector<float> Tensor::to_vector() const;
template std::vector<double> Tensor::to_vector() const;
template std::vector<int32_t> Tensor::to_vector() const;
template std::vector<int64_t> Tensor::to_vector() const;

std::vector<double> Tensor::to_double_vector() const {
  std::vector<double> out(static_cast<size_t>(numel()));
  CLEAVE_DISPATCH_ALL(dtype(), [&] {
    const T* p = data<T>();
    for (size_t i = 0; i < out.size(); ++i) out[i] = static_cast<double>(p[i]);
  });
  return out;
}

Tensor Tensor::view(const Shape& new_shape) const {
  check_dims(new_shape, "Tensor::view");
  CLEAVE_CHECK_ARG(new_shape.numel() == numel(),
                   "Tensor::view: shape {} holds {} elements but the tensor {} holds {}",
                   new_shape.to_string(), new_shape.numel(), shape().to_string(), numel());
  CLEAVE_CHECK_ARG(!is_symbolic() || new_shape == shape(),
                   "Tensor::view: the tensor is traced (GRAPH_MODE) and cannot be viewed as {} "
                   "outside the graph; use ops::reshape, which is recorded in the graph",
                   new_shape.to_string());
  auto impl = std::make_shared<TensorImpl>();
  impl->storage = checked().storage;
  impl->offset_bytes = checked().offset_bytes;
  impl->shape = new_shape;
  impl->dtype = dtype();
  impl->symbol = checked().symbol;
  return Tensor(std::move(impl));
}

Tensor Tensor::narrow_rows(int64_t start, int64_t length) const {
  CLEAVE_CHECK_ARG(rank() >= 1, "Tensor::narrow_rows: the tensor is a scalar; expected rank >= 1");
  CLEAVE_CHECK_ARG(start >= 0 && length >= 0 && start + length <= shape()[0],
                   "Tensor::narrow_rows: rows [{}, {}) are outside [0, {})", start, start + length,
                   shape()[0]);
  CLEAVE_CHECK_ARG(!is_symbolic(),
                   "Tensor::narrow_rows: the tensor is traced (GRAPH_MODE); use ops::slice, "
                   "which is recorded in the graph");
  Shape s = shape();
  const size_t row_bytes = nbytes() / static_cast<size_t>(std::max<int64_t>(s[0], 1));
  s[0] = length;
  auto impl = std::make_shared<TensorImpl>();
  impl->storage = checked().storage;
  impl->offset_bytes = checked().offset_bytes + static_cast<size_t>(start) * row_bytes;
  impl->shape = s;
  impl->dtype = dtype();
  return Tensor(std::move(impl));
}

Tensor Tensor::detach() const { return view(shape()); }

Tensor Tensor::clone() const {
  Tensor t = empty(shape(), dtype(), device());
  t.copy_from(*this);
  return t;
}

void Tensor::copy_from(const Tensor& src) const {
  CLEAVE_CHECK_ARG(src.shape() == shape() && src.dtype() == dtype(),
                   "Tensor::copy_from: source is {} {} but destination is {} {}",
                   dtype_name(src.dtype()), src.shape().to_string(), dtype_name(dtype()),
                   shape().to_string());
  CLEAVE_CHECK_ARG(device().is_cpu() && src.device().is_cpu(),
                   "Tensor::copy_from: only CPU tensors can be copied on the host");
  if (nbytes() > 0 && raw_data() != src.raw_data())
    std::memcpy(raw_data(), src.raw_data(), nbytes());
}

void Tensor::fill(double value) const {
  // +0 is all zero bits in every dtype: one memset (the typed loop is slow in unoptimised and
  // sanitizer builds, where a parsed IR constant of some GB took over 10 s).
  if (value == 0 && !std::signbit(value) && device().is_cpu()) {
    if (nbytes() > 0) std::memset(raw_data(), 0, nbytes());
    return;
  }
  CLEAVE_DISPATCH_ALL(dtype(), [&] { fill_typed<T>(raw_data(), numel(), value); });
}

bool Tensor::shares_storage_with(const Tensor& other) const {
  return checked().storage == other.checked().storage;
}

Tensor& Tensor::set_requires_grad(bool requires_grad) {
  CLEAVE_CHECK_ARG(!requires_grad || is_floating(dtype()),
                   "set_requires_grad: a {} tensor cannot require a gradient; only Float32 and "
                   "Float64 tensors can",
                   dtype_name(dtype()));
  impl_->requires_grad = requires_grad;
  return *this;
}

Tensor Tensor::grad() const { return Tensor(checked().grad); }

void Tensor::set_grad(const Tensor& grad) const {
  if (grad.defined()) {
    CLEAVE_CHECK_ARG(grad.shape() == shape() && grad.dtype() == dtype(),
                     "set_grad: gradient is {} {} but the tensor is {} {}",
                     dtype_name(grad.dtype()), grad.shape().to_string(), dtype_name(dtype()),
                     shape().to_string());
  }
  impl_->grad = grad.impl_ptr();
}

std::string Tensor::to_string() const {
  if (!defined()) return "Tensor(undefined)";
  std::ostringstream os;
  os << "Tensor(shape=" << shape().to_string() << ", dtype=" << dtype_name(dtype()) << ", value=";
  if (is_symbolic()) {
    os << "<traced, not known until the graph runs>";
  } else if (device().is_cpu()) {
    format_elements(os, *this, to_double_vector(), 0, 0);
  } else {
    os << "<on " << device().to_string() << ">";
  }
  os << ')';
  return os.str();
}

std::ostream& operator<<(std::ostream& os, const Tensor& t) { return os << t.to_string(); }

}  // namespace cleave

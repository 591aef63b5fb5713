// Tensor, dtypes, NumPy conversion, the functional ops and Primitive (cleave, cleave.ops).
#include <fmt/format.h>

#include <cstring>
#include <vector>

#include "bindings.h"

namespace cleave::python {

PyObjectRef::PyObjectRef(py::object object)
    : object_(new py::object(std::move(object)), [](py::object* o) {
        py::gil_scoped_acquire gil;
        delete o;
      }) {}

namespace {

py::dtype numpy_dtype(DType dtype) {
  switch (dtype) {
    case DType::kFloat32:
      return py::dtype::of<float>();
    case DType::kFloat64:
      return py::dtype::of<double>();
    case DType::kInt32:
      return py::dtype::of<int32_t>();
    case DType::kInt64:
      return py::dtype::of<int64_t>();
    case DType::kBool:
      return py::dtype::of<bool>();
  }
  throw py::type_error("bad dtype");
}

// The cleave dtype of a NumPy dtype; unsupported ones are TypeErrors.
DType from_numpy_dtype(const py::dtype& dtype) {
  const char kind = dtype.kind();
  const auto size = dtype.itemsize();
  if (kind == 'f' && size == 4) return DType::kFloat32;
  if (kind == 'f' && size == 8) return DType::kFloat64;
  if (kind == 'i' && size == 4) return DType::kInt32;
  if (kind == 'i' && size == 8) return DType::kInt64;
  if (kind == 'b') return DType::kBool;
  throw py::type_error(fmt::format(
      "Tensor: NumPy dtype {} is not supported; expected float32, float64, int32, int64 or bool "
      "(convert it first, e.g. array.astype(numpy.float32))",
      py::str(static_cast<const py::handle&>(dtype)).cast<std::string>()));
}

std::vector<int64_t> int_list(const py::handle& value, const char* what) {
  std::vector<int64_t> out;
  if (py::isinstance<py::int_>(value)) return {value.cast<int64_t>()};
  for (const py::handle& v : value) {
    if (!py::isinstance<py::int_>(v)) {
      throw py::type_error(fmt::format("{}: expected a tuple of ints, got {}", what,
                                       py::repr(value).cast<std::string>()));
    }
    out.push_back(v.cast<int64_t>());
  }
  return out;
}

// Python's indexing of a tensor: ints, slices and Ellipsis over leading axes. Unit steps without
// ints use Slice (as C++ code calls ops::slice); anything else StridedSlice.
Tensor get_item(const Tensor& t, const py::object& key) {
  py::tuple items = py::isinstance<py::tuple>(key) ? key.cast<py::tuple>() : py::make_tuple(key);
  const int64_t rank = t.rank();
  std::vector<int64_t> begin, end, strides;
  int64_t begin_mask = 0, end_mask = 0, shrink = 0;
  bool simple = true;
  int64_t axis = 0;
  for (size_t i = 0; i < items.size(); ++i) {
    py::handle item = items[i];
    if (item.is(py::ellipsis())) {
      const int64_t rest = static_cast<int64_t>(items.size() - i - 1);
      while (axis < rank - rest) {
        begin.push_back(0);
        end.push_back(t.dim(axis));
        strides.push_back(1);
        ++axis;
      }
      continue;
    }
    if (axis >= rank) {
      throw py::index_error(fmt::format(
          "Tensor index: too many indices ({}) for a tensor of rank {}", items.size(), rank));
    }
    const int64_t n = t.dim(axis);
    if (py::isinstance<py::int_>(item)) {
      int64_t k = item.cast<int64_t>();
      if (k < -n || k >= n) {
        throw py::index_error(
            fmt::format("Tensor index: {} is out of range for axis {} of size {}", k, axis, n));
      }
      if (k < 0) k += n;
      begin.push_back(k);
      end.push_back(k + 1);
      strides.push_back(1);
      shrink |= int64_t{1} << axis;
      simple = false;
    } else if (py::isinstance<py::slice>(item)) {
      py::ssize_t start = 0, stop = 0, step = 0, length = 0;
      if (!item.cast<py::slice>().compute(n, &start, &stop, &step, &length)) {
        throw py::error_already_set();
      }
      begin.push_back(start);
      end.push_back(stop);
      strides.push_back(step);
      if (step < 0 && stop < 0) end_mask |= int64_t{1} << axis;
      if (step != 1) simple = false;
    } else {
      throw py::type_error(fmt::format(
          "Tensor index: {} is not supported; expected ints, slices or ... (a Tensor index: use "
          "ops.gather)",
          py::repr(item).cast<std::string>()));
    }
    ++axis;
  }
  for (; axis < rank; ++axis) {
    begin.push_back(0);
    end.push_back(t.dim(axis));
    strides.push_back(1);
  }
  if (simple) {
    std::vector<int64_t> size(begin.size());
    for (size_t i = 0; i < begin.size(); ++i) size[i] = std::max<int64_t>(0, end[i] - begin[i]);
    return ops::slice(t, begin, size);
  }
  return ops::strided_slice(t, {.begin = begin,
                                .end = end,
                                .strides = strides,
                                .begin_mask = begin_mask,
                                .end_mask = end_mask,
                                .shrink_axis_mask = shrink});
}

ir::AttrValue attr_value(const std::string& name, const py::handle& v) {
  if (py::isinstance<py::bool_>(v)) return v.cast<bool>();
  if (py::isinstance<py::int_>(v)) return v.cast<int64_t>();
  if (py::isinstance<py::float_>(v)) return v.cast<double>();
  if (py::isinstance<py::str>(v)) return v.cast<std::string>();
  if (py::isinstance<DType>(v)) return v.cast<DType>();
  if (py::isinstance<py::tuple>(v) || py::isinstance<py::list>(v)) {
    return int_list(v, fmt::format("attribute '{}'", name).c_str());
  }
  throw py::type_error(fmt::format(
      "Primitive attribute '{}': {} is not supported; expected a bool, int, float, str, dtype or "
      "tuple of ints",
      name, py::repr(v).cast<std::string>()));
}

ir::Strategy strategy_of(const py::handle& value) {
  ir::Strategy s;
  for (const py::handle& dims : value) s.push_back(int_list(dims, "shard strategy"));
  return s;
}

bool is_number(const py::handle& v) {
  return (py::isinstance<py::int_>(v) || py::isinstance<py::float_>(v)) &&
         !py::isinstance<py::bool_>(v);
}

// The other operand of a comparison: a number becomes a scalar of the tensor's dtype.
Tensor other_operand(const Tensor& a, const py::handle& v) {
  if (is_number(v)) return Tensor::scalar(v.cast<double>(), a.dtype());
  return to_tensor(v);
}

// a `op` b (b `op` a when `reversed`). A Python number goes through the C++ operators that take a
// double, so that x / 4 traces the same graph as C++'s x / 4.0.
Tensor arith(const Tensor& a, const py::handle& b, char op, bool reversed) {
  if (is_number(b)) {
    const double v = b.cast<double>();
    switch (op) {
      case '+':
        return reversed ? v + a : a + v;
      case '-':
        return reversed ? v - a : a - v;
      case '*':
        return reversed ? v * a : a * v;
      case '/':
        return reversed ? v / a : a / v;
      default:
        return ops::pow(a, v);
    }
  }
  const Tensor t = to_tensor(b);
  const Tensor& x = reversed ? t : a;
  const Tensor& y = reversed ? a : t;
  switch (op) {
    case '+':
      return ops::add(x, y);
    case '-':
      return ops::sub(x, y);
    case '*':
      return ops::mul(x, y);
    case '/':
      return ops::div(x, y);
    default:
      return ops::pow(x, y);
  }
}

}  // namespace

py::array to_numpy(const Tensor& t) {
  if (t.is_symbolic()) {
    throw py::value_error(
        "asnumpy: the tensor is a value of a graph being traced (GRAPH_MODE construct) and has no "
        "value yet; read values outside construct, or run in PYNATIVE_MODE");
  }
  std::vector<py::ssize_t> shape(t.shape().dims().begin(), t.shape().dims().end());
  // The capsule owns a copy of the handle: the array keeps the storage alive.
  auto* keep = new Tensor(t);
  py::capsule owner(keep, [](void* p) { delete static_cast<Tensor*>(p); });
  return py::array(numpy_dtype(t.dtype()), shape, t.raw_data(), owner);
}

Tensor from_numpy(const py::array& input) {
  const DType dtype = from_numpy_dtype(input.dtype());
  py::array array = py::array::ensure(input, py::array::c_style | py::array::forcecast);
  std::vector<int64_t> dims(array.shape(), array.shape() + array.ndim());
  Tensor t = Tensor::empty(Shape(dims), dtype);
  if (t.nbytes() > 0) std::memcpy(t.raw_data(), array.data(), t.nbytes());
  return t;
}

Tensor to_tensor(const py::handle& value, const py::object& dtype) {
  Tensor t;
  if (py::isinstance<Tensor>(value)) {
    t = value.cast<Tensor>();
  } else if (py::isinstance<py::array>(value)) {
    t = from_numpy(value.cast<py::array>());
  } else if (py::isinstance<py::bool_>(value)) {
    t = Tensor::scalar(value.cast<bool>() ? 1 : 0, DType::kBool);
  } else if (py::isinstance<py::int_>(value)) {
    t = Tensor::scalar(static_cast<double>(value.cast<int64_t>()), DType::kInt64);
  } else if (py::isinstance<py::float_>(value)) {
    t = Tensor::scalar(value.cast<double>(), DType::kFloat32);
  } else if (py::isinstance(value, py::module_::import("numpy").attr("generic"))) {
    // A NumPy scalar (numpy.int32(3), an element of an array): its dtype is kept.
    t = from_numpy(py::module_::import("numpy").attr("asarray")(value));
  } else if (py::isinstance<py::list>(value) || py::isinstance<py::tuple>(value)) {
    py::array a = py::module_::import("numpy").attr("asarray")(value);
    // Python floats become float32 and ints int64, as MindSpore's Tensor does.
    if (a.dtype().kind() == 'f') a = a.attr("astype")("float32");
    t = from_numpy(a);
  } else {
    throw py::type_error(fmt::format(
        "Tensor: {} cannot become a Tensor; expected a Tensor, a NumPy array, a number or a list",
        py::repr(value).cast<std::string>()));
  }
  if (!dtype.is_none()) {
    const DType want = dtype.cast<DType>();
    if (want != t.dtype()) t = ops::cast(t, want);
  }
  return t;
}

void bind_tensor(py::module_& m) {
  py::enum_<DType>(m, "dtype", "A tensor's element type (cleave.float32, cleave.int32, ...)")
      .value("float32", DType::kFloat32)
      .value("float64", DType::kFloat64)
      .value("int32", DType::kInt32)
      .value("int64", DType::kInt64)
      .value("bool_", DType::kBool);

  py::class_<Tensor>(m, "Tensor", py::dynamic_attr())
      .def(py::init([](const py::object& input_data, const py::object& dtype) {
             if (input_data.is_none()) {
               throw py::type_error(
                   "Tensor: input_data is missing; expected a NumPy array, a "
                   "number, a list or a Tensor");
             }
             return to_tensor(input_data, dtype);
           }),
           py::arg("input_data") = py::none(), py::arg("dtype") = py::none())
      .def_property_readonly("shape",
                             [](const Tensor& t) {
                               py::tuple out(t.rank());
                               for (int64_t i = 0; i < t.rank(); ++i) out[i] = t.dim(i);
                               return out;
                             })
      .def_property_readonly("dtype", &Tensor::dtype)
      .def_property_readonly("ndim", &Tensor::rank)
      .def_property_readonly("size", &Tensor::numel)
      .def_property("requires_grad", &Tensor::requires_grad,
                    [](Tensor& t, bool v) { t.set_requires_grad(v); })
      .def("asnumpy", &to_numpy)
      .def("numpy", &to_numpy)
      .def("__array__", [](const Tensor& t) { return to_numpy(t); })
      .def("item", &Tensor::item)
      .def("dim", &Tensor::rank)
      .def("__len__", [](const Tensor& t) { return t.rank() == 0 ? 0 : t.dim(0); })
      .def("__float__", &Tensor::item)
      .def("__int__", [](const Tensor& t) { return static_cast<int64_t>(t.item()); })
      .def("__bool__",
           [](const Tensor& t) {
             if (t.is_symbolic()) {
               throw py::type_error(
                   "a traced tensor has no value yet: construct branches on a tensor's value "
                   "(if/while on a Tensor) while GRAPH_MODE traces it, and cleave decides Python "
                   "control flow at trace time; branch on Python values (shapes, settings), use "
                   "ops.select for a value-dependent choice, or run in PYNATIVE_MODE");
             }
             if (t.numel() != 1) {
               throw py::value_error(fmt::format(
                   "the truth value of a Tensor of {} elements is ambiguous; expected one element",
                   t.numel()));
             }
             return t.item() != 0;
           })
      .def("__repr__", &Tensor::to_string)
      .def("__str__", &Tensor::to_string)
      .def("__getitem__", &get_item)
      .def("astype", [](const Tensor& t, DType d) { return ops::cast(t, d); })
      .def("reshape",
           [](const Tensor& t, const py::args& args) {
             py::object shape = args.size() == 1 ? args[0] : py::object(args);
             return ops::reshape(t, Shape(int_list(shape, "reshape")));
           })
      .def("view",
           [](const Tensor& t, const py::args& args) {
             py::object shape = args.size() == 1 ? args[0] : py::object(args);
             return ops::reshape(t, Shape(int_list(shape, "view")));
           })
      .def("transpose",
           [](const Tensor& t, const py::args& args) {
             py::object perm = args.size() == 1 ? args[0] : py::object(args);
             return ops::transpose(t, int_list(perm, "transpose"));
           })
      .def(
          "sum",
          [](const Tensor& t, const py::object& axis, bool keep_dims) {
            return ops::reduce_sum(
                t, {.axes = axis.is_none() ? std::vector<int64_t>{} : int_list(axis, "sum"),
                    .keep_dims = keep_dims});
          },
          py::arg("axis") = py::none(), py::arg("keep_dims") = false)
      .def(
          "mean",
          [](const Tensor& t, const py::object& axis, bool keep_dims) {
            return ops::reduce_mean(
                t, {.axes = axis.is_none() ? std::vector<int64_t>{} : int_list(axis, "mean"),
                    .keep_dims = keep_dims});
          },
          py::arg("axis") = py::none(), py::arg("keep_dims") = false)
      .def("copy", [](const Tensor& t) { return t.clone(); })
      .def("__neg__", [](const Tensor& a) { return ops::neg(a); })
      .def("__add__", [](const Tensor& a, const py::handle& b) { return arith(a, b, '+', false); })
      .def("__radd__", [](const Tensor& a, const py::handle& b) { return arith(a, b, '+', true); })
      .def("__sub__", [](const Tensor& a, const py::handle& b) { return arith(a, b, '-', false); })
      .def("__rsub__", [](const Tensor& a, const py::handle& b) { return arith(a, b, '-', true); })
      .def("__mul__", [](const Tensor& a, const py::handle& b) { return arith(a, b, '*', false); })
      .def("__rmul__", [](const Tensor& a, const py::handle& b) { return arith(a, b, '*', true); })
      .def("__truediv__",
           [](const Tensor& a, const py::handle& b) { return arith(a, b, '/', false); })
      .def("__rtruediv__",
           [](const Tensor& a, const py::handle& b) { return arith(a, b, '/', true); })
      .def("__pow__", [](const Tensor& a, const py::handle& b) { return arith(a, b, '^', false); })
      .def("__matmul__", [](const Tensor& a, const Tensor& b) { return ops::matmul(a, b); })
      .def("__eq__",
           [](const Tensor& a, const py::handle& b) { return ops::equal(a, other_operand(a, b)); })
      .def("__ne__", [](const Tensor& a,
                        const py::handle& b) { return ops::not_equal(a, other_operand(a, b)); })
      .def("__lt__",
           [](const Tensor& a, const py::handle& b) { return ops::less(a, other_operand(a, b)); })
      .def("__le__", [](const Tensor& a,
                        const py::handle& b) { return ops::less_equal(a, other_operand(a, b)); })
      .def("__gt__", [](const Tensor& a,
                        const py::handle& b) { return ops::greater(a, other_operand(a, b)); })
      .def("__ge__", [](const Tensor& a,
                        const py::handle& b) { return ops::greater_equal(a, other_operand(a, b)); })
      .def("__hash__", [](const Tensor& t) { return reinterpret_cast<std::uintptr_t>(t.impl()); });

  m.def(
      "set_seed", [](uint64_t seed) { set_seed(seed); }, py::arg("seed"));
  // cleave's own uniform draw (the C++ examples' Tensor::uniform), for a Python program that
  // must read the same random rows as a C++ one.
  m.def(
      "uniform",
      [](const std::vector<int64_t>& shape, double low, double high) {
        return Tensor::uniform(Shape(shape), low, high);
      },
      py::arg("shape"), py::arg("low") = 0.0, py::arg("high") = 1.0);

  // ---- named layouts: cleave.Layout((2, 2, 2), ("dp", "sp", "mp"))("dp", ("sp", "mp")) ----
  py::class_<ir::TensorLayout>(m, "TensorLayout")
      .def_property_readonly("splits", &ir::TensorLayout::splits)
      .def("__repr__", &ir::TensorLayout::to_string)
      .def("__eq__", [](const ir::TensorLayout& a, const ir::TensorLayout& b) { return a == b; });
  py::class_<ir::Layout>(m, "Layout")
      .def(py::init<std::vector<int64_t>, std::vector<std::string>>(), py::arg("device_matrix"),
           py::arg("alias_name"))
      .def_property_readonly("device_matrix", &ir::Layout::device_matrix)
      .def_property_readonly("alias_name", &ir::Layout::alias_name)
      .def("__call__", [](const ir::Layout& l, const py::args& dims) {
        std::vector<ir::Layout::Dim> out;
        for (const py::handle& d : dims) {
          if (py::isinstance<py::str>(d)) {
            out.emplace_back(d.cast<std::string>());
          } else {
            ir::Layout::Dim dim("None");
            dim.names = d.cast<std::vector<std::string>>();
            out.push_back(std::move(dim));
          }
        }
        return l.make(std::move(out));
      });

  // ---- Primitive: ops.MatMul() and the other operator classes ----
  py::class_<ir::Primitive>(m, "Primitive")
      .def(py::init([](const std::string& name, const py::dict& attrs) {
             ir::Attrs a;
             for (const auto& [k, v] : attrs) {
               const std::string key = k.cast<std::string>();
               a.set(key, attr_value(key, v));
             }
             return ir::Primitive(name, a);
           }),
           py::arg("name"), py::arg("attrs") = py::dict())
      .def(
          "shard",
          [](ir::Primitive& p, const py::object& in_strategy,
             const py::object& out_strategy) -> ir::Primitive& {
            // Named layouts (cleave.Layout's call) or tuples of splits, not mixed.
            auto named = [](const py::object& value) {
              std::vector<ir::TensorLayout> out;
              for (const py::handle& e : value) {
                if (py::isinstance<ir::TensorLayout>(e)) out.push_back(e.cast<ir::TensorLayout>());
              }
              return out;
            };
            const std::vector<ir::TensorLayout> in = named(in_strategy);
            if (!in.empty()) {
              if (in.size() != py::len(in_strategy)) {
                throw py::type_error(
                    "shard: in_strategy mixes layouts and tuples; give every input a layout "
                    "(cleave.Layout) or every input a tuple");
              }
              std::vector<ir::TensorLayout> out;
              if (!out_strategy.is_none()) {
                out = named(out_strategy);
                if (out.size() != py::len(out_strategy)) {
                  throw py::type_error(
                      "shard: in_strategy gives layouts, so out_strategy must give layouts too");
                }
              }
              return p.shard(in, out);
            }
            if (out_strategy.is_none()) return p.shard(strategy_of(in_strategy));
            return p.shard(strategy_of(in_strategy), strategy_of(out_strategy));
          },
          py::arg("in_strategy"), py::arg("out_strategy") = py::none(),
          py::return_value_policy::reference_internal)
      .def("place", &ir::Primitive::place, py::arg("role"), py::arg("rank_id"),
           py::return_value_policy::reference_internal)
      .def("set_name", &ir::Primitive::set_name, py::return_value_policy::reference_internal)
      .def_property_readonly("name", &ir::Primitive::name)
      .def_property_readonly("in_strategy", &ir::Primitive::strategy)
      .def("__call__", [](const ir::Primitive& p, const py::args& args) -> py::object {
        std::vector<Tensor> inputs;
        for (const py::handle& a : args) inputs.push_back(to_tensor(a));
        std::vector<Tensor> outs = p(std::move(inputs));
        if (outs.size() == 1) return py::cast(outs[0]);
        return py::cast(outs);
      });

  // ---- functional ops (cleave.ops) ----
  py::module_ f = m.def_submodule("ops", "cleave's functional operators");
  f.def("add", [](const py::handle& a, const py::handle& b) {
    return ops::add(to_tensor(a), to_tensor(b));
  });
  f.def("sub", [](const py::handle& a, const py::handle& b) {
    return ops::sub(to_tensor(a), to_tensor(b));
  });
  f.def("mul", [](const py::handle& a, const py::handle& b) {
    return ops::mul(to_tensor(a), to_tensor(b));
  });
  f.def("div", [](const py::handle& a, const py::handle& b) {
    return ops::div(to_tensor(a), to_tensor(b));
  });
  f.def("pow", [](const py::handle& a, const py::handle& b) {
    return ops::pow(to_tensor(a), to_tensor(b));
  });
  f.def("maximum", [](const Tensor& a, const Tensor& b) { return ops::maximum(a, b); });
  f.def("minimum", [](const Tensor& a, const Tensor& b) { return ops::minimum(a, b); });
  f.def("neg", &ops::neg);
  f.def("exp", &ops::exp);
  f.def("log", &ops::log);
  f.def("sqrt", &ops::sqrt);
  f.def("rsqrt", &ops::rsqrt);
  f.def("abs", &ops::abs);
  f.def("square", &ops::square);
  f.def("relu", &ops::relu);
  f.def("gelu", &ops::gelu);
  f.def("sigmoid", &ops::sigmoid);
  f.def("tanh", &ops::tanh);
  f.def("cast", &ops::cast);
  f.def("zeros_like", &ops::zeros_like);
  f.def("ones_like", &ops::ones_like);
  f.def("select", &ops::select);
  f.def(
      "matmul",
      [](const Tensor& a, const Tensor& b, bool ta, bool tb) {
        return a.rank() > 2 ? ops::batch_matmul(a, b, {.transpose_a = ta, .transpose_b = tb})
                            : ops::matmul(a, b, {.transpose_a = ta, .transpose_b = tb});
      },
      py::arg("a"), py::arg("b"), py::arg("transpose_a") = false, py::arg("transpose_b") = false);
  f.def("bias_add", &ops::bias_add);
  f.def("softmax", &ops::softmax, py::arg("x"), py::arg("axis") = -1);
  f.def("log_softmax", &ops::log_softmax, py::arg("x"), py::arg("axis") = -1);
  f.def("reshape", [](const Tensor& x, const py::handle& s) {
    return ops::reshape(x, Shape(int_list(s, "reshape")));
  });
  f.def("transpose", [](const Tensor& x, const py::handle& p) {
    return ops::transpose(x, int_list(p, "transpose"));
  });
  f.def("expand_dims", &ops::expand_dims);
  f.def(
      "squeeze",
      [](const Tensor& x, const py::object& axis) {
        return ops::squeeze(x, axis.is_none() ? std::vector<int64_t>{} : int_list(axis, "squeeze"));
      },
      py::arg("x"), py::arg("axis") = py::none());
  f.def("flatten", &ops::flatten);
  f.def(
      "concat", [](const std::vector<Tensor>& xs, int64_t axis) { return ops::concat(xs, axis); },
      py::arg("tensors"), py::arg("axis") = 0);
  f.def("split", py::overload_cast<const Tensor&, int64_t, int64_t>(&ops::split), py::arg("x"),
        py::arg("axis"), py::arg("output_num"));
  f.def("split",
        py::overload_cast<const Tensor&, int64_t, const std::vector<int64_t>&>(&ops::split),
        py::arg("x"), py::arg("axis"), py::arg("size_splits"));
  f.def("tile",
        [](const Tensor& x, const py::handle& m) { return ops::tile(x, int_list(m, "tile")); });
  f.def("broadcast_to", [](const Tensor& x, const py::handle& s) {
    return ops::broadcast_to(x, Shape(int_list(s, "broadcast_to")));
  });
  f.def("gather", &ops::gather, py::arg("params"), py::arg("indices"), py::arg("axis") = 0);
  for (const char* name :
       {"reduce_sum", "reduce_mean", "reduce_max", "reduce_min", "reduce_prod"}) {
    const std::string n = name;
    f.def(
        name,
        [n](const Tensor& x, const py::object& axis, bool keep_dims) {
          ops::ReduceOptions o{
              .axes = axis.is_none() ? std::vector<int64_t>{} : int_list(axis, "reduce"),
              .keep_dims = keep_dims};
          if (n == "reduce_sum") return ops::reduce_sum(x, o);
          if (n == "reduce_mean") return ops::reduce_mean(x, o);
          if (n == "reduce_max") return ops::reduce_max(x, o);
          if (n == "reduce_min") return ops::reduce_min(x, o);
          return ops::reduce_prod(x, o);
        },
        py::arg("x"), py::arg("axis") = py::none(), py::arg("keep_dims") = false);
  }
  f.def("argmax", &ops::argmax, py::arg("x"), py::arg("axis") = -1);
  f.def("argmin", &ops::argmin, py::arg("x"), py::arg("axis") = -1);
  f.def("slice", &ops::slice);

  // Collectives (their Primitive classes are in cleave/ops/__init__.py). They release the GIL:
  // in PYNATIVE_MODE they wait for the other ranks.
  const auto reduce_op = [](const std::string& op) {
    if (op == "sum") return comm::ReduceOp::kSum;
    if (op == "max") return comm::ReduceOp::kMax;
    if (op == "min") return comm::ReduceOp::kMin;
    if (op == "prod") return comm::ReduceOp::kProd;
    if (op == "mean") return comm::ReduceOp::kMean;
    throw py::value_error(fmt::format(
        "ReduceOp '{}' is not a reduction; expected ReduceOp.SUM, MAX, MIN, PROD (or \"mean\")",
        op));
  };
  f.def(
      "all_reduce",
      [reduce_op](const Tensor& x, const std::string& op, const std::string& group) {
        const comm::ReduceOp r = reduce_op(op);
        py::gil_scoped_release release;
        return ops::all_reduce(x, {.op = r, .group = group});
      },
      py::arg("x"), py::arg("op") = "sum", py::arg("group") = ops::kWorldCommGroup);
  f.def(
      "all_gather",
      [](const Tensor& x, const std::string& group) {
        py::gil_scoped_release release;
        return ops::all_gather(x, {.group = group});
      },
      py::arg("x"), py::arg("group") = ops::kWorldCommGroup);
  f.def(
      "reduce_scatter",
      [reduce_op](const Tensor& x, const std::string& op, const std::string& group) {
        const comm::ReduceOp r = reduce_op(op);
        py::gil_scoped_release release;
        return ops::reduce_scatter(x, {.op = r, .group = group});
      },
      py::arg("x"), py::arg("op") = "sum", py::arg("group") = ops::kWorldCommGroup);
  f.def(
      "broadcast",
      [](const Tensor& x, int64_t root_rank, const std::string& group) {
        py::gil_scoped_release release;
        return ops::broadcast(x, {.root_rank = root_rank, .group = group});
      },
      py::arg("x"), py::arg("root_rank"), py::arg("group") = ops::kWorldCommGroup);
  // Runs fn(*args) with a placement and an instance name for the ops it traces (a collective's
  // .place() and the attribute name it is assigned to), as Primitive calls carry theirs.
  f.def("_annotated", [](const std::string& role, int64_t rank_id, const std::string& name,
                         const py::function& fn, const py::args& args) {
    ir::AnnotationGuard guard(ir::Placement{.role = role, .rank = rank_id}, ir::Strategy{}, name);
    return fn(*args);
  });
  f.def(
      "neighbor_exchange_v2",
      [](const Tensor& x, std::vector<int64_t> send_rank_ids, std::vector<int64_t> send_lens,
         std::vector<int64_t> recv_rank_ids, std::vector<int64_t> recv_lens,
         const std::string& data_format, const std::string& group) {
        py::gil_scoped_release release;
        return ops::neighbor_exchange_v2(x, {.send_rank_ids = std::move(send_rank_ids),
                                             .recv_rank_ids = std::move(recv_rank_ids),
                                             .send_lens = std::move(send_lens),
                                             .recv_lens = std::move(recv_lens),
                                             .data_format = data_format,
                                             .group = group});
      },
      py::arg("x"), py::arg("send_rank_ids"), py::arg("send_lens"), py::arg("recv_rank_ids"),
      py::arg("recv_lens"), py::arg("data_format") = "NCHW",
      py::arg("group") = ops::kWorldCommGroup);
  f.def(
      "neighbor_exchange",
      [](const std::vector<Tensor>& xs, std::vector<int64_t> send_rank_ids,
         std::vector<int64_t> recv_rank_ids, const std::vector<std::vector<int64_t>>& recv_shapes,
         DType recv_type, const std::string& group) {
        std::vector<Shape> shapes;
        for (const auto& s : recv_shapes) shapes.emplace_back(s);
        py::gil_scoped_release release;
        return ops::neighbor_exchange(xs, {.send_rank_ids = std::move(send_rank_ids),
                                           .recv_rank_ids = std::move(recv_rank_ids),
                                           .recv_shapes = std::move(shapes),
                                           .recv_type = recv_type,
                                           .group = group});
      },
      py::arg("xs"), py::arg("send_rank_ids"), py::arg("recv_rank_ids"), py::arg("recv_shapes"),
      py::arg("recv_type") = DType::kFloat32, py::arg("group") = ops::kWorldCommGroup);
  f.def(
      "all_to_all",
      [](const Tensor& x, int64_t split_count, int64_t split_dim, int64_t concat_dim,
         const std::string& group) {
        py::gil_scoped_release release;
        return ops::all_to_all(x, {.split_count = split_count,
                                   .split_dim = split_dim,
                                   .concat_dim = concat_dim,
                                   .group = group});
      },
      py::arg("x"), py::arg("split_count"), py::arg("split_dim"), py::arg("concat_dim"),
      py::arg("group") = ops::kWorldCommGroup);
}

}  // namespace cleave::python

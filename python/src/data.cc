// cleave.dataset: sources (MnistDataset, Cifar10Dataset, GeneratorDataset over Python), the C++
// transforms, Python map operations, and iterators.
#include <fmt/format.h>

#include <optional>
#include <vector>

#include "bindings.h"

namespace cleave::python {
namespace {

namespace ds = cleave::dataset;

// A transform: the C++ operation, named for errors.
struct PyTransform {
  std::string name;
  ds::Transform fn;
};

// A Python callable as a map operation: it gets a NumPy array (MindSpore's pyfunc convention)
// and returns an array, a number or a Tensor. It runs under the GIL in the worker thread.
ds::Transform python_operation(const py::object& fn) {
  PyObjectRef ref(fn);
  return [ref](const Tensor& x) {
    py::gil_scoped_acquire gil;
    py::object out = ref.get()(to_numpy(x.clone()));
    return to_tensor(out);
  };
}

std::vector<ds::Transform> operations_of(const py::object& operations) {
  std::vector<ds::Transform> out;
  py::list items;
  if (py::isinstance<py::list>(operations) || py::isinstance<py::tuple>(operations)) {
    for (const py::handle& o : operations) items.append(o);
  } else {
    items.append(operations);
  }
  for (const py::handle& o : items) {
    if (py::isinstance<PyTransform>(o)) {
      out.push_back(o.cast<PyTransform&>().fn);
    } else if (py::hasattr(o, "_cleave_transform")) {
      out.push_back(o.attr("_cleave_transform").cast<PyTransform&>().fn);
    } else if (PyCallable_Check(o.ptr())) {
      out.push_back(python_operation(py::reinterpret_borrow<py::object>(o)));
    } else {
      throw py::type_error(fmt::format(
          "map: operation {} is not a transform; expected a cleave.dataset transform or a Python "
          "callable",
          py::repr(o).cast<std::string>()));
    }
  }
  return out;
}

std::vector<std::string> names_of(const py::object& columns, const char* what) {
  if (py::isinstance<py::str>(columns)) return {columns.cast<std::string>()};
  try {
    return columns.cast<std::vector<std::string>>();
  } catch (const py::cast_error&) {
    throw py::type_error(fmt::format("{}: expected a column name or a list of names, got {}", what,
                                     py::repr(columns).cast<std::string>()));
  }
}

// One row a Python source yields: a tuple of arrays (or a single array), as Tensors.
ds::Row row_of(const py::handle& item, size_t columns) {
  ds::Row row;
  if (py::isinstance<py::tuple>(item) || py::isinstance<py::list>(item)) {
    for (const py::handle& v : item) row.push_back(to_tensor(v));
  } else {
    row.push_back(to_tensor(item));
  }
  if (row.size() != columns) {
    throw py::value_error(fmt::format(
        "GeneratorDataset: the source yielded a row of {} values, but column_names names {} "
        "columns",
        row.size(), columns));
  }
  return row;
}

// Iterates a dataset from Python; next() releases the GIL while the pipeline works.
class PyIterator {
 public:
  PyIterator(std::unique_ptr<ds::Iterator> it, std::vector<std::string> names, bool as_dict,
             bool output_numpy)
      : it_(std::move(it)), names_(std::move(names)), as_dict_(as_dict), numpy_(output_numpy) {}
  PyIterator(PyIterator&&) = default;
  PyIterator& operator=(PyIterator&&) = delete;
  // Python drops an iterator with the GIL held (a loop left by break): its workers may be
  // waiting for the GIL inside a Python map operation, so they are stopped without it.
  ~PyIterator() {
    if (it_ != nullptr) {
      py::gil_scoped_release release;
      it_.reset();
    }
  }

  py::object next() {
    ds::Row row;
    bool more = false;
    {
      py::gil_scoped_release release;
      more = it_->next(row);
    }
    if (!more) throw py::stop_iteration();
    const auto value = [&](const Tensor& t) {
      return numpy_ ? py::object(to_numpy(t)) : py::cast(t);
    };
    if (as_dict_) {
      py::dict d;
      for (size_t i = 0; i < row.size(); ++i) d[py::str(names_[i])] = value(row[i]);
      return d;
    }
    py::list l;
    for (const Tensor& t : row) l.append(value(t));
    return l;
  }

 private:
  std::unique_ptr<ds::Iterator> it_;
  std::vector<std::string> names_;
  bool as_dict_, numpy_;
};

template <typename Options>
Options source_options(const py::object& num_samples, const py::object& shuffle,
                       const py::object& num_shards, const py::object& shard_id) {
  Options o;
  if (!num_samples.is_none()) o.num_samples = num_samples.cast<int64_t>();
  if (!shuffle.is_none()) o.shuffle = shuffle.cast<bool>();
  if (!num_shards.is_none()) o.num_shards = num_shards.cast<int64_t>();
  if (!shard_id.is_none()) o.shard_id = shard_id.cast<int64_t>();
  if (num_shards.is_none() != shard_id.is_none()) {
    throw py::value_error("dataset: num_shards and shard_id go together; give both or neither");
  }
  return o;
}

// A file source (MnistDataset, Cifar10Dataset) with MindSpore's keyword arguments.
template <typename Options>
void bind_file_source(py::module_& m, const char* name,
                      ds::DatasetPtr (*make)(const std::string&, Options)) {
  m.def(
      name,
      [make](const std::string& dir, const py::object& usage, const py::object& num_samples,
             const py::object& shuffle, const py::object& num_shards, const py::object& shard_id) {
        auto o = source_options<Options>(num_samples, shuffle, num_shards, shard_id);
        if (!usage.is_none()) o.usage = usage.cast<std::string>();
        py::gil_scoped_release release;
        return make(dir, o);
      },
      py::arg("dataset_dir"), py::arg("usage") = py::none(), py::arg("num_samples") = py::none(),
      py::arg("shuffle") = py::none(), py::arg("num_shards") = py::none(),
      py::arg("shard_id") = py::none());
}

}  // namespace

void bind_data(py::module_& m) {
  py::class_<PyTransform>(m, "Transform")
      .def_readonly("name", &PyTransform::name)
      .def("__call__", [](const PyTransform& t, const py::handle& x) {
        const bool numpy_in = py::isinstance<py::array>(x);
        Tensor out = t.fn(to_tensor(x));
        return numpy_in ? py::object(to_numpy(out)) : py::cast(out);
      });
  py::enum_<ds::vision::Inter>(m, "Inter")
      .value("LINEAR", ds::vision::Inter::kLinear)
      .value("BILINEAR", ds::vision::Inter::kLinear)
      .value("NEAREST", ds::vision::Inter::kNearest);
  m.def(
      "Resize",
      [](const py::object& size, ds::vision::Inter interpolation) {
        std::vector<int64_t> s;
        if (py::isinstance<py::int_>(size)) {
          s = {size.cast<int64_t>(), size.cast<int64_t>()};
        } else {
          s = size.cast<std::vector<int64_t>>();
        }
        return PyTransform{"Resize", ds::vision::Resize(s, interpolation)};
      },
      py::arg("size"), py::arg("interpolation") = ds::vision::Inter::kLinear);
  m.def(
      "Rescale",
      [](double rescale, double shift) {
        return PyTransform{"Rescale", ds::vision::Rescale(rescale, shift)};
      },
      py::arg("rescale"), py::arg("shift"));
  m.def(
      "Normalize",
      [](std::vector<double> mean, std::vector<double> std) {
        return PyTransform{"Normalize", ds::vision::Normalize(std::move(mean), std::move(std))};
      },
      py::arg("mean"), py::arg("std"));
  m.def("HWC2CHW", [] { return PyTransform{"HWC2CHW", ds::vision::HWC2CHW()}; });
  m.def(
      "RandomCrop",
      [](const py::object& size, const py::object& padding) {
        std::vector<int64_t> s =
            py::isinstance<py::int_>(size)
                ? std::vector<int64_t>{size.cast<int64_t>(), size.cast<int64_t>()}
                : size.cast<std::vector<int64_t>>();
        std::vector<int64_t> p;
        if (py::isinstance<py::int_>(padding)) {
          p = std::vector<int64_t>(4, padding.cast<int64_t>());
        } else if (!padding.is_none()) {
          p = padding.cast<std::vector<int64_t>>();
        }
        return PyTransform{"RandomCrop", ds::vision::RandomCrop(s, p)};
      },
      py::arg("size"), py::arg("padding") = py::none());
  m.def(
      "RandomHorizontalFlip",
      [](double prob) {
        return PyTransform{"RandomHorizontalFlip", ds::vision::RandomHorizontalFlip(prob)};
      },
      py::arg("prob") = 0.5);
  m.def(
      "TypeCast",
      [](DType dtype) {
        return PyTransform{"TypeCast", ds::transforms::TypeCast(dtype)};
      },
      py::arg("data_type"));

  py::class_<PyIterator>(m, "Iterator")
      .def(
          "__iter__", [](PyIterator& it) -> PyIterator& { return it; },
          py::return_value_policy::reference_internal)
      .def("__next__", &PyIterator::next);

  py::class_<ds::Dataset, std::shared_ptr<ds::Dataset>>(m, "Dataset")
      .def("get_dataset_size",
           [](ds::Dataset& d) {
             py::gil_scoped_release release;
             return d.get_dataset_size();
           })
      .def("get_col_names", &ds::Dataset::column_names)
      .def(
          "map",
          [](ds::Dataset& d, const py::object& operations, const py::object& input_columns,
             const py::object& num_parallel_workers) {
            const int workers =
                num_parallel_workers.is_none() ? 1 : num_parallel_workers.cast<int>();
            std::vector<std::string> columns =
                input_columns.is_none() ? std::vector<std::string>{d.column_names().at(0)}
                                        : names_of(input_columns, "map input_columns");
            return d.map(operations_of(operations), columns, workers);
          },
          py::arg("operations"), py::arg("input_columns") = py::none(),
          py::arg("num_parallel_workers") = py::none())
      .def("shuffle", &ds::Dataset::shuffle, py::arg("buffer_size"))
      .def("batch", &ds::Dataset::batch, py::arg("batch_size"), py::arg("drop_remainder") = false)
      .def("repeat", &ds::Dataset::repeat, py::arg("count") = 1)
      .def("take", &ds::Dataset::take, py::arg("count") = -1)
      .def(
          "create_tuple_iterator",
          [](ds::Dataset& d, int64_t num_epochs, bool output_numpy) {
            return PyIterator(
                num_epochs < 0 ? d.create_tuple_iterator() : d.create_tuple_iterator(num_epochs),
                d.column_names(), false, output_numpy);
          },
          py::arg("num_epochs") = -1, py::arg("output_numpy") = false)
      .def(
          "create_dict_iterator",
          [](ds::Dataset& d, int64_t num_epochs, bool output_numpy) {
            return PyIterator(
                num_epochs < 0 ? d.create_tuple_iterator() : d.create_tuple_iterator(num_epochs),
                d.column_names(), true, output_numpy);
          },
          py::arg("num_epochs") = -1, py::arg("output_numpy") = false);

  bind_file_source<ds::MnistOptions>(m, "MnistDataset", &ds::MnistDataset);
  bind_file_source<ds::Cifar10Options>(m, "Cifar10Dataset", &ds::Cifar10Dataset);
  m.def(
      "GeneratorDataset",
      [](const py::object& source, const py::object& column_names, const py::object& num_samples,
         const py::object& shuffle, const py::object& num_shards, const py::object& shard_id) {
        const std::vector<std::string> names =
            names_of(column_names, "GeneratorDataset column_names");
        ds::GeneratorOptions o;
        if (!num_samples.is_none()) o.num_samples = num_samples.cast<int64_t>();
        if (!shuffle.is_none()) o.shuffle = shuffle.cast<bool>();
        if (!num_shards.is_none()) o.num_shards = num_shards.cast<int64_t>();
        if (!shard_id.is_none()) o.shard_id = shard_id.cast<int64_t>();
        const size_t columns = names.size();
        PyObjectRef src(source);
        if (py::hasattr(source, "__getitem__") && py::hasattr(source, "__len__")) {
          // Random access: source[index] is one row.
          const auto size = py::len(source);
          return ds::GeneratorDataset(
              [src, columns](int64_t index) {
                py::gil_scoped_acquire gil;
                return row_of(src.get()[py::int_(index)], columns);
              },
              static_cast<int64_t>(size), names, o);
        }
        if (!PyCallable_Check(source.ptr()) && !py::hasattr(source, "__iter__")) {
          throw py::type_error(fmt::format(
              "GeneratorDataset: source {} is neither callable, iterable nor random-access; "
              "expected a generator function, an iterable or an object with __getitem__ and "
              "__len__",
              py::repr(source).cast<std::string>()));
        }
        // A generator function (called anew each epoch) or an iterable.
        return ds::GeneratorDataset(
            [src, columns]() -> ds::RowGenerator {
              py::gil_scoped_acquire gil;
              const py::object& s = src.get();
              py::object it = PyCallable_Check(s.ptr()) ? py::iter(s()) : py::iter(s);
              PyObjectRef iter(it);
              return [iter, columns](ds::Row& row) {
                py::gil_scoped_acquire gil;
                PyObject* item = PyIter_Next(iter.get().ptr());
                if (item == nullptr) {
                  if (PyErr_Occurred()) throw py::error_already_set();
                  return false;
                }
                row = row_of(py::reinterpret_steal<py::object>(item), columns);
                return true;
              };
            },
            names, o);
      },
      py::arg("source"), py::arg("column_names"), py::arg("num_samples") = py::none(),
      py::arg("shuffle") = py::none(), py::arg("num_shards") = py::none(),
      py::arg("shard_id") = py::none());
  m.def("set_prefetch_size", &ds::config::set_prefetch_size);
  m.def("get_prefetch_size", &ds::config::get_prefetch_size);
  m.def("set_seed", [](uint64_t seed) { ds::transform_generator().seed(seed); });
}

}  // namespace cleave::python

// cleave's Python bindings (the extension module cleave._cleave): shared declarations.
//
// NOTE [Python bindings and the GIL]
// The module is a thin layer over the C++ API; the Python package in python/cleave/ gives it
// MindSpore's module layout. Three rules keep it safe under threads:
//  - Long C++ calls (Model.train/eval, dataset iteration, collectives, init) release the GIL, so
//    that dataset workers and callbacks running Python can take it.
//  - Every call from C++ into Python (a Cell's construct, a callback, a GeneratorDataset source, a
//    Python map operation) takes the GIL first (py::gil_scoped_acquire).
//  - Python objects held by C++ (sources and operations inside std::function) are released with
//    the GIL held (PyObjectRef).
// A GRAPH_MODE step runs no Python: the Cell's construct runs once, under the tracer, and the
// compiled step runs in C++ (only the per-step Ctrl-C check takes the GIL, briefly).
#pragma once

#include <pybind11/functional.h>
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <memory>
#include <string>

#include "cleave/cleave.h"

namespace cleave::python {

namespace py = pybind11;

// A Python object owned from C++ code that may drop it without the GIL (a std::function copied
// into a dataset worker thread): the last owner releases it with the GIL taken.
class PyObjectRef {
 public:
  explicit PyObjectRef(py::object object);
  const py::object& get() const { return *object_; }

 private:
  std::shared_ptr<py::object> object_;
};

// Tensor <-> NumPy. to_numpy shares the tensor's memory (the array keeps the tensor alive);
// from_numpy copies (a tensor owns its storage). Unsupported dtypes are TypeErrors naming them.
py::array to_numpy(const Tensor& t);
Tensor from_numpy(const py::array& array);
// A Python value (Tensor, NumPy array, number, nested list) as a Tensor; `dtype` (optional)
// casts it.
Tensor to_tensor(const py::handle& value, const py::object& dtype = py::none());

void bind_tensor(py::module_& m);
void bind_nn(py::module_& m);
void bind_data(py::module_& m);
void bind_train(py::module_& m);

}  // namespace cleave::python

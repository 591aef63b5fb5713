// cleave.nn: Cell (subclassed in Python), the layers, losses and optimizers.
#include <fmt/format.h>

#include <optional>
#include <vector>

#include "bindings.h"

namespace cleave::python {
namespace {

// A Cell whose construct is a Python method (a subclass of cleave.nn.Cell written in Python).
// Its Python object must outlive every C++ owner: a C++ holder of a Cell given from Python
// (WithLossCell, SequentialCell, TrainOneStep, a parent cell, Model, shard) keeps it alive with
// py::keep_alive or a Python reference, since the construct override lives in the Python object.
// Called while a graph is traced, construct runs once under the tracer and its ops become graph
// nodes, exactly as a C++ Cell's; eagerly it runs every call.
class PyCell : public nn::Cell {
 public:
  using nn::Cell::Cell;
  Tensor construct(const Tensor& x) override { return call_python({x}); }
  Tensor construct(const Tensor& a, const Tensor& b) override { return call_python({a, b}); }

 private:
  Tensor call_python(const std::vector<Tensor>& args) {
    py::gil_scoped_acquire gil;
    py::function f = py::get_override(static_cast<const nn::Cell*>(this), "construct");
    if (!f) {
      throw py::type_error(fmt::format(
          "{}: the Cell has no construct method; a subclass of nn.Cell defines construct(self, "
          "...) with its computation",
          cls_name()));
    }
    py::tuple call_args(args.size());
    for (size_t i = 0; i < args.size(); ++i) call_args[i] = py::cast(args[i]);
    py::object out = f(*call_args);
    if (!py::isinstance<Tensor>(out)) {
      throw py::type_error(fmt::format(
          "{}.construct returned {}; expected one Tensor (cleave's cells return one output)",
          cls_name(), py::str(py::type::of(out).attr("__name__")).cast<std::string>()));
    }
    return out.cast<Tensor>();
  }
};

std::vector<Tensor> tensor_list(const py::iterable& params, const char* who) {
  std::vector<Tensor> out;
  for (const py::handle& p : params) {
    if (py::isinstance<py::dict>(p)) {
      throw py::type_error(fmt::format(
          "{}: parameter groups (dicts of 'params', 'lr', 'weight_decay') are not supported; "
          "expected the parameters themselves, e.g. net.trainable_params()",
          who));
    }
    if (!py::isinstance<Tensor>(p)) {
      throw py::type_error(fmt::format("{}: {} is not a Parameter; expected net.trainable_params()",
                                       who, py::repr(p).cast<std::string>()));
    }
    out.push_back(p.cast<Tensor>());
  }
  return out;
}

py::object call_cell(nn::Cell& cell, const py::args& args) {
  std::vector<Tensor> inputs;
  for (const py::handle& a : args) inputs.push_back(to_tensor(a));
  if (inputs.size() == 1) return py::cast(cell(inputs[0]));
  if (inputs.size() == 2) return py::cast(cell(inputs[0], inputs[1]));
  throw py::type_error(fmt::format(
      "{}: called with {} inputs; cleave's cells take one input (a network) or two (data and "
      "label, or logits and labels)",
      cell.cls_name(), inputs.size()));
}

std::vector<int64_t> pair_of(const py::handle& v, const char* what) {
  if (py::isinstance<py::int_>(v)) return {v.cast<int64_t>(), v.cast<int64_t>()};
  std::vector<int64_t> out;
  for (const py::handle& x : v) out.push_back(x.cast<int64_t>());
  if (out.size() != 2) {
    throw py::value_error(fmt::format("{}: expected an int or a pair of ints, got {}", what,
                                      py::repr(v).cast<std::string>()));
  }
  return out;
}

// A tuple of splits, or a named layout (cleave.Layout's call).
runtime::LayoutEntry entry_of(const py::handle& value) {
  if (py::isinstance<ir::TensorLayout>(value)) return value.cast<ir::TensorLayout>();
  return value.cast<std::vector<int64_t>>();
}

runtime::InStrategy in_strategy_of(const py::handle& value) {
  runtime::InStrategy out;
  if (!py::isinstance<py::tuple>(value) && !py::isinstance<py::list>(value)) {
    throw py::type_error(fmt::format(
        "shard: in_strategy {} is not a tuple; expected one tuple (or None) per input, e.g. "
        "((2, 1),)",
        py::repr(value).cast<std::string>()));
  }
  for (const py::handle& s : value) {
    if (s.is_none()) {
      out.emplace_back(std::nullopt);
    } else {
      out.emplace_back(entry_of(s));
    }
  }
  return out;
}

runtime::ShardOptions shard_options(const py::object& out_strategy,
                                    const py::object& parameter_plan, const std::string& device,
                                    const py::object& level) {
  runtime::ShardOptions o;
  if (!out_strategy.is_none()) {
    for (const py::handle& dims : out_strategy) {
      if (dims.is_none()) {
        o.out_strategy.emplace_back(std::nullopt);
      } else {
        o.out_strategy.emplace_back(entry_of(dims));
      }
    }
  }
  if (!parameter_plan.is_none()) {
    for (const auto& [k, v] : parameter_plan.cast<py::dict>()) {
      o.parameter_plan.emplace_back(k.cast<std::string>(), entry_of(v));
    }
  }
  o.device = device;
  if (!level.is_none()) o.level = level.cast<int>();
  return o;
}

}  // namespace

void bind_nn(py::module_& m) {
  // What ms.shard returns: called with tensors, it runs the sharded block.
  py::class_<ShardedFunction>(m, "ShardedFunction", py::dynamic_attr())
      .def("__call__",
           [](const ShardedFunction& f, const py::args& args) -> py::object {
             std::vector<Tensor> inputs;
             for (const py::handle& a : args) inputs.push_back(to_tensor(a));
             std::vector<Tensor> out = f.call(inputs);
             if (out.size() == 1) return py::cast(out[0]);
             return py::cast(out);
           })
      .def_property_readonly("num_compiled", &ShardedFunction::num_compiled);
  m.def("_shard_cell",
        [](nn::CellPtr cell, const py::object& in_strategy, const py::object& out_strategy,
           const py::object& parameter_plan, const std::string& device, const py::object& level) {
          return shard(cell, in_strategy_of(in_strategy),
                       shard_options(out_strategy, parameter_plan, device, level));
        });
  m.def("_shard_function", [](const py::function& fn, const py::object& in_strategy,
                              const py::object& out_strategy, const py::object& parameter_plan,
                              const std::string& device, const py::object& level) {
    PyObjectRef ref(fn);
    runtime::BlockFn block = [ref](const std::vector<Tensor>& in) {
      py::gil_scoped_acquire gil;
      py::tuple args(in.size());
      for (size_t i = 0; i < in.size(); ++i) args[i] = py::cast(in[i]);
      py::object out = ref.get()(*args);
      std::vector<Tensor> outs;
      if (py::isinstance<py::tuple>(out) || py::isinstance<py::list>(out)) {
        for (const py::handle& o : out) outs.push_back(to_tensor(o));
      } else {
        outs.push_back(to_tensor(out));
      }
      return outs;
    };
    const std::string name = py::hasattr(fn, "__name__") ? fn.attr("__name__").cast<std::string>()
                                                         : std::string("function");
    return shard(std::move(block), in_strategy_of(in_strategy),
                 shard_options(out_strategy, parameter_plan, device, level), name);
  });

  py::class_<nn::Initializer>(m, "Initializer")
      .def(py::init<const std::string&>())
      .def(py::init([](const Tensor& value) {
        const Tensor held = value.detach().clone();
        return nn::Initializer("tensor", [held](const Shape& shape, DType dtype) {
          CLEAVE_CHECK_ARG(held.shape() == shape && held.dtype() == dtype,
                           "initializer: the Tensor given has shape {} and dtype {}, but the "
                           "parameter has shape {} and dtype {}",
                           held.shape().to_string(), dtype_name(held.dtype()), shape.to_string(),
                           dtype_name(dtype));
          return held.clone();
        });
      }))
      .def(
          "__call__",
          [](const nn::Initializer& init, const std::vector<int64_t>& shape, DType dtype) {
            return init(Shape(shape), dtype);
          },
          py::arg("shape"), py::arg("dtype") = DType::kFloat32)
      .def_property_readonly("name", &nn::Initializer::name);
  py::implicitly_convertible<std::string, nn::Initializer>();
  py::implicitly_convertible<Tensor, nn::Initializer>();
  m.def("Normal", &nn::Normal, py::arg("sigma") = 0.01, py::arg("mean") = 0.0);
  m.def("TruncatedNormal", &nn::TruncatedNormal, py::arg("sigma") = 0.01, py::arg("mean") = 0.0);
  m.def("Uniform", &nn::Uniform, py::arg("scale") = 0.07);
  m.def("HeUniform", &nn::HeUniform, py::arg("negative_slope") = 0.0, py::arg("mode") = "fan_in",
        py::arg("nonlinearity") = "leaky_relu");
  m.def("HeNormal", &nn::HeNormal, py::arg("negative_slope") = 0.0, py::arg("mode") = "fan_in",
        py::arg("nonlinearity") = "leaky_relu");
  m.def("XavierUniform", &nn::XavierUniform, py::arg("gain") = 1.0);

  py::class_<nn::Cell, PyCell, std::shared_ptr<nn::Cell>>(m, "Cell", py::dynamic_attr())
      .def(py::init<std::string>(), py::arg("cls_name"))
      .def("__call__", &call_cell)
      .def(
          "_register_module",
          [](nn::Cell& self, const std::string& name, std::shared_ptr<nn::Cell> cell) {
            self.register_module(name, std::move(cell));
          },
          py::keep_alive<1, 3>())
      .def("_register_parameter",
           [](nn::Cell& self, const std::string& name, const Tensor& value, bool requires_grad) {
             return self.register_parameter(name, value, requires_grad);
           })
      .def("place", &nn::Cell::place, py::arg("role"), py::arg("rank_id"),
           py::return_value_policy::reference)
      .def(
          "shard",
          [](nn::Cell& c, const py::object& in_strategy, const py::object& out_strategy,
             const py::object& parameter_plan, const std::string& device,
             const py::object& level) -> nn::Cell& {
            return c.shard(in_strategy_of(in_strategy),
                           shard_options(out_strategy, parameter_plan, device, level));
          },
          py::arg("in_strategy"), py::arg("out_strategy") = py::none(),
          py::arg("parameter_plan") = py::none(), py::arg("device") = "CPU", py::arg("level") = 0,
          py::return_value_policy::reference)
      .def("set_train", &nn::Cell::set_train, py::arg("mode") = true,
           py::return_value_policy::reference)
      .def_property_readonly("training", &nn::Cell::training)
      .def_property_readonly("cls_name", &nn::Cell::cls_name)
      .def("trainable_params", &nn::Cell::trainable_params)
      .def("get_parameters", &nn::Cell::get_parameters)
      .def("parameters_and_names", &nn::Cell::parameters_and_names)
      .def("parameters_dict",
           [](const nn::Cell& c) {
             py::dict d;
             for (const auto& [name, t] : c.parameters_and_names()) d[py::str(name)] = t;
             return d;
           })
      .def("name_cells", [](const nn::Cell& c) {
        py::dict d;
        for (const auto& [name, child] : c.children()) d[py::str(name)] = child;
        return d;
      });

  // ---- layers ----
  py::class_<nn::Dense, nn::Cell, std::shared_ptr<nn::Dense>>(m, "Dense")
      .def(py::init([](int64_t in, int64_t out, nn::Initializer weight_init,
                       nn::Initializer bias_init, bool has_bias, const py::object& activation) {
             return std::make_shared<nn::Dense>(
                 in, out,
                 nn::DenseOptions{.weight_init = std::move(weight_init),
                                  .bias_init = std::move(bias_init),
                                  .has_bias = has_bias,
                                  .activation = activation.is_none()
                                                    ? std::string()
                                                    : activation.cast<std::string>()});
           }),
           py::arg("in_channels"), py::arg("out_channels"),
           py::arg("weight_init") = nn::Initializer("normal"),
           py::arg("bias_init") = nn::Initializer("zeros"), py::arg("has_bias") = true,
           py::arg("activation") = py::none())
      .def_readwrite("weight", &nn::Dense::weight)
      .def_readwrite("bias", &nn::Dense::bias)
      .def_property_readonly(
          "matmul", [](nn::Dense& d) -> ir::Primitive& { return d.matmul; },
          py::return_value_policy::reference_internal)
      .def_property_readonly(
          "bias_add", [](nn::Dense& d) -> ir::Primitive& { return d.bias_add; },
          py::return_value_policy::reference_internal);
  py::class_<nn::Conv2d, nn::Cell, std::shared_ptr<nn::Conv2d>>(m, "Conv2d")
      .def(py::init([](int64_t in, int64_t out, const py::object& kernel_size,
                       const py::object& stride, const std::string& pad_mode,
                       const py::object& padding, const py::object& dilation, int64_t group,
                       bool has_bias, nn::Initializer weight_init, nn::Initializer bias_init) {
             nn::Conv2dOptions o;
             o.stride = pair_of(stride, "Conv2d stride");
             o.pad_mode = pad_mode;
             if (py::isinstance<py::int_>(padding)) {
               o.padding = std::vector<int64_t>(4, padding.cast<int64_t>());
             } else {
               o.padding = padding.cast<std::vector<int64_t>>();
             }
             o.dilation = pair_of(dilation, "Conv2d dilation");
             o.group = group;
             o.has_bias = has_bias;
             o.weight_init = std::move(weight_init);
             o.bias_init = std::move(bias_init);
             return std::make_shared<nn::Conv2d>(in, out,
                                                 pair_of(kernel_size, "Conv2d kernel_size"), o);
           }),
           py::arg("in_channels"), py::arg("out_channels"), py::arg("kernel_size"),
           py::arg("stride") = 1, py::arg("pad_mode") = "same", py::arg("padding") = 0,
           py::arg("dilation") = 1, py::arg("group") = 1, py::arg("has_bias") = false,
           py::arg("weight_init") = nn::Initializer("normal"),
           py::arg("bias_init") = nn::Initializer("zeros"))
      .def_readwrite("weight", &nn::Conv2d::weight)
      .def_property_readonly(
          "conv2d", [](nn::Conv2d& c) -> ir::Primitive& { return c.conv2d; },
          py::return_value_policy::reference_internal);
  py::class_<nn::MaxPool2d, nn::Cell, std::shared_ptr<nn::MaxPool2d>>(m, "MaxPool2d")
      .def(py::init<int64_t, int64_t, std::string>(), py::arg("kernel_size") = 1,
           py::arg("stride") = 1, py::arg("pad_mode") = "valid");
  py::class_<nn::AvgPool2d, nn::Cell, std::shared_ptr<nn::AvgPool2d>>(m, "AvgPool2d")
      .def(py::init<int64_t, int64_t, std::string>(), py::arg("kernel_size") = 1,
           py::arg("stride") = 1, py::arg("pad_mode") = "valid");
  py::class_<nn::ReLU, nn::Cell, std::shared_ptr<nn::ReLU>>(m, "ReLU")
      .def(py::init<>())
      .def_property_readonly(
          "relu", [](nn::ReLU& c) -> ir::Primitive& { return c.relu; },
          py::return_value_policy::reference_internal);
  py::class_<nn::GELU, nn::Cell, std::shared_ptr<nn::GELU>>(m, "GELU").def(py::init<>());
  py::class_<nn::Sigmoid, nn::Cell, std::shared_ptr<nn::Sigmoid>>(m, "Sigmoid").def(py::init<>());
  py::class_<nn::Tanh, nn::Cell, std::shared_ptr<nn::Tanh>>(m, "Tanh").def(py::init<>());
  py::class_<nn::Softmax, nn::Cell, std::shared_ptr<nn::Softmax>>(m, "Softmax")
      .def(py::init<int64_t>(), py::arg("axis") = -1);
  py::class_<nn::Flatten, nn::Cell, std::shared_ptr<nn::Flatten>>(m, "Flatten").def(py::init<>());
  py::class_<nn::BatchNorm2d, nn::Cell, std::shared_ptr<nn::BatchNorm2d>>(m, "BatchNorm2d")
      .def(py::init([](int64_t num_features, double eps, double momentum) {
             return std::make_shared<nn::BatchNorm2d>(
                 num_features, nn::BatchNorm2dOptions{.eps = eps, .momentum = momentum});
           }),
           py::arg("num_features"), py::arg("eps") = 1e-5, py::arg("momentum") = 0.9);
  py::class_<nn::LayerNorm, nn::Cell, std::shared_ptr<nn::LayerNorm>>(m, "LayerNorm")
      .def(py::init<std::vector<int64_t>, double>(), py::arg("normalized_shape"),
           py::arg("epsilon") = 1e-5);
  py::class_<nn::Dropout, nn::Cell, std::shared_ptr<nn::Dropout>>(m, "Dropout")
      .def(py::init<double>(), py::arg("p") = 0.5);
  py::class_<nn::Embedding, nn::Cell, std::shared_ptr<nn::Embedding>>(m, "Embedding")
      .def(py::init<int64_t, int64_t, nn::Initializer>(), py::arg("vocab_size"),
           py::arg("embedding_size"), py::arg("embedding_table") = nn::Initializer("normal"));
  py::class_<nn::SequentialCell, nn::Cell, std::shared_ptr<nn::SequentialCell>>(m, "SequentialCell")
      .def(py::init<std::vector<nn::CellPtr>>(), py::arg("cells"), py::keep_alive<1, 2>())
      .def("append", &nn::SequentialCell::append, py::keep_alive<1, 2>());

  // ---- losses ----
  py::class_<nn::LossBase, nn::Cell, std::shared_ptr<nn::LossBase>>(m, "LossBase");
  py::class_<nn::SoftmaxCrossEntropyWithLogits, nn::LossBase,
             std::shared_ptr<nn::SoftmaxCrossEntropyWithLogits>>(m, "SoftmaxCrossEntropyWithLogits")
      .def(py::init<bool, std::string>(), py::arg("sparse") = false, py::arg("reduction") = "none");
  py::class_<nn::CrossEntropyLoss, nn::LossBase, std::shared_ptr<nn::CrossEntropyLoss>>(
      m, "CrossEntropyLoss")
      .def(py::init([](const py::object& weight, int64_t ignore_index, const std::string& reduction,
                       double label_smoothing) {
             if (!weight.is_none() || ignore_index != -100 || label_smoothing != 0.0) {
               throw py::value_error(
                   "CrossEntropyLoss: weight, ignore_index and label_smoothing are not supported; "
                   "expected their defaults (None, -100, 0.0)");
             }
             return std::make_shared<nn::CrossEntropyLoss>(reduction);
           }),
           py::arg("weight") = py::none(), py::arg("ignore_index") = -100,
           py::arg("reduction") = "mean", py::arg("label_smoothing") = 0.0);
  py::class_<nn::MSELoss, nn::LossBase, std::shared_ptr<nn::MSELoss>>(m, "MSELoss")
      .def(py::init<std::string>(), py::arg("reduction") = "mean");
  py::class_<nn::L1Loss, nn::LossBase, std::shared_ptr<nn::L1Loss>>(m, "L1Loss")
      .def(py::init<std::string>(), py::arg("reduction") = "mean");
  py::class_<nn::WithLossCell, nn::Cell, std::shared_ptr<nn::WithLossCell>>(m, "WithLossCell")
      .def(py::init<nn::CellPtr, nn::CellPtr>(), py::arg("backbone"), py::arg("loss_fn"),
           py::keep_alive<1, 2>(), py::keep_alive<1, 3>());

  // ---- optimizers ----
  py::class_<optim::Optimizer, std::shared_ptr<optim::Optimizer>>(m, "Optimizer")
      .def_property_readonly("parameters", &optim::Optimizer::parameters)
      .def_property_readonly("name", &optim::Optimizer::name)
      .def("get_lr", &optim::Optimizer::current_lr);
  py::class_<optim::SGD, optim::Optimizer, std::shared_ptr<optim::SGD>>(m, "SGD").def(
      py::init([](const py::iterable& params, double lr, double momentum, double dampening,
                  double weight_decay, bool nesterov, double loss_scale) {
        if (loss_scale != 1.0) throw py::value_error("SGD: loss_scale must be 1.0");
        return std::make_shared<optim::SGD>(tensor_list(params, "SGD"), lr,
                                            optim::SGDOptions{.momentum = momentum,
                                                              .dampening = dampening,
                                                              .weight_decay = weight_decay,
                                                              .nesterov = nesterov});
      }),
      py::arg("params"), py::arg("learning_rate") = 0.1, py::arg("momentum") = 0.0,
      py::arg("dampening") = 0.0, py::arg("weight_decay") = 0.0, py::arg("nesterov") = false,
      py::arg("loss_scale") = 1.0);
  py::class_<optim::Momentum, optim::Optimizer, std::shared_ptr<optim::Momentum>>(m, "Momentum")
      .def(py::init([](const py::iterable& params, double lr, double momentum, double weight_decay,
                       double loss_scale, bool use_nesterov) {
             if (loss_scale != 1.0) throw py::value_error("Momentum: loss_scale must be 1.0");
             return std::make_shared<optim::Momentum>(tensor_list(params, "Momentum"), lr, momentum,
                                                      weight_decay, use_nesterov);
           }),
           py::arg("params"), py::arg("learning_rate"), py::arg("momentum"),
           py::arg("weight_decay") = 0.0, py::arg("loss_scale") = 1.0,
           py::arg("use_nesterov") = false);
  py::class_<optim::Adam, optim::Optimizer, std::shared_ptr<optim::Adam>>(m, "Adam").def(
      py::init([](const py::iterable& params, double lr, double beta1, double beta2, double eps,
                  double weight_decay) {
        return std::make_shared<optim::Adam>(
            tensor_list(params, "Adam"), lr,
            optim::AdamOptions{
                .beta1 = beta1, .beta2 = beta2, .eps = eps, .weight_decay = weight_decay});
      }),
      py::arg("params"), py::arg("learning_rate") = 1e-3, py::arg("beta1") = 0.9,
      py::arg("beta2") = 0.999, py::arg("eps") = 1e-8, py::arg("weight_decay") = 0.0);

  // MindSpore's TrainOneStepCell: one compiled (GRAPH_MODE) or eager training step.
  py::class_<optim::TrainOneStep, std::shared_ptr<optim::TrainOneStep>>(m, "TrainOneStep")
      .def(py::init<nn::CellPtr, std::shared_ptr<optim::Optimizer>>(), py::keep_alive<1, 2>(),
           py::arg("network"), py::arg("optimizer"))
      .def("__call__",
           [](optim::TrainOneStep& step, const py::handle& data, const py::handle& label) {
             const Tensor d = to_tensor(data), l = to_tensor(label);
             py::gil_scoped_release release;
             return step(d, l);
           });
}

}  // namespace cleave::python

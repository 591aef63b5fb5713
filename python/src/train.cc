// cleave.train (Model, callbacks, metrics, checkpoints), cleave.communication, the contexts, and
// the module itself with its error translation.
#include <fmt/format.h>

#include <cctype>
#include <csignal>
#include <type_traits>
#include <vector>

#include "bindings.h"
#include "cleave/kernels/device.h"

namespace cleave::python {
namespace {

// A callback written in Python (a subclass of cleave.train.Callback). Its methods carry
// MindSpore's names; the Python base class maps the older ones (step_end, ...) onto them.
class PyCallback : public train::Callback {
 public:
  void on_train_begin(train::RunContext& ctx) override { call("on_train_begin", ctx); }
  void on_epoch_begin(train::RunContext& ctx) override { call("on_train_epoch_begin", ctx); }
  void on_step_begin(train::RunContext& ctx) override { call("on_train_step_begin", ctx); }
  void on_step_end(train::RunContext& ctx) override { call("on_train_step_end", ctx); }
  void on_epoch_end(train::RunContext& ctx) override { call("on_train_epoch_end", ctx); }
  void on_train_end(train::RunContext& ctx) override { call("on_train_end", ctx); }

 private:
  void call(const char* name, train::RunContext& ctx) {
    py::gil_scoped_acquire gil;
    py::function f = py::get_override(static_cast<const train::Callback*>(this), name);
    if (f) f(py::cast(&ctx, py::return_value_policy::reference));
  }
};

// Ctrl-C during Model.train: the C++ loop runs without the GIL, so Python's SIGINT handler only
// sets a flag; this callback, added to every train and eval, looks at it after each step and
// raises KeyboardInterrupt through the loop.
class InterruptCheck : public train::Callback {
 public:
  void on_step_end(train::RunContext&) override {
    py::gil_scoped_acquire gil;
    if (PyErr_CheckSignals() != 0) throw py::error_already_set();
  }
};

train::MetricMap metrics_of(const py::object& metrics) {
  train::MetricMap out;
  if (metrics.is_none()) return out;
  if (py::isinstance<py::set>(metrics)) {
    for (const py::handle& name : metrics) {
      const std::string n = name.cast<std::string>();
      if (n == "accuracy" || n == "acc") {
        out[n] = std::make_shared<train::Accuracy>();
      } else if (n == "loss") {
        out[n] = std::make_shared<train::Loss>();
      } else {
        throw py::value_error(fmt::format(
            "Model metrics: '{}' is not a metric name; expected 'accuracy', 'acc' or 'loss', or "
            "a dict of metric objects",
            n));
      }
    }
    return out;
  }
  for (const auto& [k, v] : metrics.cast<py::dict>()) {
    out[k.cast<std::string>()] = v.cast<train::MetricPtr>();
  }
  return out;
}

std::vector<train::CallbackPtr> callbacks_of(const py::object& callbacks) {
  std::vector<train::CallbackPtr> out;
  if (!callbacks.is_none()) {
    if (py::isinstance<train::Callback>(callbacks)) {
      out.push_back(callbacks.cast<train::CallbackPtr>());
    } else {
      for (const py::handle& c : callbacks) {
        if (!py::isinstance<train::Callback>(c)) {
          throw py::type_error(fmt::format(
              "Model.train: callback {} is not a Callback; expected LossMonitor(), "
              "TimeMonitor(), ModelCheckpoint(...) or a subclass of cleave.train.Callback",
              py::repr(c).cast<std::string>()));
        }
        out.push_back(c.cast<train::CallbackPtr>());
      }
    }
  }
  out.push_back(std::make_shared<InterruptCheck>());
  return out;
}

// A setting's value as T, or a TypeError naming the setting, the value and what it takes.
template <typename T>
T setting(const py::handle& v, const char* who, const std::string& key) {
  const char* expected = "a value of another type";
  if constexpr (std::is_same_v<T, bool>) {
    expected = "True or False";
  } else if constexpr (std::is_integral_v<T>) {
    expected = "an int";
  } else if constexpr (std::is_floating_point_v<T>) {
    expected = "a number";
  } else if constexpr (std::is_same_v<T, std::string>) {
    expected = "a string";
  } else if constexpr (std::is_same_v<T, ir::Strategy>) {
    expected = "a tuple of tuples of ints";
  } else if constexpr (std::is_same_v<T, py::dict>) {
    expected = "a dict";
  }
  try {
    return v.cast<T>();
  } catch (const py::cast_error&) {
    throw py::type_error(fmt::format("{}: {} is {}; expected {}", who, key,
                                     py::repr(v).cast<std::string>(), expected));
  }
}

runtime::ParallelMode parallel_mode_of(const py::handle& v) {
  const std::string s = py::str(v).cast<std::string>();
  for (runtime::ParallelMode m : {runtime::STAND_ALONE, runtime::DATA_PARALLEL,
                                  runtime::SEMI_AUTO_PARALLEL, runtime::AUTO_PARALLEL}) {
    std::string name = runtime::parallel_mode_name(m);
    for (char& c : name) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    if (s == name) return m;
  }
  throw py::value_error(fmt::format(
      "set_auto_parallel_context: parallel_mode '{}' is not a mode; expected 'stand_alone', "
      "'data_parallel', 'semi_auto_parallel' or 'auto_parallel' (ParallelMode.*)",
      s));
}

void set_auto_parallel(const py::kwargs& kwargs) {
  runtime::AutoParallelContext c = runtime::get_auto_parallel_context();
  for (const auto& [k, v] : kwargs) {
    const std::string key = k.cast<std::string>();
    if (key == "parallel_mode") {
      c.parallel_mode = parallel_mode_of(v);
    } else if (key == "search_mode") {
      c.search_mode = setting<std::string>(v, "set_auto_parallel_context", key);
    } else if (key == "device_num") {
      c.device_num = setting<int64_t>(v, "set_auto_parallel_context", key);
    } else if (key == "global_rank") {
      c.global_rank = setting<int64_t>(v, "set_auto_parallel_context", key);
    } else if (key == "gradients_mean") {
      c.gradients_mean = setting<bool>(v, "set_auto_parallel_context", key);
    } else if (key == "parameter_broadcast") {
      c.parameter_broadcast = setting<bool>(v, "set_auto_parallel_context", key);
    } else if (key == "full_batch") {
      c.full_batch = setting<bool>(v, "set_auto_parallel_context", key);
    } else if (key == "dataset_strategy") {
      if (py::isinstance<py::str>(v)) {
        c.dataset_strategy = setting<std::string>(v, "set_auto_parallel_context", key);
      } else {
        c.dataset_strategy = setting<ir::Strategy>(v, "set_auto_parallel_context", key);
      }
    } else if (key == "strategy_ckpt_save_file") {
      c.strategy_ckpt_save_file = setting<std::string>(v, "set_auto_parallel_context", key);
    } else if (key == "strategy_ckpt_load_file") {
      c.strategy_ckpt_load_file = setting<std::string>(v, "set_auto_parallel_context", key);
    } else if (key == "strategy_ckpt_config") {
      py::dict d = setting<py::dict>(v, "set_auto_parallel_context", key);
      if (d.contains("save_file"))
        c.strategy_ckpt_save_file = setting<std::string>(
            d["save_file"], "set_auto_parallel_context strategy_ckpt_config", "save_file");
      if (d.contains("load_file"))
        c.strategy_ckpt_load_file = setting<std::string>(
            d["load_file"], "set_auto_parallel_context strategy_ckpt_config", "load_file");
    } else if (key == "enable_alltoall") {
      c.enable_alltoall = setting<bool>(v, "set_auto_parallel_context", key);
    } else if (key == "enable_parallel_optimizer") {
      c.enable_parallel_optimizer = setting<bool>(v, "set_auto_parallel_context", key);
    } else if (key == "parallel_optimizer_config") {
      for (const auto& [ok, ov] : setting<py::dict>(v, "set_auto_parallel_context", key)) {
        const std::string o = ok.cast<std::string>();
        auto& p = c.parallel_optimizer_config;
        if (o == "gradient_accumulation_shard") {
          p.gradient_accumulation_shard =
              setting<bool>(ov, "set_auto_parallel_context parallel_optimizer_config", o);
        } else if (o == "parallel_optimizer_threshold") {
          p.parallel_optimizer_threshold =
              setting<int64_t>(ov, "set_auto_parallel_context parallel_optimizer_config", o);
        } else if (o == "optimizer_weight_shard_size") {
          p.optimizer_weight_shard_size =
              setting<int64_t>(ov, "set_auto_parallel_context parallel_optimizer_config", o);
        } else {
          throw py::value_error(fmt::format(
              "set_auto_parallel_context: parallel_optimizer_config has no key '{}'; expected "
              "gradient_accumulation_shard, parallel_optimizer_threshold or "
              "optimizer_weight_shard_size",
              o));
        }
      }
    } else if (key == "pipeline_micro_batches") {
      c.pipeline_micro_batches = setting<int>(v, "set_auto_parallel_context", key);
    } else if (key == "bucket_cap_mb") {
      c.bucket_cap_mb = setting<double>(v, "set_auto_parallel_context", key);
    } else {
      throw py::value_error(fmt::format(
          "set_auto_parallel_context: '{}' is not a setting; expected parallel_mode, search_mode, "
          "device_num, global_rank, gradients_mean, parameter_broadcast, full_batch, "
          "dataset_strategy, strategy_ckpt_config, strategy_ckpt_save_file, "
          "strategy_ckpt_load_file, enable_alltoall, enable_parallel_optimizer, "
          "parallel_optimizer_config, pipeline_micro_batches or bucket_cap_mb",
          key));
    }
  }
  runtime::set_auto_parallel_context(c);
}

void set_context(const py::kwargs& kwargs) {
  runtime::Context c = runtime::get_context();
  for (const auto& [k, v] : kwargs) {
    const std::string key = k.cast<std::string>();
    if (key == "mode") {
      if (!py::isinstance<py::int_>(v)) {
        throw py::type_error(
            fmt::format("set_context: mode is {}; expected GRAPH_MODE (0) or PYNATIVE_MODE (1)",
                        py::repr(v).cast<std::string>()));
      }
      const int mode = setting<int>(v, "set_context", key);
      if (mode != runtime::GRAPH_MODE && mode != runtime::PYNATIVE_MODE) {
        throw py::value_error(fmt::format(
            "set_context: mode {} is not a mode; expected GRAPH_MODE (0) or PYNATIVE_MODE (1)",
            mode));
      }
      c.mode = static_cast<runtime::Mode>(mode);
    } else if (key == "save_graphs") {
      c.save_graphs = py::isinstance<py::bool_>(v) ? (setting<bool>(v, "set_context", key) ? 1 : 0)
                                                   : setting<int>(v, "set_context", key);
    } else if (key == "save_graphs_path") {
      c.save_graphs_path = setting<std::string>(v, "set_context", key);
    } else if (key == "split_batch_over_threads") {
      c.split_batch_over_threads = setting<bool>(v, "set_context", key);
    } else if (key == "device_target") {
      const std::string target = setting<std::string>(v, "set_context", key);
      if (target != "CPU" && target != "GPU") {
        throw py::value_error(fmt::format(
            "set_context: device_target '{}' is not supported; expected 'CPU' or 'GPU'", target));
      }
      if (target == "GPU" && !cuda_available()) {
        throw py::value_error(
            "set_context: device_target 'GPU', but this machine has no usable GPU (or cleave was "
            "built without CUDA); use device_target='CPU'");
      }
    } else if (key == "device_id" || key == "max_device_memory" || key == "jit_level") {
      // Accepted as MindSpore's scripts pass them; cleave picks the device per rank itself.
    } else {
      throw py::value_error(fmt::format(
          "set_context: '{}' is not a setting; expected mode, device_target, device_id, "
          "save_graphs, save_graphs_path or split_batch_over_threads",
          key));
    }
  }
  runtime::set_context(c);
}

py::dict parameter_dict(const train::ParamMap& params) {
  py::dict d;
  for (const auto& [name, t] : params) d[py::str(name)] = t;
  return d;
}

}  // namespace

void bind_train(py::module_& m) {
  m.def("set_context", &set_context);
  m.def("get_context", [](const std::string& key) -> py::object {
    const runtime::Context& c = runtime::get_context();
    if (key == "mode") return py::int_(static_cast<int>(c.mode));
    if (key == "save_graphs") return py::int_(c.save_graphs);
    if (key == "save_graphs_path") return py::str(c.save_graphs_path);
    if (key == "split_batch_over_threads") return py::bool_(c.split_batch_over_threads);
    if (key == "device_target") return py::str("CPU");
    throw py::value_error(fmt::format("get_context: '{}' is not a setting", key));
  });
  m.def("set_auto_parallel_context", &set_auto_parallel);
  m.def("reset_auto_parallel_context", &runtime::reset_auto_parallel_context);
  m.def("get_auto_parallel_context", [](const std::string& key) -> py::object {
    const runtime::AutoParallelContext& c = runtime::get_auto_parallel_context();
    if (key == "parallel_mode") {
      std::string name = runtime::parallel_mode_name(c.parallel_mode);
      for (char& ch : name) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
      return py::str(name);
    }
    if (key == "device_num") return py::int_(c.device_num);
    if (key == "global_rank") return py::int_(c.global_rank);
    if (key == "gradients_mean") return py::bool_(c.gradients_mean);
    if (key == "full_batch") return py::bool_(c.full_batch);
    if (key == "search_mode") return py::str(c.search_mode);
    if (key == "enable_parallel_optimizer") return py::bool_(c.enable_parallel_optimizer);
    throw py::value_error(fmt::format("get_auto_parallel_context: '{}' is not a setting", key));
  });

  // ---- communication ----
  m.def(
      "init",
      [](const py::object& backend) {
        const std::string b = backend.is_none() ? std::string() : backend.cast<std::string>();
        py::gil_scoped_release release;
        init(b);
      },
      py::arg("backend_name") = py::none());
  m.def("release", [] {
    py::gil_scoped_release release;
    cleave::release();
  });
  m.def("is_initialized", &is_initialized);
  m.def("report_failure", &report_failure);
  m.def(
      "get_rank", [](const std::string& g) { return get_rank(g); },
      py::arg("group") = std::string(kWorldGroup));
  m.def(
      "get_group_size", [](const std::string& g) { return get_group_size(g); },
      py::arg("group") = std::string(kWorldGroup));
  m.def("get_local_rank", &get_local_rank);
  m.def("get_local_rank_size", &get_local_size);
  m.def(
      "create_group",
      [](const std::string& name, const std::vector<int>& ranks) {
        py::gil_scoped_release release;
        create_group(name, ranks);
      },
      py::arg("group"), py::arg("rank_ids"));
  m.def(
      "destroy_group",
      [](const std::string& name) {
        py::gil_scoped_release release;
        destroy_group(name);
      },
      py::arg("group"));
  m.def("get_world_rank_from_group_rank", &get_world_rank_from_group_rank);
  m.def("get_group_rank_from_world_rank", &get_group_rank_from_world_rank);
  m.attr("WORLD_COMM_GROUP") = ops::kWorldCommGroup;

  // ---- callbacks ----
  py::class_<train::RunContext>(m, "RunContext")
      .def(
          "original_args", [](train::RunContext& c) -> train::RunContext& { return c; },
          py::return_value_policy::reference)
      .def("request_stop", &train::RunContext::request_stop)
      .def("get_stop_requested", [](const train::RunContext& c) { return c.stop_requested; })
      .def_readonly("epoch_num", &train::RunContext::epoch_num)
      .def_readonly("batch_num", &train::RunContext::batch_num)
      .def_readonly("cur_epoch_num", &train::RunContext::cur_epoch_num)
      .def_readonly("cur_step_num", &train::RunContext::cur_step_num)
      .def_readonly("step_in_epoch", &train::RunContext::step_in_epoch)
      .def_property_readonly("net_outputs", [](const train::RunContext& c) { return c.loss; })
      .def_property_readonly("loss", &train::RunContext::loss_value);
  py::class_<train::Callback, PyCallback, std::shared_ptr<train::Callback>>(m, "Callback")
      .def(py::init<>());
  py::class_<train::LossMonitor, train::Callback, std::shared_ptr<train::LossMonitor>>(
      m, "LossMonitor")
      .def(py::init<int64_t>(), py::arg("per_print_times") = 1);
  py::class_<train::TimeMonitor, train::Callback, std::shared_ptr<train::TimeMonitor>>(
      m, "TimeMonitor")
      .def(py::init([](const py::object&) { return std::make_shared<train::TimeMonitor>(); }),
           py::arg("data_size") = py::none());
  py::class_<train::CheckpointConfig>(m, "CheckpointConfig")
      .def(py::init([](int64_t steps, int64_t keep, const std::string& format) {
             return train::CheckpointConfig{
                 .save_checkpoint_steps = steps, .keep_checkpoint_max = keep, .format = format};
           }),
           py::arg("save_checkpoint_steps") = 1, py::arg("keep_checkpoint_max") = 5,
           py::arg("format") = "ckpt");
  py::class_<train::ModelCheckpoint, train::Callback, std::shared_ptr<train::ModelCheckpoint>>(
      m, "ModelCheckpoint")
      .def(py::init([](const std::string& prefix, const py::object& directory,
                       const py::object& config) {
             return std::make_shared<train::ModelCheckpoint>(
                 config.is_none() ? train::CheckpointConfig{}
                                  : config.cast<train::CheckpointConfig>(),
                 prefix, directory.is_none() ? std::string(".") : directory.cast<std::string>());
           }),
           py::arg("prefix") = "CKP", py::arg("directory") = py::none(),
           py::arg("config") = py::none())
      .def_property_readonly("latest_ckpt_file_name", &train::ModelCheckpoint::latest_checkpoint);

  // ---- metrics ----
  py::class_<train::Metric, std::shared_ptr<train::Metric>>(m, "Metric")
      .def("clear", &train::Metric::clear)
      .def("eval", &train::Metric::eval)
      .def("update", [](train::Metric& metric, const py::args& args) {
        std::vector<Tensor> inputs;
        for (const py::handle& a : args) inputs.push_back(to_tensor(a));
        metric.update(inputs);
      });
  py::class_<train::Accuracy, train::Metric, std::shared_ptr<train::Accuracy>>(m, "Accuracy")
      .def(py::init([](const std::string& eval_type) {
             if (eval_type != "classification") {
               throw py::value_error(fmt::format(
                   "Accuracy: eval_type '{}' is not supported; expected 'classification'",
                   eval_type));
             }
             return std::make_shared<train::Accuracy>();
           }),
           py::arg("eval_type") = "classification");
  py::class_<train::Loss, train::Metric, std::shared_ptr<train::Loss>>(m, "Loss").def(py::init<>());
  py::class_<train::TopKCategoricalAccuracy, train::Metric,
             std::shared_ptr<train::TopKCategoricalAccuracy>>(m, "TopKCategoricalAccuracy")
      .def(py::init<int64_t>(), py::arg("k"));

  // ---- Model ----
  py::class_<train::Model>(m, "Model")
      .def(
          py::init([](nn::CellPtr network, const py::object& loss_fn, const py::object& optimizer,
                      const py::object& metrics) {
            return std::make_unique<train::Model>(
                std::move(network), loss_fn.is_none() ? nullptr : loss_fn.cast<nn::CellPtr>(),
                optimizer.is_none() ? nullptr : optimizer.cast<std::shared_ptr<optim::Optimizer>>(),
                metrics_of(metrics));
          }),
          py::arg("network"), py::arg("loss_fn") = py::none(), py::arg("optimizer") = py::none(),
          py::arg("metrics") = py::none(), py::keep_alive<1, 2>(), py::keep_alive<1, 3>())
      .def(
          "train",
          [](train::Model& model, int64_t epoch, const dataset::DatasetPtr& data,
             const py::object& callbacks, bool sink) {
            const auto cbs = callbacks_of(callbacks);
            py::gil_scoped_release release;
            model.train(epoch, data, cbs, sink);
          },
          py::arg("epoch"), py::arg("train_dataset"), py::arg("callbacks") = py::none(),
          py::arg("dataset_sink_mode") = false)
      .def(
          "eval",
          [](train::Model& model, const dataset::DatasetPtr& data, bool sink) {
            train::EvalResult r;
            {
              py::gil_scoped_release release;
              r = model.eval(data, sink);
            }
            py::dict d;
            for (const auto& [name, value] : r) d[py::str(name)] = value;
            return d;
          },
          py::arg("valid_dataset"), py::arg("dataset_sink_mode") = false)
      .def("predict",
           [](train::Model& model, const py::handle& data) {
             const Tensor x = to_tensor(data);
             py::gil_scoped_release release;
             return model.predict(x);
           })
      .def("save_train_state", &train::Model::save_train_state)
      .def("load_train_state", &train::Model::load_train_state)
      .def("load_distributed_checkpoint", &train::Model::load_distributed_checkpoint,
           py::arg("directory"), py::arg("strategy_file"), py::arg("prefix") = "")
      .def(
          "build",
          [](train::Model& model, const dataset::DatasetPtr& data) {
            py::gil_scoped_release release;
            model.build(data);
          },
          py::arg("train_dataset"))
      .def_property_readonly("loaded_files", &train::Model::loaded_files)
      .def_property_readonly("train_network", &train::Model::network);

  // ---- serialization ----
  m.def(
      "save_checkpoint",
      [](const py::object& what, const std::string& path) {
        if (py::isinstance<nn::Cell>(what)) {
          train::save_checkpoint(what.cast<nn::Cell&>(), path);
          return;
        }
        train::NamedTensors tensors;
        if (py::isinstance<py::dict>(what)) {
          for (const auto& [k, v] : what.cast<py::dict>()) {
            tensors.emplace_back(k.cast<std::string>(), to_tensor(v));
          }
        } else {
          for (const py::handle& item : what) {
            py::dict d = item.cast<py::dict>();
            tensors.emplace_back(d["name"].cast<std::string>(), to_tensor(d["data"]));
          }
        }
        train::save_checkpoint(tensors, path);
      },
      py::arg("save_obj"), py::arg("ckpt_file_name"));
  m.def(
      "load_checkpoint",
      [](const std::string& path) { return parameter_dict(train::load_checkpoint(path)); },
      py::arg("ckpt_file_name"));
  m.def(
      "load_param_into_net",
      [](nn::Cell& net, const py::dict& params) {
        train::ParamMap map;
        for (const auto& [k, v] : params) map[k.cast<std::string>()] = to_tensor(v);
        return train::load_param_into_net(net, map);
      },
      py::arg("net"), py::arg("parameter_dict"));
}

}  // namespace cleave::python

PYBIND11_MODULE(_cleave, m) {
  namespace py = pybind11;
  using namespace cleave::python;
  m.doc() = "cleave's C++ engine (the package cleave gives it MindSpore's layout)";
  // cleave::Error by kind: bad arguments are ValueErrors, what cleave cannot do now RuntimeErrors,
  // what it does not do NotImplementedErrors; the message is cleave's.
  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const cleave::Error& e) {
      switch (e.kind()) {
        case cleave::ErrorKind::kInvalidArgument:
          PyErr_SetString(PyExc_ValueError, e.what());
          return;
        case cleave::ErrorKind::kUnavailable:
          PyErr_SetString(PyExc_RuntimeError, e.what());
          return;
        case cleave::ErrorKind::kUnimplemented:
          PyErr_SetString(PyExc_NotImplementedError, e.what());
          return;
      }
    }
  });
  m.attr("__version__") = CLEAVE_VERSION;
  m.attr("GRAPH_MODE") = static_cast<int>(cleave::runtime::GRAPH_MODE);
  m.attr("PYNATIVE_MODE") = static_cast<int>(cleave::runtime::PYNATIVE_MODE);
  bind_tensor(m);
  bind_nn(m);
  bind_data(m);
  bind_train(m);
}

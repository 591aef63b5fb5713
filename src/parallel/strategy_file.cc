// Strategy files (NOTE [Strategy file] in cleave/parallel/strategy_file.h).
#include "cleave/parallel/strategy_file.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>

#include "cleave/core/atomic_file.h"
#include "cleave/core/error.h"

namespace cleave::parallel {
namespace {

using nlohmann::json;
constexpr const char* kWhat = "strategy file";

// `v`, field `field` of an entry, as integers: an Error unless it is an array of integers of
// int64 range (nlohmann's get<int64_t> of a number with a fraction or beyond that range is
// undefined behaviour: found by the strategy_file fuzzer).
std::vector<int64_t> integers(const json& v, const char* field) {
  const auto fail = [&] {
    CLEAVE_FAIL("\"{}\" is {}; expected an array of integers", field, v.dump());
  };
  if (!v.is_array()) fail();
  std::vector<int64_t> out;
  for (const json& x : v) {
    if (!x.is_number_integer() || (x.is_number_unsigned() && x.get<uint64_t>() > INT64_MAX)) {
      fail();
    }
    out.push_back(x.get<int64_t>());
  }
  return out;
}

// "tensor_map": for each dimension an array of device axes (Layout checks them).
std::vector<Layout::DimAxes> tensor_map_of(const json& v) {
  CLEAVE_CHECK_ARG(v.is_array(), "\"tensor_map\" is {}; expected an array of arrays of axes",
                   v.dump());
  std::vector<Layout::DimAxes> map;
  for (const json& dim : v) {
    Layout::DimAxes axes;
    for (int64_t a : integers(dim, "tensor_map")) {
      CLEAVE_CHECK_ARG(a >= INT32_MIN && a <= INT32_MAX,
                       "\"tensor_map\" names axis {}; expected a device axis", a);
      axes.push_back(static_cast<int>(a));
    }
    map.push_back(std::move(axes));
  }
  return map;
}

constexpr const char* kFormat = "cleave-strategy";

json layout_json(const Layout& l, const Shape& shape) {
  json map = json::array();
  for (const Layout::DimAxes& axes : l.tensor_map()) map.push_back(axes);
  return {{"dev_matrix", l.device_matrix()},
          {"tensor_map", map},
          {"tensor_shape", shape.dims()},
          {"layout", l.to_string()}};
}

// The strategy of `item` (a JSON array of arrays of positive integers); throws naming `key`.
ir::Strategy strategy_of(const json& item, const std::string& path, const std::string& key) {
  const json* s = item.is_object() && item.contains("parallel_strategy")
                      ? &item.at("parallel_strategy")
                      : nullptr;
  bool ok = s != nullptr && s->is_array();
  ir::Strategy out;
  for (size_t i = 0; ok && i < s->size(); ++i) {
    const json& entry = (*s)[i];
    ok = entry.is_array();
    std::vector<int64_t> splits;
    for (size_t d = 0; ok && d < entry.size(); ++d) {
      ok = entry[d].is_number_integer() && entry[d].get<int64_t>() >= 1;
      if (ok) splits.push_back(entry[d].get<int64_t>());
    }
    out.push_back(std::move(splits));
  }
  CLEAVE_CHECK_ARG(ok,
                   "{} '{}': operator '{}' has no valid \"parallel_strategy\" (expected an array "
                   "with one array of positive splits per input, e.g. [[2, 4], [4, 1]])",
                   kWhat, path, key);
  return out;
}

}  // namespace

std::string strategy_key(const ir::Node& n) {
  return fmt::format("{}/{}-{}", n.scope, n.op->name, n.name);
}

void save_strategy_file(const std::string& path, const ir::Graph& g, const ParallelPlan& plan,
                        const std::map<std::string, Layout>& parameter_layouts) {
  json ops = json::object();
  json params = json::object();
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    const ir::Node& n = g.nodes[i];
    if (n.is_op()) {
      if (plan.ops.empty()) continue;  // DATA_PARALLEL: parameter layouts only
      ops[strategy_key(n)] = {
          {"stage", 0}, {"parallel_strategy", n.strategy}, {"derived", n.strategy_derived}};
    } else if (n.kind == ir::NodeKind::kParameter) {
      const auto given = parameter_layouts.find(n.name);
      if (given != parameter_layouts.end()) {
        params[n.name] = layout_json(given->second, n.outputs[0].shape);
      } else if (i < plan.layouts.size() && !plan.layouts[i].empty()) {
        params[n.name] = layout_json(plan.layouts[i][0], n.outputs[0].shape);
      }
    }
  }
  const json file = {{"format", kFormat},
                     {"version", 1},
                     {"device_num", plan.device_num},
                     {"current_stage", 0},
                     {"parallel_strategy_item", ops},
                     {"parallel_layout_item", params}};
  write_file_atomically(path, file.dump(1) + "\n", kWhat);
}

namespace {

// The file at `path`, checked to be a strategy file of a version this reader knows.
json read_strategy_file(const std::string& path) {
  const std::string text = read_whole_file(path, kWhat);
  json file;
  try {
    file = json::parse(text);
  } catch (const json::exception& e) {
    CLEAVE_FAIL(
        "{} '{}' is not valid JSON ({}); expected a file written by "
        "strategy_ckpt_save_file",
        kWhat, path, e.what());
  }
  // Fields are type-checked before they are read: json::value() of a field of another type
  // throws nlohmann's type_error, not a named error.
  CLEAVE_CHECK_ARG(file.is_object() && file.contains("format") && file["format"].is_string() &&
                       file["format"].get<std::string>() == kFormat,
                   "{} '{}': no \"format\": \"{}\" field; expected a file written by "
                   "strategy_ckpt_save_file",
                   kWhat, path, kFormat);
  const json version = file.value("version", json(0));
  CLEAVE_CHECK_ARG(version.is_number_integer() && version.get<int64_t>() == 1,
                   "{} '{}': version {} is not supported; expected 1", kWhat, path, version.dump());
  return file;
}

}  // namespace

ParameterLayouts load_parameter_layouts(const std::string& path) {
  const json file = read_strategy_file(path);
  ParameterLayouts out;
  const json devices = file.value("device_num", json());
  CLEAVE_CHECK_ARG(devices.is_number_integer() && devices.get<int64_t>() >= 1,
                   "{} '{}': \"device_num\" is missing or not a positive integer", kWhat, path);
  out.device_num = devices.get<int64_t>();
  const json items = file.value("parallel_layout_item", json::object());
  CLEAVE_CHECK_ARG(items.is_object(), "{} '{}': \"parallel_layout_item\" is not an object", kWhat,
                   path);
  for (const auto& [name, item] : items.items()) {
    try {
      const std::vector<int64_t> dev = integers(item.at("dev_matrix"), "dev_matrix");
      const std::vector<Layout::DimAxes> map = tensor_map_of(item.at("tensor_map"));
      const Shape shape(integers(item.at("tensor_shape"), "tensor_shape"));
      Layout layout(dev, map);
      const std::string why = layout.check_shape(shape);
      CLEAVE_CHECK_ARG(why.empty(), "{}", why);
      CLEAVE_CHECK_ARG(layout.num_devices() == out.device_num,
                       "its device matrix has {} devices, the file's device_num is {}",
                       layout.num_devices(), out.device_num);
      out.layouts.emplace(name, std::make_pair(std::move(layout), shape));
    } catch (const json::exception& e) {
      CLEAVE_FAIL(
          "{} '{}': parameter '{}' has no valid layout ({}); expected \"dev_matrix\", "
          "\"tensor_map\" and \"tensor_shape\"",
          kWhat, path, name, e.what());
    } catch (const Error& e) {
      CLEAVE_FAIL("{} '{}': parameter '{}' has an invalid layout: {}", kWhat, path, name, e.what());
    }
  }
  return out;
}

int load_strategy_file(const std::string& path, ir::Graph& g, int64_t device_num) {
  const json file = read_strategy_file(path);
  const json saved = file.value("device_num", json(0));
  CLEAVE_CHECK_ARG(saved.is_number_integer(),
                   "{} '{}': \"device_num\" is {}; expected a positive integer", kWhat, path,
                   saved.dump());
  const int64_t saved_devices = saved.get<int64_t>();
  CLEAVE_CHECK_ARG(saved_devices == device_num,
                   "{} '{}' was saved for device_num {}, but this job has {} devices; a strategy "
                   "only fits the device count it was planned for",
                   kWhat, path, saved_devices, device_num);
  const json items = file.value("parallel_strategy_item", json::object());
  CLEAVE_CHECK_ARG(items.is_object(), "{} '{}': \"parallel_strategy_item\" is not an object", kWhat,
                   path);
  int matched = 0;
  for (ir::Node& n : g.nodes) {
    if (!n.is_op()) continue;
    const std::string key = strategy_key(n);
    if (!items.contains(key)) continue;
    const json& item = items.at(key);
    n.strategy = strategy_of(item, path, key);  // checks that `item` is an object
    const json derived = item.value("derived", json(false));
    CLEAVE_CHECK_ARG(derived.is_boolean(),
                     "{} '{}': operator '{}' has \"derived\": {}; expected true or false", kWhat,
                     path, key, derived.dump());
    n.strategy_derived = derived.get<bool>();
    ++matched;
  }
  CLEAVE_CHECK_ARG(matched > 0 || items.empty(),
                   "{} '{}' names {} operators, none of them in graph '{}' (e.g. '{}'); it was "
                   "saved for another network",
                   kWhat, path, items.size(), g.name, items.begin().key());
  return matched;
}

}  // namespace cleave::parallel

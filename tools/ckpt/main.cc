// cleave-ckpt: shows what a checkpoint (.ckpt or .safetensors) holds.
//
//   cleave-ckpt FILE                 one line per tensor: "<name> <dtype> (<shape>)", by name
//   cleave-ckpt FILE --values NAME   the values of tensor NAME, one per line, row-major (%.9g,
//                                    enough digits to read a float32 back exactly)
//   cleave-ckpt FILE --metadata      the safetensors "__metadata__", "key: value" per line
//
// With a sharded job (SEMI_AUTO_PARALLEL or AUTO_PARALLEL) each rank's checkpoint holds that
// rank's slices: the shapes listed are the slice shapes (NOTE [Sharded parameters] in
// cleave/runtime/sharded_parameters.h).
//
// Exit status 0 on success, 1 when the file cannot be read or has no tensor NAME, 2 on bad usage.
#include <fmt/core.h>

#include <CLI/CLI.hpp>
#include <cstdio>
#include <string>

#include "cleave/core/error.h"
#include "cleave/flags.h"
#include "cleave/ops/elementwise.h"
#include "cleave/train/checkpoint.h"

namespace {

using namespace cleave;

void print_values(const Tensor& t) {
  const Tensor d = ops::cast(t, DType::kFloat64);
  for (double v : d.to_vector<double>()) std::printf("%.9g\n", v);
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Shows the tensors of a checkpoint (.ckpt or .safetensors)."};
  cleave::flags::setup(app);
  std::string path, values;
  bool metadata = false;
  app.add_option("file", path, "the checkpoint")->required();
  app.add_option("--values", values, "print the values of this tensor, one per line");
  app.add_flag("--metadata", metadata, "print the safetensors metadata");
  if (auto status = cleave::flags::parse(app, argc, argv)) return *status;
  try {
    if (metadata) {
      for (const auto& [key, value] : train::load_checkpoint_metadata(path)) {
        std::printf("%s: %s\n", key.c_str(), value.c_str());
      }
      return 0;
    }
    const train::ParamMap params = train::load_checkpoint(path);
    if (!values.empty()) {
      auto it = params.find(values);
      if (it == params.end()) {
        std::string names;
        for (const auto& [name, t] : params) names += (names.empty() ? "" : ", ") + name;
        std::fprintf(stderr, "cleave-ckpt: %s has no tensor '%s'; it has: %s\n", path.c_str(),
                     values.c_str(), names.empty() ? "(none)" : names.c_str());
        return 1;
      }
      print_values(it->second);
      return 0;
    }
    for (const auto& [name, t] : params) {
      fmt::print("{} {} {}\n", name, dtype_name(t.dtype()), t.shape().to_string());
    }
  } catch (const Error& e) {
    std::fprintf(stderr, "cleave-ckpt: %s\n", e.what());
    return 1;
  }
  return 0;
}

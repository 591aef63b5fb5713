// Named layouts (NOTE [Named layouts] in cleave/ir/graph.h): their checks and text form.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cctype>

#include "cleave/core/error.h"
#include "cleave/ir/graph.h"

namespace cleave::ir {
namespace {

bool identifier(const std::string& name) {
  return !name.empty() && std::isdigit(static_cast<unsigned char>(name[0])) == 0 &&
         std::all_of(name.begin(), name.end(), [](char c) {
           return std::isalnum(static_cast<unsigned char>(c)) != 0 || c == '_';
         });
}

void check_aliases(const std::vector<int64_t>& dev, const std::vector<std::string>& alias) {
  CLEAVE_CHECK_ARG(!dev.empty(), "Layout: the device matrix is empty; expected one size per axis");
  CLEAVE_CHECK_ARG(dev.size() == alias.size(),
                   "Layout: device matrix ({}) has {} axes but {} names are given ({}); expected "
                   "one name per axis",
                   fmt::join(dev, ", "), dev.size(), alias.size(), fmt::join(alias, ", "));
  for (size_t a = 0; a < dev.size(); ++a) {
    CLEAVE_CHECK_ARG(dev[a] >= 1, "Layout: device axis '{}' has size {}; expected >= 1", alias[a],
                     dev[a]);
    CLEAVE_CHECK_ARG(identifier(alias[a]) && alias[a] != "None",
                     "Layout: axis {} is named \"{}\"; expected an identifier other than \"None\"",
                     a, alias[a]);
    for (size_t b = 0; b < a; ++b) {
      CLEAVE_CHECK_ARG(alias[a] != alias[b], "Layout: the name '{}' is given to axes {} and {}",
                       alias[a], b, a);
    }
  }
}

}  // namespace

TensorLayout::TensorLayout(std::vector<int64_t> device_matrix_, std::vector<std::string> alias_,
                           std::vector<std::vector<std::string>> map_)
    : device_matrix(std::move(device_matrix_)), alias(std::move(alias_)) {
  check_aliases(device_matrix, alias);
  std::vector<std::string> used;
  for (std::vector<std::string>& dim : map_) {
    std::erase(dim, std::string("None"));
    for (const std::string& name : dim) {
      CLEAVE_CHECK_ARG(std::find(alias.begin(), alias.end(), name) != alias.end(),
                       "Layout: '{}' is not an axis of the device matrix; expected one of {} or "
                       "\"None\"",
                       name, fmt::join(alias, ", "));
      CLEAVE_CHECK_ARG(std::find(used.begin(), used.end(), name) == used.end(),
                       "Layout: axis '{}' appears twice in one tensor's layout; a device axis "
                       "splits at most one dimension",
                       name);
      used.push_back(name);
    }
  }
  map = std::move(map_);
}

std::vector<int64_t> TensorLayout::splits() const {
  std::vector<int64_t> out;
  for (const std::vector<std::string>& dim : map) {
    int64_t n = 1;
    for (const std::string& name : dim) {
      const auto a = std::find(alias.begin(), alias.end(), name) - alias.begin();
      n *= device_matrix[static_cast<size_t>(a)];
    }
    out.push_back(n);
  }
  return out;
}

std::string TensorLayout::to_string() const {
  std::vector<std::string> dims;
  for (const std::vector<std::string>& dim : map) {
    if (dim.empty()) {
      dims.emplace_back("None");
    } else if (dim.size() == 1) {
      dims.push_back(dim[0]);
    } else {
      dims.push_back(fmt::format("({})", fmt::join(dim, ", ")));
    }
  }
  return fmt::format("layout(dev=({}), alias=({}), map=({}))", fmt::join(device_matrix, ", "),
                     fmt::join(alias, ", "), fmt::join(dims, ", "));
}

Layout::Layout(std::vector<int64_t> device_matrix, std::vector<std::string> alias_name)
    : dev_(std::move(device_matrix)), alias_(std::move(alias_name)) {
  check_aliases(dev_, alias_);
}

TensorLayout Layout::make(std::vector<Dim> dims) const {
  std::vector<std::vector<std::string>> map;
  for (Dim& d : dims) map.push_back(std::move(d.names));
  return TensorLayout(dev_, alias_, std::move(map));
}

}  // namespace cleave::ir

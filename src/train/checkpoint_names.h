// The names ModelCheckpoint gives its files, read back. Internal to the train layer.
#pragma once

#include <charconv>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace cleave::train {

struct SavedName {
  std::string prefix;
  int64_t epoch = 0, step = 0;
  std::string format;  // "ckpt" or "safetensors"
};

// `name` as "<prefix>-<epoch>_<step>.<ckpt|safetensors>" (the prefix non-empty, the numbers
// decimal); nullopt for any other name. Parsed by hand rather than with std::regex: ranks as
// threads list folders at once, and building std::regex objects concurrently races in
// libstdc++'s ctype cache (ThreadSanitizer saw it in CheckpointSet.*, 2026-11-28).
inline std::optional<SavedName> parse_saved_name(std::string_view name) {
  const size_t dot = name.rfind('.');
  if (dot == std::string_view::npos) return std::nullopt;
  SavedName out{.format = std::string(name.substr(dot + 1))};
  if (out.format != "ckpt" && out.format != "safetensors") return std::nullopt;
  const size_t under = name.rfind('_', dot);
  const size_t dash = under == std::string_view::npos ? under : name.rfind('-', under);
  if (dash == std::string_view::npos || dash == 0) return std::nullopt;
  auto number = [&](size_t from, size_t to, int64_t& value) {
    if (to <= from) return false;
    for (size_t k = from; k < to; ++k) {
      if (name[k] < '0' || name[k] > '9') return false;
    }
    return std::from_chars(name.data() + from, name.data() + to, value).ec == std::errc();
  };
  if (!number(dash + 1, under, out.epoch) || !number(under + 1, dot, out.step)) return std::nullopt;
  out.prefix = std::string(name.substr(0, dash));
  return out;
}

}  // namespace cleave::train

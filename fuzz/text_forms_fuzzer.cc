// The small text forms: ir::parse_strategy ("((2, 4), (4, 1))") and Layout::parse
// ("layout(dev=[2, 4], map=(0, -1), partial=(1))"). Any text gives a value or a cleave::Error,
// and a value's text form reads back as the same value.
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "cleave/core/error.h"
#include "cleave/ir/graph.h"
#include "cleave/ir/parse.h"
#include "cleave/parallel/layout.h"
#include "fuzz_util.h"

using cleave::fuzz::fail;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  std::optional<cleave::ir::Strategy> strategy;
  try {
    strategy = cleave::ir::parse_strategy(text);
  } catch (const cleave::Error&) {
  }
  if (strategy) {
    const std::string again = cleave::ir::strategy_to_string(*strategy);
    try {
      if (cleave::ir::parse_strategy(again) != *strategy)
        fail("parse_strategy differs for " + again);
    } catch (const cleave::Error& e) {
      fail("strategy_to_string's " + again + " does not parse: " + e.what());
    }
  }
  std::optional<cleave::parallel::Layout> layout;
  try {
    layout = cleave::parallel::Layout::parse(text);
  } catch (const cleave::Error&) {
  }
  if (layout) {
    const std::string again = layout->to_string();
    try {
      if (!(cleave::parallel::Layout::parse(again) == *layout))
        fail("Layout::parse differs for " + again);
    } catch (const cleave::Error& e) {
      fail("Layout::to_string's " + again + " does not parse: " + e.what());
    }
  }
  return 0;
}

// The IR text parser (ir::parse_text): any text gives a verified graph or a cleave::Error. A graph
// that parses is dumped again, and the dump must parse (dump_text's output is IR text).
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "cleave/core/error.h"
#include "cleave/ir/dump.h"
#include "cleave/ir/parse.h"
#include "fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  cleave::ir::ParsedGraph parsed;
  try {
    parsed = cleave::ir::parse_text(text, "fuzz");
  } catch (const cleave::Error&) {
    return 0;
  }
  const std::string dump = cleave::ir::dump_text(parsed.graph, parsed.notes);
  try {
    cleave::ir::parse_text(dump, "dump");
  } catch (const cleave::Error& e) {
    cleave::fuzz::fail(std::string("the dump of a parsed graph does not parse: ") + e.what() +
                       "\n--- dump:\n" + dump);
  }
  return 0;
}

// Reading the IR text form (cleave/ir/dump.h) back into a graph: the inverse of ir::dump_text.
//
// NOTE [IR text]
// One parser reads every dump the compiler writes (NN_<stage>.ir), so passes can be tested text
// in, text out, and tools read dumps without regular expressions. The text is line-based: a
// header, a line per input, parameter and constant, and inside `subgraph` one op per node with its
// attributes, strategy, placement, types and scope (the grammar: docs/design/graph.md, "The IR
// text"). Values are named as ir::value_name names them: "%12", "%12[1]", "%para3_fc1.weight",
// "%const7". An attribute value is true/false, a dtype name, an integer, a double (always with a
// point or an exponent: 0.0), a tuple of integers "(1, 2)", or else a bare string. A constant's
// values may follow "=": one number for every element, or a list "[1, 2, 3]" of them all; without
// it the constant holds zeros, as parameters and inputs do (a floating parameter requires a
// gradient: the text does not record which are trainable). Node indices follow the numbers in the
// text when they number every node once (every dump of the compiler does, so
// dump_text(parse_text(t)) == t); hand-written text may number freely, and its nodes are then
// placed inputs, parameters and constants first, ops after, in text order.
#pragma once

#include <filesystem>
#include <string>
#include <string_view>

#include "cleave/ir/dump.h"
#include "cleave/ir/graph.h"

namespace cleave::ir {

struct ParsedGraph {
  Graph graph;
  NodeNotes notes;  // the "# ..." lines after each node (dump_text's notes), by node
};

// The graph written in `text` (NOTE [IR text]), verified (ir::verify). `source` names the text in
// errors. Throws Error "<source>:<line>:<column>: expected ..., got ..." for text that is not a
// dump, and naming the op and line for an unknown primitive, a value used before it is defined,
// or an op whose recorded types are not what its inference gives.
ParsedGraph parse_text(std::string_view text, std::string_view source = "<text>");
// The same for a file; throws Error naming the path when it cannot be read.
ParsedGraph parse_file(const std::filesystem::path& path);

// The strategy written in `text`, the form strategy_to_string writes: "((2, 4), (4, 1))".
Strategy parse_strategy(std::string_view text);

}  // namespace cleave::ir

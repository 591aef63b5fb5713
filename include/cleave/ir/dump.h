// IR dumps: the text form of a graph (one line per node, seed 003's style) and Graphviz.
#pragma once

#include <string>
#include <vector>

#include "cleave/ir/graph.h"

namespace cleave::ir {

// Per-node extra lines (e.g. the memory plan's buffer of each op), indexed by node; may be empty.
using NodeNotes = std::vector<std::string>;

// The text form:
//   # IR entry: @train_step
//   # Total params: 10
//   %para1_data: <Tensor[Float32], (16, 32)>
//   ...
//   subgraph @train_step(%para1_data, ...) {
//     %12(out) = MatMul(%10, %para3_w1) {instance name: fc1.matmul} primitive_attrs: {...}
//         : (<Tensor[Float32], (16, 32)>, <Tensor[Float32], (32, 16)>) -> (<Tensor[Float32], (16,
//         16)>) # scope: (Default/network-WithLossCell/_backbone-Net)
//     return(%20)
//   }
std::string dump_text(const Graph& graph, const NodeNotes& notes = {});
// A Graphviz digraph: one box per op, one ellipse per input/parameter/constant.
std::string dump_dot(const Graph& graph);
// "<Tensor[Float32], (16, 32)>".
std::string meta_to_string(const TensorMeta& meta);
// `s` inside a Graphviz double-quoted string: '"' and '\\' escaped.
std::string dot_escape(const std::string& s);

}  // namespace cleave::ir

// The execution context (MindSpore's set_context): GRAPH_MODE or PYNATIVE_MODE, IR dumps.
#pragma once

#include <string>

namespace cleave::runtime {

// GRAPH_MODE (the default, as in the seeds) traces a training step into a graph, compiles it once
// per input signature and executes the compiled graph; PYNATIVE_MODE runs each op at once.
enum Mode { GRAPH_MODE = 0, PYNATIVE_MODE = 1 };

struct Context {
  Mode mode = GRAPH_MODE;
  // >= 1: write the graph after each compiler stage as NN_<stage>.ir and NN_<stage>.dot under
  // save_graphs_path/<graph name>/ (NOTE [Compile pipeline] in cleave/runtime/compile.h).
  int save_graphs = 0;
  std::string save_graphs_path = ".";
};

// Replaces the process-wide context. save_graphs must be >= 0.
void set_context(const Context& context);
const Context& get_context();

}  // namespace cleave::runtime

#include "cleave/runtime/context.h"

#include "cleave/core/error.h"

namespace cleave::runtime {
namespace {
Context& global_context() {
  static Context context;
  return context;
}
}  // namespace

void set_context(const Context& context) {
  CLEAVE_CHECK_ARG(context.mode == GRAPH_MODE || context.mode == PYNATIVE_MODE,
                   "set_context: mode is {}; expected GRAPH_MODE or PYNATIVE_MODE",
                   static_cast<int>(context.mode));
  CLEAVE_CHECK_ARG(context.save_graphs >= 0, "set_context: save_graphs is {}; expected >= 0",
                   context.save_graphs);
  global_context() = context;
}

const Context& get_context() { return global_context(); }

}  // namespace cleave::runtime

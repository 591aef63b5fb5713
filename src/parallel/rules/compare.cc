// Comparisons (Equal, NotEqual, Greater, GreaterEqual, Less, LessEqual), logic (LogicalAnd,
// LogicalOr, LogicalNot) and Select: elementwise with NumPy broadcasting.
#include "parallel/rules/rules.h"

namespace cleave::parallel::rules {

void register_compare() {
  add({"Equal", "NotEqual", "Greater", "GreaterEqual", "Less", "LessEqual", "LogicalAnd",
       "LogicalOr", "LogicalNot", "Select"},
      broadcast_rule());
}

}  // namespace cleave::parallel::rules

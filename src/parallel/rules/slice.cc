#include "parallel/rules/rules.h"

namespace cleave::parallel::rules {

void register_slice(RuleMap& rules) { (void)rules; }

}  // namespace cleave::parallel::rules

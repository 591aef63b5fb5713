#include "parallel/rules/rules.h"

namespace cleave::parallel::rules {

void register_norm(RuleMap& rules) { (void)rules; }

}  // namespace cleave::parallel::rules

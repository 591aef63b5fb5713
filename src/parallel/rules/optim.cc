#include "parallel/rules/rules.h"

namespace cleave::parallel::rules {

void register_optim(RuleMap& rules) { (void)rules; }

}  // namespace cleave::parallel::rules

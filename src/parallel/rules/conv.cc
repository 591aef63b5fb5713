#include "parallel/rules/rules.h"

namespace cleave::parallel::rules {

void register_conv(RuleMap& rules) { (void)rules; }

}  // namespace cleave::parallel::rules

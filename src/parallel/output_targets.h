// The redistributions that move an op's outputs to its output targets (NOTE [Output targets] in
// src/parallel/named_layouts.cc).
#pragma once

#include <vector>

#include "cleave/parallel/redistribution.h"
#include "cleave/parallel/sharding_rule.h"

namespace cleave::parallel {

// For each output of `sharding` (out_targets set) that the op does not already produce as its
// target: the redistribution the rewrite runs to move it there (a ReduceScatter where the target
// splits a pending sum). Empty without out_targets.
std::vector<const RedistributionCost*> output_target_moves(const RuleContext& ctx,
                                                           const OpSharding& sharding);

}  // namespace cleave::parallel

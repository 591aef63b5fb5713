// The dtype a tensor is moved and costed in by the redistribution planner.
#pragma once

#include "cleave/core/dtype.h"

namespace cleave::parallel {

// No collective carries booleans: a Bool tensor moves as Int32 (its values are 0 and 1; the
// rewrite casts it: redistribute in step_parallel.cc), every other dtype as itself. Plans and
// their costs are made for this dtype.
inline DType planned_dtype(DType dtype) { return dtype == DType::kBool ? DType::kInt32 : dtype; }

}  // namespace cleave::parallel

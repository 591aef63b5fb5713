// Optimizer update primitives: they write the parameter and its state in place.
#include "op_helpers.h"

namespace cleave::ir {

void register_optim_ops(Registry& r) { (void)r; }

}  // namespace cleave::ir

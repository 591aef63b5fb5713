// Conv2D, MaxPool2D, AvgPool2D and their backward primitives.
#include "cleave/ops/nn.h"
#include "op_helpers.h"

namespace cleave::ir {

void register_conv_ops(Registry& r) { (void)r; }

}  // namespace cleave::ir

// Neural-network primitives: MatMul, BatchMatMul, BiasAdd, Softmax, LogSoftmax, losses, Dropout.
// Convolution and pooling live in conv.cc, normalisations in norm.cc, resizing in resize.cc.
#include "cleave/ops/nn.h"

#include "op_helpers.h"

namespace cleave::ir {

void register_nn_ops(Registry& r) { (void)r; }

}  // namespace cleave::ir

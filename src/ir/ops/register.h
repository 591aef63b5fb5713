// Registration of the built-in primitives, one function per op family (one file each).
#pragma once

#include "cleave/ir/registry.h"

namespace cleave::ir {

void register_elementwise_ops(Registry& registry);  // elementwise.cc: unary math, arithmetic
void register_compare_ops(Registry& registry);      // compare.cc: comparisons, logic, Select
void register_reduce_ops(Registry& registry);       // reduce.cc
void register_shape_ops(Registry& registry);        // shape.cc: reshape, transpose, tile, ...
void register_slice_ops(Registry& registry);        // slice.cc: concat, split, (strided) slice
void register_index_ops(Registry& registry);        // index.cc: gather, one-hot, segment sum
void register_nn_ops(Registry& registry);           // nn.cc: matmul, bias, softmax, dropout
void register_loss_ops(Registry& registry);         // loss.cc: cross entropy, MSE
void register_conv_ops(Registry& registry);         // conv.cc: convolution and pooling
void register_norm_ops(Registry& registry);         // norm.cc: batch and layer norm
void register_resize_ops(Registry& registry);       // resize.cc: bilinear and nearest
void register_optim_ops(Registry& registry);        // optim.cc: in-place optimizer updates
void register_comm_ops(Registry& registry);         // comm.cc: collectives, send/recv (no kernel)

inline void register_builtin_ops(Registry& registry) {
  registry.add_family("elementwise", register_elementwise_ops);
  registry.add_family("compare", register_compare_ops);
  registry.add_family("reduce", register_reduce_ops);
  registry.add_family("shape", register_shape_ops);
  registry.add_family("slice", register_slice_ops);
  registry.add_family("index", register_index_ops);
  registry.add_family("nn", register_nn_ops);
  registry.add_family("loss", register_loss_ops);
  registry.add_family("conv", register_conv_ops);
  registry.add_family("norm", register_norm_ops);
  registry.add_family("resize", register_resize_ops);
  registry.add_family("optim", register_optim_ops);
  registry.add_family("comm", register_comm_ops);
}

}  // namespace cleave::ir

// Registration of the built-in primitives, one function per op family, each defined in
// src/ir/ops/<family>.cc (NOTE [One primitive, one registry entry] in cleave/ir/op_def.h: the
// family names the op's file in every layer).
#pragma once

#include "cleave/ir/registry.h"

namespace cleave::ir {

void register_elementwise_ops(Registry& registry);  // unary math, arithmetic, Cast, Fill
void register_compare_ops(Registry& registry);      // comparisons, logic, Select
void register_matmul_ops(Registry& registry);       // MatMul, BatchMatMul, BiasAdd
void register_softmax_ops(Registry& registry);      // Softmax, LogSoftmax and their gradients
void register_dropout_ops(Registry& registry);      // Dropout
void register_reduce_ops(Registry& registry);       // Reduce*, ArgMax, ArgMin
void register_shape_ops(Registry& registry);        // reshape, transpose, tile, ...
void register_slice_ops(Registry& registry);        // concat, split, (strided) slice
void register_index_ops(Registry& registry);        // gather, one-hot, segment sum
void register_loss_ops(Registry& registry);         // cross entropy, MSE
void register_conv_ops(Registry& registry);         // Conv2D and its backward primitives
void register_pool_ops(Registry& registry);         // max and average pooling
void register_norm_ops(Registry& registry);         // batch and layer norm
void register_resize_ops(Registry& registry);       // bilinear and nearest
void register_optim_ops(Registry& registry);        // in-place optimizer updates
void register_comm_ops(Registry& registry);         // collectives, send/recv (no kernel)

inline void register_builtin_ops(Registry& registry) {
  registry.add_family("elementwise", register_elementwise_ops);
  registry.add_family("compare", register_compare_ops);
  registry.add_family("matmul", register_matmul_ops);
  registry.add_family("softmax", register_softmax_ops);
  registry.add_family("dropout", register_dropout_ops);
  registry.add_family("reduce", register_reduce_ops);
  registry.add_family("shape", register_shape_ops);
  registry.add_family("slice", register_slice_ops);
  registry.add_family("index", register_index_ops);
  registry.add_family("loss", register_loss_ops);
  registry.add_family("conv", register_conv_ops);
  registry.add_family("pool", register_pool_ops);
  registry.add_family("norm", register_norm_ops);
  registry.add_family("resize", register_resize_ops);
  registry.add_family("optim", register_optim_ops);
  registry.add_family("comm", register_comm_ops);
}

}  // namespace cleave::ir

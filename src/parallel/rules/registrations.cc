// The parallel layer's part of every built-in primitive's registry entry, attached while the
// program starts (NOTE [One primitive, one registry entry] in cleave/ir/op_def.h): the sharding
// rules of src/parallel/rules/<family>.cc, each with its cost (ShardingRule::flops,
// compute_class).
//
// NOTE [Registrations survive static linking]
// A static library's object file is linked into a program only when the program uses one of its
// symbols, and nothing calls a registrar: this file would be left out of every program that
// links libcleave_parallel.a, and the entries would have no rules. Every program that links the
// layer names its anchor, cleave_parallel_registrations_anchor, as undefined
// (-Wl,--undefined=..., in the link interface of the CMake target and in cleave.pc), which makes
// the linker take this file; its initialiser then calls each family's registration, which pulls
// in the family files. The runtime's registrations (src/runtime/registrations.cc) do the same.
#include "parallel/rules/rules.h"

extern "C" {
// Named by the link interface of cleave_parallel; its value is never read.
extern const char cleave_parallel_registrations_anchor;
const char cleave_parallel_registrations_anchor = 0;
}

namespace cleave::parallel::rules {
namespace {

const bool g_registered = [] {
  register_family("elementwise", register_elementwise);
  register_family("compare", register_compare);
  register_family("matmul", register_matmul);
  register_family("softmax", register_softmax);
  register_family("dropout", register_dropout);
  register_family("reduce", register_reduce);
  register_family("shape", register_shape);
  register_family("slice", register_slice);
  register_family("index", register_index);
  register_family("loss", register_loss);
  register_family("conv", register_conv);
  register_family("pool", register_pool);
  register_family("norm", register_norm);
  register_family("resize", register_resize);
  register_family("optim", register_optim);
  register_family("comm", register_comm);
  return true;
}();

}  // namespace
}  // namespace cleave::parallel::rules

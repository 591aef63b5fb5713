// The runtime layer's part of the communication primitives' registry entries, attached while the
// program starts (NOTE [One primitive, one registry entry] in cleave/ir/op_def.h): their CPU and
// asynchronous kernels, which talk to process groups. Linked into every program that links the
// runtime by its anchor (NOTE [Registrations survive static linking] in
// src/parallel/rules/registrations.cc).
#include "cleave/ir/registry.h"
#include "runtime/collective_attrs.h"

extern "C" {
// Named by the link interface of cleave_runtime; its value is never read.
extern const char cleave_runtime_registrations_anchor;
const char cleave_runtime_registrations_anchor = 0;
}

namespace cleave::runtime {
namespace {

const bool g_registered = [] {
  ir::Registry& r = ir::Registry::global();
  register_collective_kernels(r);
  register_neighbor_exchange_v2_kernels(r);
  register_rpc_kernels(r);
  return true;
}();

}  // namespace
}  // namespace cleave::runtime

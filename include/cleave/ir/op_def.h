// OpDef: everything cleave knows about one primitive, in one registry entry.
//
// NOTE [One primitive, one registry entry]
// An operator is defined once, by an OpDef holding
//   - its name ("MatMul"), arity and family ("matmul": the name of the file that holds its part in
//     every layer that has one; docs/design/adding_an_operator.md lists the files),
//   - `infer`: output shapes and dtypes from input metas and attributes, with the bad-input
//     errors (the op's whole contract on its inputs lives here),
//   - its kernels per device, `cpu_kernel` (and `async_kernel`) and `cuda_kernel`: compute
//     preallocated outputs from inputs,
//   - `grad`: the gradient rule, written in primitives (cleave::ops calls), so that PyNative mode
//     (on concrete tensors) and graph-mode autodiff (on traced ones) run one definition,
//   - `sharding_rule`: valid strategies, layouts, local computation and cost (sharding_rule.h).
// The ir layer fills what it sees; a higher layer attaches its part during static initialisation
// (parallel the sharding rules, the runtime the communication kernels: Registry::attach_*), and
// attaching to an unknown op or twice aborts at start-up; no layer keeps its own table by op name.
//
// NOTE [Parts absent on purpose]
// A part may be missing for a reason: a comparison has no gradient, no primitive has a CUDA
// kernel before the CUDA backend exists. The entry then says why in the part's `no_*` field
// ("none, because ..."), and tests/ir/primitive_entries_test.cc fails for any part that is
// neither present nor explained, naming the op and the part, so a forgotten part cannot pass
// as an intended one.
#pragma once

#include <algorithm>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "cleave/core/shape.h"
#include "cleave/core/tensor.h"
#include "cleave/ir/attrs.h"

namespace cleave::parallel {
class ShardingRule;  // cleave/parallel/sharding_rule.h: attached by the parallel layer
}

namespace cleave::ir {

struct TensorMeta {
  Shape shape;
  DType dtype = DType::kFloat32;
};

struct OpDef;

struct InferContext {
  const OpDef& op;
  const Attrs& attrs;
  std::span<const TensorMeta> inputs;
};

struct KernelContext {
  const OpDef& op;
  const Attrs& attrs;
  std::span<const Tensor> inputs;
  std::span<const Tensor> outputs;  // allocated with the inferred metas; the kernel fills them
};

struct GradContext {
  const OpDef& op;
  const Attrs& attrs;
  std::span<const Tensor> inputs;        // the forward inputs (no autograd history)
  std::span<const Tensor> outputs;       // the forward outputs (no autograd history)
  std::span<const Tensor> output_grads;  // one per output; undefined where none flowed back
  std::vector<bool> needs_input_grad;    // one per input; rules may skip the others
};

using InferFn = std::function<std::vector<TensorMeta>(const InferContext&)>;
using KernelFn = std::function<void(const KernelContext&)>;
// Starts the op and returns a function that waits for it to finish (and completes its outputs):
// for ops whose work runs elsewhere, such as a collective on its group's communication thread.
// Until the returned function has run, the inputs must stay unchanged and the outputs unread.
using AsyncKernelFn = std::function<std::function<void()>(const KernelContext&)>;
// Returns one gradient per input; an undefined Tensor where there is none.
using GradFn = std::function<std::vector<Tensor>(const GradContext&)>;

struct OpDef {
  std::string name;
  // Number of inputs; kVariadic accepts any number >= 1.
  int num_inputs = 1;
  static constexpr int kVariadic = -1;
  // Set by Registry::add_family (NOTE [One primitive, one registry entry]).
  std::string family;
  InferFn infer;
  KernelFn cpu_kernel;
  std::string no_cpu_kernel;  // why cpu_kernel is empty (NOTE [Parts absent on purpose])
  // Runs on CUDA tensors, on the device's current stream.
  KernelFn cuda_kernel;
  std::string no_cuda_kernel;
  // Empty for an op that has no gradient: backward through it is an error naming the op, and
  // no_grad says why there is none.
  GradFn grad;
  std::string no_grad;
  // Attached by the parallel layer; null (with no_sharding_rule saying why) for an op that
  // cannot be part of a sharded graph.
  std::shared_ptr<const parallel::ShardingRule> sharding_rule;
  std::string no_sharding_rule;
  // Ops that write into an input in place (optimizer updates). Never recorded by autograd.
  bool mutates_inputs = false;
  // With mutates_inputs: the inputs written (the others are only read, like a learning rate that
  // every update shares); empty means every input may be written. Schedulers keep each read of a
  // written tensor on the side of the write it was traced on (NOTE [Updates in bucket order]).
  std::vector<int> mutated_inputs;
  // Whether the op writes into its input k (mutates_inputs and k among mutated_inputs, or those
  // empty).
  bool writes_input(size_t k) const {
    return mutates_inputs &&
           (mutated_inputs.empty() || std::find(mutated_inputs.begin(), mutated_inputs.end(),
                                                static_cast<int>(k)) != mutated_inputs.end());
  }
  // Ops whose single output is input 0's elements under a new shape (Reshape, Squeeze, ...):
  // the output is a view sharing input 0's storage and no kernel runs.
  bool output_is_view = false;
  // Ops that talk to other processes (the collectives and point-to-point ops of
  // cleave/ir/comm_ops.h): side effects that passes never remove, merge or fold, and whose order
  // on each rank is fixed (every rank of a group must run them in the same order).
  bool communicates = false;
  // Ops that draw random numbers (Dropout): never merged or folded.
  bool random = false;
  // Optional: the op started asynchronously (the executor overlaps it with the ops that do not
  // need its outputs). cpu_kernel is still required: eager calls run it.
  AsyncKernelFn async_kernel;
};

// ---- helpers for infer functions: each throws Error naming the op and input ----
void expect_rank(const InferContext& ctx, int input, int64_t rank);
void expect_min_rank(const InferContext& ctx, int input, int64_t min_rank);
void expect_floating(const InferContext& ctx, int input);
void expect_dtype(const InferContext& ctx, int input, std::initializer_list<DType> allowed);
void expect_same_dtype(const InferContext& ctx, int a, int b);

}  // namespace cleave::ir

// shard in PYNATIVE_MODE (MindSpore's ms.shard / Cell.shard): one part of eager code compiled as a
// sharded graph and run on every rank, with its gradients joining the eager tape.
//
// NOTE [Sharded blocks in PyNative]
// A sharded block is a function of tensors (a Cell's construct, or a plain function) with a
// strategy per input and, optionally, a layout per parameter (parameter_plan). Eager around,
// graph inside:
//   - Forward. The first call for an input signature (every input's shape and dtype, the dataset
//     strategy, a Cell's training mode) traces the block into a forward StepProgram and compiles it
//     with the pipeline of GRAPH_MODE (NOTE [Compile pipeline]) under the context's AUTO_PARALLEL
//     with "sharding_propagation": each input is read through a Cast carrying its in_strategy (an
//     absent entry: no Cast, the input is laid out as its first consumer needs), each planned
//     parameter through a Cast carrying its parameter_plan strategy, and propagation spreads
//     those strategies to every other operator of the block (with a `level`, the dynamic
//     programming chooses theirs under that objective instead). An entry may be a named layout
//     (NOTE [Named layouts] in cleave/ir/graph.h). With an out_strategy, the op producing each
//     output gets it as its own out_strategy (NOTE [Output targets] in
//     src/parallel/named_layouts.cc): the output is laid out so where it is computed (a split
//     reduction ends in a ReduceScatter). The block's graph outputs are then replicated (NOTE
//     [Step-parallel rewrite]), so every rank gets the whole output.
//   - Holders. The compiled graph does not bind the block's inputs and parameters themselves:
//     the step-parallel load slices bound tensors in place (NOTE [Sharded parameters]), and the
//     eager code (the optimizer, the layers outside the block, the user) must keep seeing whole
//     tensors. The graph binds holders instead, one per input and per parameter, of the global
//     shape; load() slices the holders, and every call writes this rank's slice of the current
//     value (an eager input, a parameter the optimizer updated) into them before running.
//   - Backward. The block is one op of the eager tape (a GradNode whose op is made for the block)
//     with the block's inputs and parameters as inputs. Its gradient rule runs a second compiled
//     program, compiled at the first backward of the signature: the VJP trick, loss =
//     ReduceSum(block(x) * dy) with the output gradient dy as a third kind of holder, compiled as
//     a training step, so the pipeline's autodiff on the local graph, its communication gradients
//     and its mirror reduction give each holder's gradient, laid out as the holder; those are
//     gathered into whole tensors (AllGather over the world group) and returned to the tape, so
//     code before the block and every parameter inside it get their single-device gradients.
//     This first version recomputes the block's forward inside the backward graph instead of
//     keeping the forward's activations: the forward and backward programs are independent, each
//     compiled once per signature and cached (num_compiled() counts them).
//   - Layout for the eager code (the context's dataset_strategy, or the deprecated full_batch):
//     "full_batch": every rank passes the whole inputs and gets the whole outputs;
//     "data_parallel": every rank passes its dim-0 slice of each input (the block sees the inputs
//     gathered along dim 0: device_num times the rows) and gets its dim-0 slice of each output.
//     The default is the context's own, "data_parallel" (MindSpore's set_auto_parallel_context
//     default, and the one every GRAPH_MODE step of cleave reads its batches with); the seed's
//     shard tutorial calls "full_batch" its default, so programs written from it set
//     dataset_strategy = "full_batch" explicitly, as the tutorial's function example does. With
//     "data_parallel", a parameter inside the block gets the gradient of every rank's part of
//     the global batch (as a DATA_PARALLEL step's all-reduced gradient), while eager code outside
//     it gets only its own rank's. A dataset_strategy of one strategy per input: every rank
//     passes its slice of each input as that strategy lays it out on the job's devices (the
//     device matrix of its splits, then the replicas), gets the whole outputs, and gets its
//     slice of each input's gradient.
// Requires PYNATIVE_MODE, parallel_mode AUTO_PARALLEL and search_mode "sharding_propagation"
// (checked when the block is made and at each call). A block never runs inside another block's
// trace (nested shard is an Error) nor inside a GRAPH_MODE trace. Every rank of the job must call
// the block (and run its backward) in the same order: each run communicates.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "cleave/core/tensor.h"
#include "cleave/ir/graph.h"

namespace cleave::runtime {

// How one tensor of a block is laid out: how many slices each dimension is split into ({1, 8}),
// or a named layout (layout("dp", "mp"), NOTE [Named layouts] in cleave/ir/graph.h).
struct LayoutEntry {
  std::vector<int64_t> splits;  // a named layout's splits too
  std::optional<ir::TensorLayout> named;

  LayoutEntry(std::vector<int64_t> s) : splits(std::move(s)) {}  // NOLINT: {1, 8} reads as one
  LayoutEntry(std::initializer_list<int64_t> s) : splits(s) {}
  LayoutEntry(ir::TensorLayout l) : splits(l.splits()), named(std::move(l)) {}  // NOLINT
  // "(1, 8)", or the named layout's text.
  std::string to_string() const;
};

// One entry per input of a block: its layout, or std::nullopt for "derive it" (the seed's None).
using InStrategy = std::vector<std::optional<LayoutEntry>>;

struct ShardOptions {
  // The layout each output of the block must have inside the block's graph (NOTE [Sharded blocks
  // in PyNative], out_strategy), one entry per output; std::nullopt: no request. Empty: none.
  std::vector<std::optional<LayoutEntry>> out_strategy;
  // Parameter name -> layout of that parameter. Names are the block's own dotted paths
  // ("dense2.weight") or the path from the cell that registered the block ("block1.dense2.weight");
  // a leading "self." is accepted and stripped. A name that matches no parameter, or a parameter
  // that already has a layout (sharded already, or its first consumer has a shard() strategy), is
  // reported once on stderr and skipped, as in MindSpore.
  std::vector<std::pair<std::string, LayoutEntry>> parameter_plan;
  // Where the block runs: "CPU". "GPU" is an Error until the GPU backend runs sharded blocks.
  std::string device = "CPU";
  // The objective of the search for the operators inside the block: 0 maximise computation over
  // communication, 1 minimise memory, 2 maximise speed (NOTE [Search objectives] in
  // cleave/parallel/search.h). Set, the operators without a strategy get theirs from the dynamic
  // programming under that objective instead of from propagation. Unset: propagation.
  std::optional<int> level;
};

// The block's computation: inputs in, outputs out. Traced (called on symbolic tensors) once per
// compiled program; it must not keep the tensors it is given.
using BlockFn = std::function<std::vector<Tensor>(const std::vector<Tensor>&)>;

struct ShardedBlockSpec {
  std::string name;  // for errors, dumps and the graphs' names ("BasicBlock", "dense_relu")
  BlockFn fn;
  // The parameters the block reads (a Cell's parameters_and_names()), by the block's own names.
  std::vector<std::pair<std::string, Tensor>> parameters;
  // The name under which the block's cell is registered in its parent ("block1"), or empty:
  // parameter_plan may name parameters through it.
  std::string parameter_prefix;
  InStrategy in_strategy;
  ShardOptions options;
  // Optional: more of the cache key, read at each call (a Cell's training mode: Dropout and
  // BatchNorm trace differently in each).
  std::function<std::string()> signature;
};

// A compiled, sharded part of eager code (NOTE [Sharded blocks in PyNative]). Made by
// cleave::shard and Cell::shard.
class ShardedBlock {
 public:
  // Throws Error for a context that cannot run it (not PYNATIVE_MODE, not AUTO_PARALLEL with
  // "sharding_propagation"), a device other than "CPU", a level other than 0, 1 or 2, an empty
  // in_strategy or a null fn.
  explicit ShardedBlock(ShardedBlockSpec spec);
  ~ShardedBlock();
  ShardedBlock(const ShardedBlock&) = delete;
  ShardedBlock& operator=(const ShardedBlock&) = delete;

  // Runs the block on `inputs` (one per in_strategy entry, laid out as the dataset strategy says)
  // and returns its outputs, recorded on the tape when grad mode is on and an input or parameter
  // requires a gradient. Collective: every rank calls it with inputs of the same signature.
  // Throws Error for a wrong number of inputs, an in_strategy that does not fit an input's rank,
  // a call outside PYNATIVE_MODE or inside another block (nested shard), and what compiling the
  // block throws (an invalid strategy, naming the op).
  std::vector<Tensor> operator()(const std::vector<Tensor>& inputs);

  // Programs compiled so far: one forward per input signature, one backward per signature whose
  // gradient was asked for.
  size_t num_compiled() const;
  const std::string& name() const;

  // The block being traced on this thread (while its program is compiled), or null.
  static const ShardedBlock* tracing();

  struct State;

 private:
  std::shared_ptr<State> state_;
};

}  // namespace cleave::runtime

namespace cleave {

using runtime::InStrategy;
using runtime::LayoutEntry;
using runtime::ShardOptions;

// What shard() returns: the block, called with tensors. Copies share the block (and its cache).
class ShardedFunction {
 public:
  explicit ShardedFunction(std::shared_ptr<runtime::ShardedBlock> block)
      : block_(std::move(block)) {}
  // A block with one output: its output.
  template <typename... Ts>
  requires(std::is_convertible_v<const Ts&, const Tensor&>&&...) Tensor operator()(
      const Ts&... inputs) const {
    std::vector<Tensor> out = (*block_)(std::vector<Tensor>{Tensor(inputs)...});
    CLEAVE_CHECK_ARG(out.size() == 1,
                     "shard '{}': the block returned {} outputs; call it with call() to get them "
                     "all",
                     block_->name(), out.size());
    return out[0];
  }
  std::vector<Tensor> call(const std::vector<Tensor>& inputs) const { return (*block_)(inputs); }
  size_t num_compiled() const { return block_->num_compiled(); }
  runtime::ShardedBlock& block() const { return *block_; }

 private:
  std::shared_ptr<runtime::ShardedBlock> block_;
};

namespace detail {

inline std::vector<Tensor> as_outputs(Tensor t) { return {std::move(t)}; }
inline std::vector<Tensor> as_outputs(std::vector<Tensor> t) { return t; }

template <typename F, size_t... I>
constexpr bool invocable_with_n(std::index_sequence<I...>) {
  return std::is_invocable_v<F&, decltype((void(I), std::declval<const Tensor&>()))...>;
}

// The number of tensors F takes (1 to 8), or 0 when it takes a std::vector<Tensor>.
template <typename F>
constexpr size_t tensor_arity() {
  if constexpr (std::is_invocable_v<F&, const std::vector<Tensor>&>) {
    return 0;
  } else {
    size_t n = 9;
    [&]<size_t... K>(std::index_sequence<K...>) {
      ((n == 9 && invocable_with_n<F>(std::make_index_sequence<K + 1>()) ? (n = K + 1) : 0), ...);
    }
    (std::make_index_sequence<8>());
    return n;
  }
}

template <typename F>
concept TensorFunction = tensor_arity<F>()
<= 8;

template <typename F, size_t... I>
std::vector<Tensor> apply_n(F& fn, const std::vector<Tensor>& in, std::index_sequence<I...>) {
  return as_outputs(fn(in[I]...));
}

}  // namespace detail

// shard(fn, in_strategy, options) (MindSpore's ms.shard on a function): fn takes tensors (one per
// in_strategy entry, or a std::vector<Tensor>) and returns a Tensor or a std::vector<Tensor>; it
// must not hold parameters (a Cell's parameters go through the Cell overload, cleave/nn/cell.h).
// Returns the sharded function (NOTE [Sharded blocks in PyNative]). Throws as ShardedBlock's
// constructor does.
template <detail::TensorFunction F>
ShardedFunction shard(F fn, InStrategy in_strategy, ShardOptions options = {},
                      std::string name = "function") {
  constexpr size_t arity = detail::tensor_arity<F>();
  runtime::BlockFn block_fn;
  if constexpr (arity == 0) {
    block_fn = [fn](const std::vector<Tensor>& in) mutable { return detail::as_outputs(fn(in)); };
  } else {
    const size_t given = in_strategy.size();
    CLEAVE_CHECK_ARG(given == arity,
                     "shard '{}': in_strategy has {} entries but the function takes {} tensors; "
                     "give one strategy (or std::nullopt) per input",
                     name, given, arity);
    block_fn = [fn](const std::vector<Tensor>& in) mutable {
      return detail::apply_n(fn, in, std::make_index_sequence<arity>());
    };
  }
  return ShardedFunction(std::make_shared<runtime::ShardedBlock>(
      runtime::ShardedBlockSpec{.name = std::move(name),
                                .fn = std::move(block_fn),
                                .in_strategy = std::move(in_strategy),
                                .options = std::move(options)}));
}

}  // namespace cleave

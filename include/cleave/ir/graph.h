// The graph IR of GRAPH_MODE: one node type, values as (node, output) pairs, nodes in
// topological order.
//
// NOTE [Graph IR]
// A Graph is a list of Nodes in execution (topological) order: a node's inputs refer only to
// nodes before it, so every pass is a loop over the list and the executor runs it front to back.
// A Node is one of
//   - kInput: a value given at each execution (the step's data and label), in Graph::inputs order;
//   - kParameter: a Cell parameter, bound by reference (`value` shares the parameter's storage,
//     so updates of the training step write the real parameter);
//   - kConstant: a tensor met while tracing that is not a parameter, held by reference in
//     `value`: a *literal* when the graph holds the only reference (e.g. the ones that seed
//     backward), else *captured* (optimizer state, the user's tensors: it may change between
//     executions, so only literals are folded);
//   - kOp: a primitive call: op, attributes, inputs, output metas (dtype and global shape), an
//     instance name ("fc1.matmul") and a scope path ("Default/network-WithLossCell/...").
// Ops whose OpDef mutates its inputs (optimizer updates) are side effects: they have no outputs
// and are never removed. Every node carries the annotations of the parallel passes, placement
// and strategy, which the dumps print.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <memory>
#include <string>
#include <vector>

#include "cleave/core/tensor.h"
#include "cleave/ir/attrs.h"
#include "cleave/ir/op_def.h"

namespace cleave::ir {

// Output `output` of node `node` (an index into Graph::nodes).
struct ValueRef {
  int node = -1;
  int output = 0;
  bool operator==(const ValueRef&) const = default;
};

// Where a node runs: a role ("worker", "server", a pipeline stage name...) and a rank id.
// Empty (rank -1, no role) means "not placed".
struct Placement {
  std::string role;
  int64_t rank = -1;
  bool empty() const { return role.empty() && rank < 0; }
  bool operator==(const Placement&) const = default;
};

// A sharding strategy: for each input of an op, how many slices each dimension is split into.
using Strategy = std::vector<std::vector<int64_t>>;
// The canonical text form of a strategy, as the IR dumps and error messages print it:
// "((2, 4), (4, 1))"; "()" for an empty one.
std::string strategy_to_string(const Strategy& strategy);

// A layout with named device axes (MindSpore 2.x's Layout; NOTE [Named layouts]): the device
// matrix, a name per axis, and for each tensor dimension the names of the axes it is split over,
// major first (none: not split). Made by Layout's call operator below; `parallel` turns it into
// its own Layout (cleave/parallel/layout.h), which is where it is checked against an op.
struct TensorLayout {
  std::vector<int64_t> device_matrix;
  std::vector<std::string> alias;
  std::vector<std::vector<std::string>> map;

  TensorLayout() = default;
  // Checks the names: each alias a non-empty identifier other than "None", used once; each name
  // in `map` one of the aliases, used once in the whole map ("None" entries are dropped). Throws
  // Error saying which rule is broken.
  TensorLayout(std::vector<int64_t> device_matrix, std::vector<std::string> alias,
               std::vector<std::vector<std::string>> map);
  bool operator==(const TensorLayout&) const = default;
  // How many slices each dimension is cut into: the strategy entry the layout implies.
  std::vector<int64_t> splits() const;
  // "layout(dev=(2, 2, 2), alias=(dp, sp, mp), map=(dp, (sp, mp), None))".
  std::string to_string() const;
};

// NOTE [Named layouts]
// The device matrix of a job with a name per axis, as MindSpore 2.x writes it:
//   ir::Layout layout({2, 2, 2}, {"dp", "sp", "mp"});
//   matmul.shard({layout("dp", {"sp", "mp"}), layout({"sp", "mp"}, "None")});
// Each argument of the call is one tensor dimension: an axis name, several names in braces (the
// dimension is split over all of them, the first one major), or "None" (not split). Ranks are
// numbered row-major over the device matrix, its last axis fastest, as in NOTE [Layouts]. A
// named layout says exactly which ranks hold which slice, where a strategy tuple says only how
// many slices there are: axes may come in any order, so a consumer can ask for a tensor split
// over the minor axis of its device matrix. One layout per input (and per output for
// out_strategy), all on the same device matrix.
class Layout {
 public:
  // Throws Error for a device axis of size < 1, a size and name count that differ, or a bad name
  // (empty, "None", or used twice).
  Layout(std::vector<int64_t> device_matrix, std::vector<std::string> alias_name);

  // One tensor dimension of a call.
  struct Dim {
    std::vector<std::string> names;
    Dim(const char* name) : names{name} {}             // NOLINT: "dp" reads as a dimension
    Dim(std::string name) : names{std::move(name)} {}  // NOLINT
    Dim(std::initializer_list<std::string> axes) : names(axes) {}
  };
  TensorLayout operator()(Dim d0) const { return make({std::move(d0)}); }
  TensorLayout operator()(Dim d0, Dim d1) const { return make({std::move(d0), std::move(d1)}); }
  TensorLayout operator()(Dim d0, Dim d1, Dim d2) const {
    return make({std::move(d0), std::move(d1), std::move(d2)});
  }
  TensorLayout operator()(Dim d0, Dim d1, Dim d2, Dim d3) const {
    return make({std::move(d0), std::move(d1), std::move(d2), std::move(d3)});
  }
  // Any number of dimensions.
  TensorLayout make(std::vector<Dim> dims) const;

  const std::vector<int64_t>& device_matrix() const { return dev_; }
  const std::vector<std::string>& alias_name() const { return alias_; }

 private:
  std::vector<int64_t> dev_;
  std::vector<std::string> alias_;
};

enum class NodeKind { kInput, kParameter, kConstant, kOp };

struct Node {
  NodeKind kind = NodeKind::kOp;
  const OpDef* op = nullptr;  // kOp only
  Attrs attrs;
  std::vector<ValueRef> inputs;
  std::vector<TensorMeta> outputs;  // one per output; exactly one for non-op nodes
  // Ops: the instance name ("fc1.matmul"); parameters: the dotted path ("fc1.weight");
  // inputs: the argument name ("data").
  std::string name;
  std::string scope;  // "Default/network-WithLossCell/_backbone-LeNet/fc1-Dense"
  Placement placement;
  Strategy strategy;
  // The strategy was derived by the parallel rewrite (a default or a propagated one), not given
  // with shard(); the dumps mark it.
  bool strategy_derived = false;
  // Named layouts of the inputs (Primitive::shard with layouts, or propagation choosing an axis
  // order): one per input, and `strategy` holds their splits. Empty: `strategy` alone.
  std::vector<TensorLayout> in_layouts;
  // The layouts the outputs must have (out_strategy): the rewrite inserts the communication from
  // what the op computes. Either splits per output dimension (on the op's own device matrix) or
  // named layouts; empty: the outputs as computed, pending reductions completed. A block's
  // output producer may get an entry of no dimensions for an output of rank > 0: no request.
  Strategy out_strategy;
  std::vector<TensorLayout> out_layouts;
  Tensor value;          // kParameter and kConstant: the bound tensor (shares storage)
  bool literal = false;  // kConstant: the graph holds the only reference (NOTE [Graph IR])

  bool is_op() const { return kind == NodeKind::kOp; }
  bool has_side_effect() const { return op != nullptr && (op->mutates_inputs || op->communicates); }
};

struct Graph {
  std::string name = "graph";
  std::vector<Node> nodes;
  std::vector<int> inputs;        // kInput nodes, in argument order
  std::vector<ValueRef> outputs;  // the values the graph returns

  const TensorMeta& meta(ValueRef v) const { return nodes[v.node].outputs[v.output]; }
  // Number of kOp nodes.
  int64_t num_ops() const;
};

// ---- symbolic tensors ----

// NOTE [Symbolic tensors]
// While a Tracer is active on a thread, ir::call records a node instead of running a kernel and
// returns symbolic tensors: TensorImpls with a shape and dtype, no storage, and `symbol` pointing
// here. Reading their elements throws Error (Tensor::raw_data). A symbolic tensor stays tied to
// the graph of its trace; using it in another trace is an error.
}  // namespace cleave::ir

namespace cleave {
struct SymbolicValue {
  const ir::Graph* graph = nullptr;
  ir::ValueRef ref;
};
}  // namespace cleave

namespace cleave::ir {

// Records every ir::call made on this thread into `graph` while alive (one tracer per thread).
// A tracer over a graph that has nodes already resumes it: its parameter and constant nodes are
// found again from their bound tensors (a compile stage continues what an earlier one traced).
class Tracer {
 public:
  explicit Tracer(Graph& graph);
  ~Tracer();
  Tracer(const Tracer&) = delete;
  Tracer& operator=(const Tracer&) = delete;

  // The active tracer of this thread, or null (eager execution).
  static Tracer* current();

  // Adds a kInput node and returns its symbolic tensor.
  Tensor add_input(const TensorMeta& meta, std::string name);
  // Binds `param` as a kParameter node named `name` (once per TensorImpl; later uses of the same
  // tensor refer to that node). Returns the node's symbolic tensor.
  Tensor add_parameter(const Tensor& param, std::string name);
  // The same with the node's meta given: a parameter whose tensor holds one rank's slice while
  // the graph is traced with its global shape (a sharded parameter traced again).
  Tensor add_parameter(const Tensor& param, std::string name, const TensorMeta& meta);
  // The graph value of `t`: its symbol, or a kParameter/kConstant node for a concrete tensor
  // (a leaf that requires grad becomes a parameter; anything else a constant).
  ValueRef value_of(const Tensor& t);
  // A later capture of the concrete tensor `t` by value_of gives its node `meta` instead of t's
  // own shape and dtype: a tensor that holds its whole value while the step is compiled but one
  // rank's slice once it is loaded (NOTE [Sharded parameters] in
  // cleave/runtime/sharded_parameters.h) is traced with the slice's shape. Ops recorded on it
  // see the node's meta.
  void expect_meta(const Tensor& t, TensorMeta meta);
  // The symbolic tensor of a value.
  Tensor symbolic(ValueRef ref) const;
  // Records one op call (ir::call's tracing path) and returns its symbolic outputs.
  std::vector<Tensor> record(const OpDef& op, const std::vector<Tensor>& inputs,
                             const Attrs& attrs);
  // Marks constants the graph alone references as literals (NOTE [Graph IR]; a literal stays
  // one); call once the trace is complete, after the tracing code dropped its tensors.
  void finish();

  Graph& graph() { return graph_; }

 private:
  Graph& graph_;
  Tracer* previous_;
  std::vector<std::pair<const TensorImpl*, int>> captured_;         // concrete tensor -> node
  std::vector<std::pair<const TensorImpl*, TensorMeta>> expected_;  // expect_meta()
  std::vector<std::pair<std::string, int>> name_counts_;            // instance-name uniquifier
};

bool tracing();

// ---- scopes and placement (pushed by nn::Cell while its construct runs under a tracer) ----

// While alive, ops traced on this thread get the scope "<outer>/<name>-<cls_name>", instance
// names prefixed with `name`, and `placement` when it is not empty (an inner scope's placement
// takes precedence over an outer one's). The root scope is "Default".
class ScopeGuard {
 public:
  ScopeGuard(std::string name, std::string cls_name, Placement placement = {});
  ~ScopeGuard();
  ScopeGuard(const ScopeGuard&) = delete;
  ScopeGuard& operator=(const ScopeGuard&) = delete;
};

// While alive, ops traced on this thread get `placement` and/or `strategy` (the Primitive-level
// place/shard of the seeds: the innermost setting wins over a Cell's placement) and, when `name`
// is not empty, the instance name stem `name` instead of their op's (Primitive::set_name).
class AnnotationGuard {
 public:
  AnnotationGuard(Placement placement, Strategy strategy = {}, std::string name = {});
  // With an out_strategy and named layouts too (Primitive::shard's full form; see Node).
  struct Sharding {
    Strategy in, out;
    std::vector<TensorLayout> in_layouts, out_layouts;
  };
  AnnotationGuard(Placement placement, Sharding sharding, std::string name);
  ~AnnotationGuard();
  AnnotationGuard(const AnnotationGuard&) = delete;
  AnnotationGuard& operator=(const AnnotationGuard&) = delete;
};

// The instance-name stem of an op: its name in lower case ("matmul", "biasadd", "relu").
std::string instance_stem(std::string_view op_name);

}  // namespace cleave::ir

// Tracing: ir::call records into the active Tracer's graph (NOTE [Symbolic tensors]).
#include <algorithm>
#include <cctype>

#include "cleave/ir/graph.h"

namespace cleave::ir {
namespace {

thread_local Tracer* t_tracer = nullptr;

struct ScopeFrame {
  std::string name;
  std::string cls_name;
  Placement placement;
};
struct Annotation {
  Placement placement;
  AnnotationGuard::Sharding sharding;
  std::string name;  // the instance name stem; empty: the op's
};
thread_local std::vector<ScopeFrame> t_scopes;
thread_local std::vector<Annotation> t_annotations;

std::string scope_path() {
  std::string path = "Default";
  for (const ScopeFrame& f : t_scopes) path += "/" + f.name + "-" + f.cls_name;
  return path;
}

Placement current_placement() {
  for (auto it = t_annotations.rbegin(); it != t_annotations.rend(); ++it) {
    if (!it->placement.empty()) return it->placement;
  }
  for (auto it = t_scopes.rbegin(); it != t_scopes.rend(); ++it) {
    if (!it->placement.empty()) return it->placement;
  }
  return {};
}

const AnnotationGuard::Sharding* current_sharding() {
  for (auto it = t_annotations.rbegin(); it != t_annotations.rend(); ++it) {
    if (!it->sharding.in.empty()) return &it->sharding;
  }
  return nullptr;
}

}  // namespace

int64_t Graph::num_ops() const {
  return std::count_if(nodes.begin(), nodes.end(), [](const Node& n) { return n.is_op(); });
}

std::string instance_stem(std::string_view op_name) {
  std::string out(op_name);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

Tracer::Tracer(Graph& graph) : graph_(graph), previous_(t_tracer) {
  CLEAVE_CHECK_ARG(t_tracer == nullptr,
                   "a graph is already being traced on this thread; traces cannot nest (do not "
                   "run a GRAPH_MODE step from inside a Cell's construct)");
  t_tracer = this;
  // Resuming a graph (NOTE [Symbolic tensors]): the tensors its parameters and constants are
  // bound to map to their nodes, as if this tracer had captured them.
  for (size_t i = 0; i < graph_.nodes.size(); ++i) {
    const Node& n = graph_.nodes[i];
    if ((n.kind == NodeKind::kParameter || n.kind == NodeKind::kConstant) && n.value.defined()) {
      captured_.emplace_back(n.value.impl(), static_cast<int>(i));
    }
  }
}

Tracer::~Tracer() { t_tracer = previous_; }

Tracer* Tracer::current() { return t_tracer; }
bool tracing() { return t_tracer != nullptr; }

Tensor Tracer::symbolic(ValueRef ref) const {
  const TensorMeta& m = graph_.meta(ref);
  auto impl = std::make_shared<TensorImpl>();
  impl->shape = m.shape;
  impl->dtype = m.dtype;
  impl->symbol = std::make_shared<SymbolicValue>(SymbolicValue{&graph_, ref});
  return Tensor(std::move(impl));
}

Tensor Tracer::add_input(const TensorMeta& meta, std::string name) {
  Node n;
  n.kind = NodeKind::kInput;
  n.outputs = {meta};
  n.name = std::move(name);
  n.scope = "Default";
  graph_.nodes.push_back(std::move(n));
  const int id = static_cast<int>(graph_.nodes.size()) - 1;
  graph_.inputs.push_back(id);
  return symbolic({id, 0});
}

Tensor Tracer::add_parameter(const Tensor& param, std::string name) {
  return add_parameter(param, std::move(name), {param.shape(), param.dtype()});
}

Tensor Tracer::add_parameter(const Tensor& param, std::string name, const TensorMeta& meta) {
  CLEAVE_CHECK_ARG(param.defined() && !param.is_symbolic(),
                   "Tracer::add_parameter: parameter '{}' must be a concrete tensor", name);
  for (const auto& [impl, id] : captured_) {
    if (impl == param.impl()) return symbolic({id, 0});
  }
  Node n;
  n.kind = NodeKind::kParameter;
  n.outputs = {meta};
  n.name = std::move(name);
  n.scope = "Default";
  n.value = param;
  graph_.nodes.push_back(std::move(n));
  const int id = static_cast<int>(graph_.nodes.size()) - 1;
  captured_.emplace_back(param.impl(), id);
  return symbolic({id, 0});
}

ValueRef Tracer::value_of(const Tensor& t) {
  if (const SymbolicValue* s = t.impl()->symbol.get()) {
    CLEAVE_CHECK_ARG(s->graph == &graph_,
                     "a traced tensor ({} {}) from another graph was used while tracing '{}'; "
                     "traced tensors are valid only inside their own trace (do not keep them "
                     "across steps)",
                     dtype_name(t.dtype()), t.shape().to_string(), graph_.name);
    return s->ref;
  }
  for (const auto& [impl, id] : captured_) {
    if (impl == t.impl()) return {id, 0};
  }
  if (t.requires_grad() && t.is_leaf()) {
    const Tensor sym = add_parameter(t, "param" + std::to_string(captured_.size()));
    return sym.impl()->symbol->ref;
  }
  Node n;
  n.kind = NodeKind::kConstant;
  n.outputs = {{t.shape(), t.dtype()}};
  for (const auto& [impl, meta] : expected_) {
    if (impl == t.impl()) n.outputs = {meta};
  }
  n.name = "const";
  n.scope = scope_path();
  n.value = t;
  graph_.nodes.push_back(std::move(n));
  const int id = static_cast<int>(graph_.nodes.size()) - 1;
  captured_.emplace_back(t.impl(), id);
  return {id, 0};
}

std::vector<Tensor> Tracer::record(const OpDef& op, const std::vector<Tensor>& inputs,
                                   const Attrs& attrs) {
  Node n;
  n.kind = NodeKind::kOp;
  n.op = &op;
  n.attrs = attrs;
  std::vector<TensorMeta> in_metas;
  for (const Tensor& t : inputs) {
    n.inputs.push_back(value_of(t));
    in_metas.push_back(graph_.meta(n.inputs.back()));
  }
  n.outputs = op.infer(InferContext{op, attrs, in_metas});
  n.scope = scope_path();
  std::string stem = instance_stem(op.name);
  if (!t_annotations.empty() && !t_annotations.back().name.empty()) {
    stem = t_annotations.back().name;
  }
  if (!t_scopes.empty()) stem = t_scopes.back().name + "." + stem;
  const std::string key = n.scope + "|" + stem;
  auto it = std::find_if(name_counts_.begin(), name_counts_.end(),
                         [&](const auto& e) { return e.first == key; });
  if (it == name_counts_.end()) {
    name_counts_.emplace_back(key, 1);
    n.name = stem;
  } else {
    n.name = stem + "_" + std::to_string(it->second++);
  }
  n.placement = current_placement();
  if (const AnnotationGuard::Sharding* sharding = current_sharding()) {
    n.strategy = sharding->in;
    n.out_strategy = sharding->out;
    n.in_layouts = sharding->in_layouts;
    n.out_layouts = sharding->out_layouts;
  }
  graph_.nodes.push_back(std::move(n));
  const int id = static_cast<int>(graph_.nodes.size()) - 1;
  std::vector<Tensor> out;
  for (size_t i = 0; i < graph_.nodes[id].outputs.size(); ++i) {
    out.push_back(symbolic({id, static_cast<int>(i)}));
  }
  return out;
}

void Tracer::expect_meta(const Tensor& t, TensorMeta meta) {
  CLEAVE_CHECK_ARG(t.defined() && !t.is_symbolic(),
                   "Tracer::expect_meta: expected a concrete tensor");
  expected_.emplace_back(t.impl(), std::move(meta));
}

void Tracer::finish() {
  for (Node& n : graph_.nodes) {
    // A constant marked literal stays one (a graph read from text says which are).
    if (n.kind == NodeKind::kConstant && !n.literal) {
      n.literal = n.value.impl_ptr().use_count() == 1 &&
                  (n.value.impl()->storage == nullptr || n.value.impl()->storage.use_count() == 1);
    }
  }
  captured_.clear();
}

ScopeGuard::ScopeGuard(std::string name, std::string cls_name, Placement placement) {
  t_scopes.push_back({std::move(name), std::move(cls_name), std::move(placement)});
}
ScopeGuard::~ScopeGuard() { t_scopes.pop_back(); }

AnnotationGuard::AnnotationGuard(Placement placement, Strategy strategy, std::string name) {
  t_annotations.push_back({std::move(placement), {.in = std::move(strategy)}, std::move(name)});
}
AnnotationGuard::AnnotationGuard(Placement placement, Sharding sharding, std::string name) {
  t_annotations.push_back({std::move(placement), std::move(sharding), std::move(name)});
}
AnnotationGuard::~AnnotationGuard() { t_annotations.pop_back(); }

}  // namespace cleave::ir

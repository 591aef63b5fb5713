// NOTE [Blocks on threads] in runtime/thread_split.h.
#include "runtime/thread_split.h"

#include <fmt/format.h>
#include <omp.h>

#include <algorithm>
#include <exception>
#include <map>

#include "cleave/core/error.h"

// NOTE [OpenMP joins under TSan]: ThreadSanitizer does not see the OpenMP runtime's own
// synchronisation (it is not instrumented), so the hand-over of the blocks' inputs to the team and
// of their outputs back would look like races. Under TSan the fork and the join are told to it.
#if defined(__SANITIZE_THREAD__)
#define CLEAVE_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define CLEAVE_TSAN 1
#endif
#endif
#ifdef CLEAVE_TSAN
extern "C" void __tsan_acquire(void* addr);
extern "C" void __tsan_release(void* addr);
#endif

namespace cleave::runtime {
namespace {

// Fork and join as TSan should see them (no-ops otherwise).
inline void tsan_release([[maybe_unused]] void* at) {
#ifdef CLEAVE_TSAN
  __tsan_release(at);
#endif
}
inline void tsan_acquire([[maybe_unused]] void* at) {
#ifdef CLEAVE_TSAN
  __tsan_acquire(at);
#endif
}

constexpr int kShared = -1;  // parameters, constants and the ops computed from them alone
constexpr int kUpdate = -2;  // the blocks' sums, the updates and what follows them

// Each node's class: its block (>= 0), kShared or kUpdate.
std::vector<int> classify(const ir::Graph& g, size_t num_inputs) {
  std::vector<int> cls(g.nodes.size(), kShared);
  for (size_t j = 0; j < g.inputs.size(); ++j) {
    cls[static_cast<size_t>(g.inputs[j])] = static_cast<int>(j / num_inputs);
  }
  bool updating = false;  // past the first op with a side effect
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    const ir::Node& n = g.nodes[i];
    if (!n.is_op()) continue;
    updating = updating || n.has_side_effect();
    int c = updating ? kUpdate : kShared;
    for (const ir::ValueRef& v : n.inputs) {
      const int in = cls[static_cast<size_t>(v.node)];
      if (c == kUpdate || in == kShared) continue;
      c = (in == kUpdate || (c >= 0 && c != in)) ? kUpdate : in;
    }
    cls[i] = c;
  }
  return cls;
}

// The graph of class `which`: its own nodes, the shared nodes they read (transitively), and an
// input for each value of another class they read (`external`, in the order the inputs are made).
// `outputs`: the values it returns, in the whole graph's numbering.
ir::Graph extract(const ir::Graph& g, const std::vector<int>& cls, int which,
                  const std::vector<ir::ValueRef>& outputs, std::vector<ir::ValueRef>& external) {
  const size_t count = g.nodes.size();
  std::vector<bool> keep(count, false);
  for (size_t i = 0; i < count; ++i) keep[i] = cls[i] == which;
  for (const ir::ValueRef& v : outputs) keep[static_cast<size_t>(v.node)] = true;
  for (size_t i = count; i-- > 0;) {  // consumers come after producers
    if (!keep[i]) continue;
    for (const ir::ValueRef& v : g.nodes[i].inputs) {
      if (cls[static_cast<size_t>(v.node)] == kShared) keep[static_cast<size_t>(v.node)] = true;
    }
  }
  ir::Graph out;
  out.name = which >= 0 ? fmt::format("{}_block{}", g.name, which) : g.name + "_update";
  std::vector<int> index(count, -1);
  std::map<std::pair<int, int>, int> made;  // an external value -> its input node
  auto add = [&](ir::Node n) {
    out.nodes.push_back(std::move(n));
    return static_cast<int>(out.nodes.size()) - 1;
  };
  auto value = [&](const ir::ValueRef& v) -> ir::ValueRef {
    const size_t p = static_cast<size_t>(v.node);
    if (keep[p]) return {index[p], v.output};
    auto it = made.find({v.node, v.output});
    if (it == made.end()) {
      ir::Node in;
      in.kind = ir::NodeKind::kInput;
      in.outputs = {g.meta(v)};
      in.name = v.output == 0 ? g.nodes[p].name : fmt::format("{}:{}", g.nodes[p].name, v.output);
      const int node = add(std::move(in));
      out.inputs.push_back(node);
      external.push_back(v);
      it = made.emplace(std::make_pair(v.node, v.output), node).first;
    }
    return {it->second, 0};
  };
  for (size_t i = 0; i < count; ++i) {
    if (!keep[i]) continue;
    ir::Node n = g.nodes[i];
    for (ir::ValueRef& v : n.inputs) v = value(v);
    index[i] = add(std::move(n));
  }
  for (int in : g.inputs) {  // a block's own inputs, in the whole graph's order
    if (keep[static_cast<size_t>(in)]) out.inputs.push_back(index[static_cast<size_t>(in)]);
  }
  for (const ir::ValueRef& v : outputs) out.outputs.push_back(value(v));
  return out;
}

}  // namespace

ThreadSplit::ThreadSplit(const ir::Graph& g, int parts, size_t num_inputs)
    : num_inputs_(num_inputs) {
  CLEAVE_ASSERT(
      parts >= 2 && num_inputs >= 1 && g.inputs.size() == static_cast<size_t>(parts) * num_inputs,
      "thread split of '{}': {} inputs for {} blocks of {}", g.name, g.inputs.size(), parts,
      num_inputs);
  const std::vector<int> cls = classify(g, num_inputs);
  // What each block hands over: its values the update or the outputs read.
  std::vector<std::vector<ir::ValueRef>> handed(static_cast<size_t>(parts));
  std::map<std::pair<int, int>, std::pair<int, int>> slot;  // value -> (block, output)
  auto hand = [&](const ir::ValueRef& v) {
    const int c = cls[static_cast<size_t>(v.node)];
    if (c < 0 || slot.count({v.node, v.output}) > 0) return;
    auto& list = handed[static_cast<size_t>(c)];
    slot[{v.node, v.output}] = {c, static_cast<int>(list.size())};
    list.push_back(v);
  };
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    if (cls[i] != kUpdate) continue;
    for (const ir::ValueRef& v : g.nodes[i].inputs) hand(v);
  }
  for (const ir::ValueRef& v : g.outputs) {
    CLEAVE_ASSERT(cls[static_cast<size_t>(v.node)] < 0,
                  "thread split of '{}': output '{}' is one block's value", g.name,
                  g.nodes[static_cast<size_t>(v.node)].name);
  }
  for (int b = 0; b < parts; ++b) {
    std::vector<ir::ValueRef> external;
    ir::Graph block = extract(g, cls, b, handed[static_cast<size_t>(b)], external);
    CLEAVE_ASSERT(external.empty(), "thread split of '{}': block {} reads another class's value",
                  g.name, b);
    blocks_.push_back(std::make_unique<Executor>(std::move(block)));
  }
  std::vector<ir::ValueRef> external;
  ir::Graph update = extract(g, cls, kUpdate, g.outputs, external);
  for (const ir::ValueRef& v : external) {
    auto it = slot.find({v.node, v.output});
    CLEAVE_ASSERT(it != slot.end(), "thread split of '{}': the update reads '{}', no block's",
                  g.name, g.nodes[static_cast<size_t>(v.node)].name);
    update_inputs_.push_back(it->second);
  }
  update_ = std::make_unique<Executor>(std::move(update));
}

std::vector<Tensor> ThreadSplit::run(const std::vector<Tensor>& feed) {
  const int parts = this->parts();
  CLEAVE_ASSERT(feed.size() == static_cast<size_t>(parts) * num_inputs_,
                "thread split of '{}': {} inputs for {} blocks of {}", update_->graph().name,
                feed.size(), parts, num_inputs_);
  std::vector<std::vector<Tensor>> handed(static_cast<size_t>(parts));
  std::vector<std::exception_ptr> errors(static_cast<size_t>(parts));
  // As many threads as the process has now (set_intra_op_threads may have changed it since the
  // step compiled); a smaller team (or a step run inside a parallel region) takes several blocks
  // per thread. The blocks and the sums are the same whichever thread runs them.
  int fork = 0, join = 0;  // NOTE [OpenMP joins under TSan]
  tsan_release(&fork);
#pragma omp parallel num_threads(std::min(parts, omp_get_max_threads()))
  {
    tsan_acquire(&fork);
    omp_set_num_threads(1);
    for (int b = omp_get_thread_num(); b < parts; b += omp_get_num_threads()) {
      const size_t at = static_cast<size_t>(b);
      try {
        const std::vector<Tensor> in(feed.begin() + static_cast<ptrdiff_t>(at * num_inputs_),
                                     feed.begin() + static_cast<ptrdiff_t>((at + 1) * num_inputs_));
        handed[at] = blocks_[at]->run(in, /*copy_outputs=*/false);
      } catch (...) {
        errors[at] = std::current_exception();
      }
    }
    tsan_release(&join);
  }
  tsan_acquire(&join);
  for (const std::exception_ptr& e : errors) {
    if (e) std::rethrow_exception(e);
  }
  std::vector<Tensor> in;
  in.reserve(update_inputs_.size());
  for (const auto& [b, k] : update_inputs_) {
    in.push_back(handed[static_cast<size_t>(b)][static_cast<size_t>(k)]);
  }
#ifdef CLEAVE_TSAN
  // Under TSan cleave's OpenMP loops run on one thread (docs/reliability.md: the runtime's
  // barriers are invisible to it); the blocks above are the concurrency it checks here.
  const int threads = omp_get_max_threads();
  omp_set_num_threads(1);
  std::vector<Tensor> out = update_->run(in);
  omp_set_num_threads(threads);
  return out;
#else
  return update_->run(in);
#endif
}

std::vector<bool> ThreadSplit::inputs_read() const {
  std::vector<bool> read;
  for (const auto& block : blocks_) {
    const std::vector<bool>& r = block->inputs_read();
    read.insert(read.end(), r.begin(), r.end());
  }
  return read;
}

}  // namespace cleave::runtime

// DATA_PARALLEL's passes (cleave/parallel/data_parallel.h).
#include "cleave/parallel/data_parallel.h"

#include <algorithm>
#include <functional>
#include <map>
#include <queue>

#include "cleave/core/error.h"
#include "cleave/ir/comm_ops.h"
#include "cleave/ir/dispatch.h"
#include "cleave/ir/passes.h"
#include "cleave/ir/registry.h"
#include "cleave/ops/shape.h"

namespace cleave::parallel {
namespace {

constexpr double kFirstBucketBytes = 1 << 20;
constexpr double kLastBucketBytes = 1 << 20;

}  // namespace

void all_reduce_gradients_in_buckets(std::vector<Tensor>& grads,
                                     const GradientBucketOptions& options) {
  ir::Tracer* tracer = ir::Tracer::current();
  CLEAVE_ASSERT(tracer != nullptr, "all_reduce_gradients_in_buckets needs an active tracer");
  const ir::Attrs attrs{{"op", std::string(options.mean ? "mean" : "sum")},
                        {"group", std::string(ir::kWorldCommGroup)},
                        {"group_size", options.device_num}};
  const ir::OpDef& all_reduce = ir::Registry::global().get("AllReduce");
  const ir::OpDef& fused = ir::Registry::global().get("FusedAllReduce");
  auto reduce = [&](const Tensor& x) { return ir::call1(all_reduce, {x}, attrs); };
  std::vector<size_t> order;
  for (size_t i = 0; i < grads.size(); ++i) {
    if (grads[i].defined()) order.push_back(i);
  }
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    return tracer->value_of(grads[a]).node < tracer->value_of(grads[b]).node;
  });
  if (options.cap_mb <= 0) {
    for (size_t i : order) grads[i] = reduce(grads[i]);
    return;
  }
  const double cap = options.cap_mb * (1 << 20);
  std::vector<size_t> bucket;
  double bytes = 0;
  int buckets = 0;
  auto flush = [&] {
    if (bucket.empty()) return;
    if (bucket.size() == 1) {
      grads[bucket[0]] = reduce(grads[bucket[0]]);
    } else {  // one AllReduce of the bucket's gradients where they lie
      std::vector<Tensor> parts;
      for (size_t i : bucket) parts.push_back(grads[i]);
      const std::vector<Tensor> sums = ir::call(fused, parts, attrs);
      for (size_t k = 0; k < bucket.size(); ++k) grads[bucket[k]] = sums[k];
    }
    bucket.clear();
    bytes = 0;
    ++buckets;
  };
  // The last gradients computed (at most kLastBucketBytes and an eighth of all, when there is
  // more than a first bucket's worth in all) get a bucket of their own: nothing but the updates of
  // the other buckets can hide its AllReduce, so the smaller the better. (Gradients that fit one
  // first bucket stay one: for LeNet's 0.24 MB a second AllReduce cost more than it hid.)
  size_t last_begin = order.size();
  double total = 0, last_bytes = 0;
  for (size_t i : order) total += static_cast<double>(grads[i].nbytes());
  if (total > std::min(cap, kFirstBucketBytes)) {
    const double last_cap = std::min({cap, kLastBucketBytes, total / 8});
    while (last_begin > 1) {
      const double size = static_cast<double>(grads[order[last_begin - 1]].nbytes());
      if (last_begin < order.size() && last_bytes + size > last_cap) break;
      last_bytes += size;
      --last_begin;
    }
  }
  for (size_t k = 0; k < order.size(); ++k) {
    const size_t i = order[k];
    const auto size = static_cast<double>(grads[i].nbytes());
    const double limit = buckets == 0 ? std::min(cap, kFirstBucketBytes) : cap;
    if (!bucket.empty() &&
        (k == last_begin || bytes + size > limit || grads[bucket[0]].dtype() != grads[i].dtype())) {
      flush();
    }
    bucket.push_back(i);
    bytes += size;
  }
  flush();
}

int hoist_collectives(ir::Graph& g, int begin, int end,
                      const std::function<bool(const ir::Node&)>& which) {
  const int count = static_cast<int>(g.nodes.size());
  std::vector<std::vector<int>> consumers(static_cast<size_t>(count));
  for (int j = 0; j < count; ++j) {
    for (const ir::ValueRef& v : g.nodes[static_cast<size_t>(j)].inputs) {
      consumers[static_cast<size_t>(v.node)].push_back(j);
    }
  }
  std::vector<bool> returned(static_cast<size_t>(count), false);
  for (const ir::ValueRef& v : g.outputs) returned[static_cast<size_t>(v.node)] = true;
  std::vector<bool> movable(static_cast<size_t>(count), false);
  for (int i = end - 1; i >= begin; --i) {
    const ir::Node& n = g.nodes[static_cast<size_t>(i)];
    if (!n.is_op() || n.op->mutates_inputs || returned[static_cast<size_t>(i)]) continue;
    if (n.op->communicates) {
      movable[static_cast<size_t>(i)] = !which || which(n);
      continue;
    }
    const std::vector<int>& users = consumers[static_cast<size_t>(i)];
    movable[static_cast<size_t>(i)] =
        !users.empty() && std::all_of(users.begin(), users.end(),
                                      [&](int u) { return movable[static_cast<size_t>(u)]; });
  }
  // anchor: the node a movable node goes right after.
  std::vector<int> anchor(static_cast<size_t>(count), -1);
  std::vector<std::vector<int>> after(static_cast<size_t>(count));
  std::vector<int> order;
  for (int i = begin; i < end; ++i) {
    if (!movable[static_cast<size_t>(i)]) continue;
    int a = -1;
    for (const ir::ValueRef& v : g.nodes[static_cast<size_t>(i)].inputs) {
      a = std::max(
          a, movable[static_cast<size_t>(v.node)] ? anchor[static_cast<size_t>(v.node)] : v.node);
    }
    anchor[static_cast<size_t>(i)] = a;
    if (a < 0) {
      order.push_back(i);
    } else {
      after[static_cast<size_t>(a)].push_back(i);
    }
  }
  std::function<void(int)> emit = [&](int i) {
    order.push_back(i);
    for (int m : after[static_cast<size_t>(i)]) emit(m);
  };
  int tail = count;
  for (int i = 0; i < count; ++i) {
    if (movable[static_cast<size_t>(i)]) continue;
    if (i >= begin && tail == count) tail = static_cast<int>(order.size());
    emit(i);
  }
  ir::reorder_nodes(g, order);
  return tail;
}

void order_tail_by_collectives(ir::Graph& g, int tail) {
  const int count = static_cast<int>(g.nodes.size());
  if (tail >= count) return;
  const auto at = [](int i) { return static_cast<size_t>(i); };
  // latest[i]: the index of the last communication op node i depends on (-1: none); base[i]: the
  // node whose storage node i's output shares (itself unless a view).
  std::vector<int> latest(at(count), -1);
  const std::vector<int> base = ir::storage_roots(g);
  for (int i = 0; i < count; ++i) {
    const ir::Node& n = g.nodes[at(i)];
    int l = -1;
    for (const ir::ValueRef& v : n.inputs) l = std::max(l, latest[at(v.node)]);
    if (n.is_op() && n.op->communicates) l = i;
    latest[at(i)] = l;
  }
  std::vector<std::vector<int>> next(at(count));
  std::vector<int> waiting(at(count), 0);
  const auto edge = [&](int a, int b) {
    next[at(a)].push_back(b);
    ++waiting[at(b)];
  };
  std::map<int, std::vector<int>> readers;  // base -> tail nodes reading it, in trace order
  for (int i = tail; i < count; ++i) {
    for (const ir::ValueRef& v : g.nodes[at(i)].inputs) {
      if (v.node >= tail) edge(v.node, i);
      std::vector<int>& r = readers[base[at(v.node)]];
      if (r.empty() || r.back() != i) r.push_back(i);
    }
  }
  for (int m = tail; m < count; ++m) {
    const ir::Node& n = g.nodes[at(m)];
    if (!n.is_op() || !n.op->mutates_inputs) continue;
    for (size_t k = 0; k < n.inputs.size(); ++k) {
      if (!n.op->writes_input(k)) continue;
      for (int u : readers[base[at(n.inputs[k].node)]]) {
        if (u < m) edge(u, m);
        if (u > m) edge(m, u);
      }
    }
  }
  using Key = std::pair<int, int>;  // (latest communication op, trace index)
  std::priority_queue<Key, std::vector<Key>, std::greater<>> ready;
  for (int i = tail; i < count; ++i) {
    if (waiting[at(i)] == 0) ready.emplace(latest[at(i)], i);
  }
  std::vector<int> order(at(tail));
  for (int i = 0; i < tail; ++i) order[at(i)] = i;
  while (!ready.empty()) {
    const int i = ready.top().second;
    ready.pop();
    order.push_back(i);
    for (int j : next[at(i)]) {
      if (--waiting[at(j)] == 0) ready.emplace(latest[at(j)], j);
    }
  }
  ir::reorder_nodes(g, order);  // checks that every node was placed after its inputs
}

int hoist_updates(ir::Graph& g, int tail) {
  const int count = static_cast<int>(g.nodes.size());
  if (tail >= count) return 0;
  const auto at = [](int i) { return static_cast<size_t>(i); };
  const std::vector<int> root = ir::storage_roots(g);
  // readers[r]: the nodes reading storage r (through any view of it), in graph order, and
  // writers[r]: those of them writing into it.
  std::vector<std::vector<int>> readers(at(count)), writers(at(count));
  for (int i = 0; i < count; ++i) {
    const ir::Node& n = g.nodes[at(i)];
    for (size_t k = 0; k < n.inputs.size(); ++k) {
      const int r = root[at(n.inputs[k].node)];
      if (readers[at(r)].empty() || readers[at(r)].back() != i) readers[at(r)].push_back(i);
      if (n.op != nullptr && n.op->writes_input(k) &&
          (writers[at(r)].empty() || writers[at(r)].back() != i)) {
        writers[at(r)].push_back(i);
      }
    }
  }
  // after[a]: the updates that go right after node a, in graph order.
  std::vector<std::vector<int>> after(at(count));
  std::vector<bool> moved(at(count), false);
  int hoisted = 0;
  for (int m = tail; m < count; ++m) {
    const ir::Node& n = g.nodes[at(m)];
    if (!n.is_op() || !n.op->mutates_inputs || n.op->communicates) continue;
    // The earliest place: after its inputs, after every earlier write of what it reads and
    // after every earlier read of what it writes.
    int place = -1;
    bool reduced = false;
    for (size_t k = 0; k < n.inputs.size(); ++k) {
      const int r = root[at(n.inputs[k].node)];
      const ir::Node& source = g.nodes[at(r)];
      reduced = reduced || (source.is_op() && source.op->communicates);
      // A parameter or constant (its optimizer state, the learning rate) moves with it.
      if (g.nodes[at(n.inputs[k].node)].is_op()) place = std::max(place, n.inputs[k].node);
      for (int u : n.op->writes_input(k) ? readers[at(r)] : writers[at(r)]) {
        if (u < m) place = std::max(place, u);
      }
    }
    // A gradient reduced by a collective, in the tail or hoisted before it (a mirror AllReduce),
    // is still in flight where it was made: the update stays where the tail's order put it.
    if (reduced || place < 0 || place >= tail) continue;
    after[at(place)].push_back(m);
    moved[at(m)] = true;
    ++hoisted;
  }
  if (hoisted == 0) return 0;
  std::vector<int> order;
  order.reserve(at(count));
  std::vector<bool> placed(at(count), false);
  const auto emit = [&](int i) {
    if (placed[at(i)]) return;
    placed[at(i)] = true;
    order.push_back(i);
  };
  for (int i = 0; i < count; ++i) {
    if (moved[at(i)]) continue;
    emit(i);
    for (int m : after[at(i)]) {
      for (const ir::ValueRef& v : g.nodes[at(m)].inputs) {
        if (!g.nodes[at(v.node)].is_op()) emit(v.node);
      }
      emit(m);
    }
  }
  ir::reorder_nodes(g, order);  // checks that every node was placed after its inputs
  return hoisted;
}

}  // namespace cleave::parallel

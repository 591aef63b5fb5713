// Redistribution planning (NOTE [Redistribution] in cleave/parallel/redistribution.h).
#include "cleave/parallel/redistribution.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <map>
#include <mutex>
#include <queue>
#include <set>
#include <tuple>
#include <unordered_map>

#include "cleave/core/error.h"

namespace cleave::parallel {

std::string RedistributionStep::to_string() const {
  const std::string group = fmt::format("({})", fmt::join(axes, ", "));
  switch (kind) {
    case Kind::kAllReduce:
      return fmt::format("AllReduce({} over axes {})", partial_op_name(op), group);
    case Kind::kReduceScatter:
      return fmt::format("ReduceScatter(dim {} over axis {})", dim, axes[0]);
    case Kind::kAllGather:
      return fmt::format("AllGather(dim {} over axes {})", dim, group);
    case Kind::kAllToAll:
      return fmt::format("AlltoAll(axis {}: dim {} -> dim {})", axes[0], concat_dim, dim);
    default:
      return fmt::format("Slice(dim {} over axis {})", dim, axes[0]);
  }
}

std::string RedistributionPlan::to_string() const {
  if (steps.empty()) return "identity";
  std::vector<std::string> parts;
  for (const RedistributionStep& s : steps) parts.push_back(s.to_string());
  return fmt::format("{}", fmt::join(parts, " -> "));
}

bool unify_device_matrices(const DeviceMatrix& a, const DeviceMatrix& b, UnifiedMatrix& out) {
  CLEAVE_CHECK_ARG(device_count(a) == device_count(b),
                   "unify_device_matrices: {} and {} have different device counts ({} and {}); "
                   "expected the same",
                   device_matrix_to_string(a), device_matrix_to_string(b), device_count(a),
                   device_count(b));
  // The cumulative products from the left are the boundaries of each matrix's axes in the rank's
  // mixed-radix digits; the common matrix has both sets of boundaries, which must divide each
  // other in order.
  std::set<int64_t> cuts;
  for (const DeviceMatrix* m : {&a, &b}) {
    int64_t p = 1;
    for (int64_t d : *m) {
      p *= d;
      cuts.insert(p);
    }
  }
  out = {};
  int64_t prev = 1;
  std::vector<int64_t> bounds;
  for (int64_t c : cuts) {
    if (c == 1) continue;
    if (c % prev != 0) return false;
    out.dev.push_back(c / prev);
    bounds.push_back(c);
    prev = c;
  }
  if (out.dev.empty()) {
    out.dev = {1};
    bounds = {1};
  }
  auto axes_of = [&](const DeviceMatrix& m, std::vector<std::vector<int>>& result) {
    int64_t p = 1;
    size_t next = 0;
    for (int64_t d : m) {
      std::vector<int> axes;
      const int64_t end = p * d;
      while (d > 1 && next < bounds.size() && bounds[next] <= end) {
        axes.push_back(static_cast<int>(next));
        ++next;
      }
      result.push_back(std::move(axes));
      p = end;
    }
  };
  axes_of(a, out.a_axes);
  axes_of(b, out.b_axes);
  return true;
}

namespace {

using Kind = RedistributionStep::Kind;
using DimAxes = Layout::DimAxes;

// `layout` on the common matrix: each axis replaced by the common axes it became.
Layout on_common(const Layout& layout, const UnifiedMatrix& u,
                 const std::vector<std::vector<int>>& axis_map) {
  std::vector<DimAxes> map;
  for (const DimAxes& axes : layout.tensor_map()) {
    DimAxes out;
    for (int a : axes) {
      for (int c : axis_map[static_cast<size_t>(a)]) out.push_back(c);
    }
    map.push_back(std::move(out));
  }
  std::vector<int> partial;
  for (int a : layout.partial()) {
    for (int c : axis_map[static_cast<size_t>(a)]) partial.push_back(c);
  }
  return Layout(u.dev, std::move(map), std::move(partial), layout.partial_op());
}

thread_local bool t_alltoall = true;  // AllToAllScope

struct Search {
  const Layout& target;
  const Shape& global;
  double element_bytes;
  bool alltoall = t_alltoall;

  int64_t axis_size(int a) const { return target.device_matrix()[static_cast<size_t>(a)]; }
  double group_size(const std::vector<int>& axes) const {
    double n = 1;
    for (int a : axes) n *= static_cast<double>(axis_size(a));
    return n;
  }
  double local_bytes(const Layout& l) const {
    double n = element_bytes;
    for (int64_t d = 0; d < l.tensor_rank(); ++d) {
      n *= static_cast<double>(global[d]) / static_cast<double>(l.splits(d));
    }
    return n;
  }
  // Whether dim d's axes are a prefix of its target axes, with `next` its next target axis.
  bool next_target_axis(const Layout& l, int64_t d, int* next) const {
    const DimAxes& have = l.tensor_map()[static_cast<size_t>(d)];
    const DimAxes& want = target.tensor_map()[static_cast<size_t>(d)];
    if (have.size() >= want.size() || !std::equal(have.begin(), have.end(), want.begin())) {
      return false;
    }
    *next = want[have.size()];
    return true;
  }
  bool axis_free(const Layout& l, int a) const {
    for (const DimAxes& axes : l.tensor_map()) {
      if (std::find(axes.begin(), axes.end(), a) != axes.end()) return false;
    }
    return std::find(l.partial().begin(), l.partial().end(), a) == l.partial().end();
  }

  // Every step that can follow `l`, with `after` set.
  std::vector<RedistributionStep> moves(const Layout& l) const {
    std::vector<RedistributionStep> out;
    const DeviceMatrix& dev = l.device_matrix();
    const double m = local_bytes(l);
    auto with_map = [&](std::vector<DimAxes> map, std::vector<int> partial) {
      return Layout(dev, std::move(map), std::move(partial), l.partial_op());
    };
    // Pending reductions the target does not keep.
    std::vector<int> pending;
    for (int a : l.partial()) {
      if (std::find(target.partial().begin(), target.partial().end(), a) ==
          target.partial().end()) {
        pending.push_back(a);
      }
    }
    const size_t subsets = size_t{1} << pending.size();
    for (size_t mask = 1; mask < subsets; ++mask) {
      std::vector<int> axes, keep;
      for (size_t i = 0; i < pending.size(); ++i) {
        ((mask >> i) & 1 ? axes : keep).push_back(pending[i]);
      }
      for (int a : l.partial()) {
        if (std::find(pending.begin(), pending.end(), a) == pending.end()) keep.push_back(a);
      }
      const double n = group_size(axes);
      RedistributionStep s{.kind = Kind::kAllReduce,
                           .dev = dev,
                           .axes = axes,
                           .op = l.partial_op(),
                           .after = with_map(l.tensor_map(), keep),
                           .bytes = 2 * m * (n - 1) / n};
      out.push_back(std::move(s));
    }
    for (int64_t d = 0; d < l.tensor_rank(); ++d) {
      int next = -1;
      const bool grows = next_target_axis(l, d, &next);
      const DimAxes& axes = l.tensor_map()[static_cast<size_t>(d)];
      // ReduceScatter of a pending sum into d.
      if (grows && l.partial_op() == PartialOp::kSum &&
          std::find(pending.begin(), pending.end(), next) != pending.end() &&
          global[d] % (l.splits(d) * axis_size(next)) == 0) {
        std::vector<DimAxes> map = l.tensor_map();
        map[static_cast<size_t>(d)].push_back(next);
        std::vector<int> keep;
        for (int a : l.partial()) {
          if (a != next) keep.push_back(a);
        }
        const double n = static_cast<double>(axis_size(next));
        out.push_back({.kind = Kind::kReduceScatter,
                       .dev = dev,
                       .axes = {next},
                       .dim = d,
                       .op = l.partial_op(),
                       .after = with_map(std::move(map), std::move(keep)),
                       .bytes = m * (n - 1) / n});
      }
      // Slice over a replica axis.
      if (grows && axis_free(l, next) && global[d] % (l.splits(d) * axis_size(next)) == 0) {
        std::vector<DimAxes> map = l.tensor_map();
        map[static_cast<size_t>(d)].push_back(next);
        out.push_back({.kind = Kind::kSlice,
                       .dev = dev,
                       .axes = {next},
                       .dim = d,
                       .after = with_map(std::move(map), l.partial()),
                       .bytes = 0});
      }
      // AllGather of the last k axes.
      for (size_t k = 1; k <= axes.size(); ++k) {
        std::vector<DimAxes> map = l.tensor_map();
        DimAxes& mine = map[static_cast<size_t>(d)];
        const std::vector<int> gathered(mine.end() - static_cast<ptrdiff_t>(k), mine.end());
        mine.resize(mine.size() - k);
        const double n = group_size(gathered);
        out.push_back({.kind = Kind::kAllGather,
                       .dev = dev,
                       .axes = gathered,
                       .dim = d,
                       .after = with_map(std::move(map), l.partial()),
                       .bytes = m * (n - 1)});
      }
      // AlltoAll moving the last axis of another dim x to d.
      if (!grows || !alltoall) continue;
      for (int64_t x = 0; x < l.tensor_rank(); ++x) {
        const DimAxes& from = l.tensor_map()[static_cast<size_t>(x)];
        if (x == d || from.empty() || from.back() != next) continue;
        if (global[d] % (l.splits(d) * axis_size(next)) != 0) continue;
        std::vector<DimAxes> map = l.tensor_map();
        map[static_cast<size_t>(x)].pop_back();
        map[static_cast<size_t>(d)].push_back(next);
        const double n = static_cast<double>(axis_size(next));
        out.push_back({.kind = Kind::kAllToAll,
                       .dev = dev,
                       .axes = {next},
                       .dim = d,
                       .concat_dim = x,
                       .after = with_map(std::move(map), l.partial()),
                       .bytes = m * (n - 1) / n});
      }
    }
    return out;
  }

  // A layout of this search as a short byte string: each dimension's axes, then the partial
  // axes and their reduction. Every layout of one search is on the same device matrix, so two
  // layouts have equal keys exactly when their texts (Layout::to_string) are equal; the key
  // replaces that text, whose formatting cost more than the rest of the search (the strategy
  // search plans hundreds of thousands of redistributions at 1024 devices).
  static std::string key_of(const Layout& l) {
    std::string key;
    const auto put = [&key](int64_t v) {
      CLEAVE_ASSERT(v >= 0 && v < 128, "redistribution search: {} does not fit a key byte", v);
      key.push_back(static_cast<char>(v));
    };
    for (const DimAxes& axes : l.tensor_map()) {
      put(static_cast<int64_t>(axes.size()));
      for (int a : axes) put(a);
    }
    put(static_cast<int64_t>(l.partial().size()));
    for (int a : l.partial()) put(a);
    if (l.is_partial()) put(static_cast<int64_t>(l.partial_op()));
    return key;
  }

  // Dijkstra over layouts from `start` to the target (same matrix).
  RedistributionPlan run(const Layout& start) const {
    struct Entry {
      double bytes;
      size_t steps;
      size_t id;
      bool operator>(const Entry& o) const {
        return std::tie(bytes, steps, id) > std::tie(o.bytes, o.steps, o.id);
      }
    };
    // A layout reached: by `step` (its `after` is the layout; the start's step is a placeholder
    // holding only the start) from visit `parent`.
    struct Visit {
      double bytes;
      size_t steps;
      int parent;
      RedistributionStep step;
      const Layout& layout() const { return step.after; }
    };
    // Per layout met (by key): its best visit so far, and whether it left the queue.
    struct Seen {
      size_t best;
      bool done;
    };
    std::vector<Visit> visits{{0, 0, -1, {.after = start}}};
    std::unordered_map<std::string, Seen> seen;
    seen.emplace(key_of(start), Seen{0, false});
    std::priority_queue<Entry, std::vector<Entry>, std::greater<>> queue;
    queue.push({0, 0, 0});
    while (!queue.empty()) {
      const Entry e = queue.top();
      queue.pop();
      Seen& mine = seen.at(key_of(visits[e.id].layout()));
      if (mine.done) continue;
      mine.done = true;
      if (visits[e.id].layout() == target) {
        RedistributionPlan plan;
        plan.bytes = visits[e.id].bytes;
        for (int v = static_cast<int>(e.id); visits[static_cast<size_t>(v)].parent >= 0;
             v = visits[static_cast<size_t>(v)].parent) {
          plan.steps.push_back(visits[static_cast<size_t>(v)].step);
        }
        std::reverse(plan.steps.begin(), plan.steps.end());
        return plan;
      }
      for (RedistributionStep& s : moves(visits[e.id].layout())) {
        const double bytes = visits[e.id].bytes + s.bytes;
        const size_t steps = visits[e.id].steps + 1;
        auto [it, fresh] = seen.try_emplace(key_of(s.after), Seen{visits.size(), false});
        if (!fresh) {
          const Visit& best = visits[it->second.best];
          if (std::tie(best.bytes, best.steps) <= std::tie(bytes, steps)) continue;
          it->second.best = visits.size();
        }
        visits.push_back({bytes, steps, static_cast<int>(e.id), std::move(s)});
        queue.push({bytes, steps, visits.size() - 1});
      }
    }
    CLEAVE_ASSERT(false, "no redistribution from {} to {}", start.to_string(), target.to_string());
    return {};
  }
};

RedistributionPlan plan_uncached(const Layout& from, const Layout& to, const Shape& global,
                                 DType dtype) {
  const Layout f = from.normalized(), t = to.normalized();
  const double element_bytes = static_cast<double>(dtype_size(dtype));
  UnifiedMatrix u;
  if (unify_device_matrices(f.device_matrix(), t.device_matrix(), u)) {
    const Layout target = on_common(t, u, u.b_axes);
    return Search{target, global, element_bytes}.run(on_common(f, u, u.a_axes));
  }
  // No common matrix: through the replicated tensor.
  const Layout whole = Layout::replicated(f.device_matrix(), f.tensor_rank());
  RedistributionPlan plan = Search{whole, global, element_bytes}.run(f);
  const RedistributionPlan rest =
      Search{t, global, element_bytes}.run(Layout::replicated(t.device_matrix(), t.tensor_rank()));
  plan.steps.insert(plan.steps.end(), rest.steps.begin(), rest.steps.end());
  plan.bytes += rest.bytes;
  return plan;
}

}  // namespace

namespace {

struct KeyHash {
  size_t operator()(const std::vector<int64_t>& key) const {
    uint64_t h = 1469598103934665603ull;  // FNV-1a over the numbers
    for (int64_t v : key) h = (h ^ static_cast<uint64_t>(v)) * 1099511628211ull;
    return static_cast<size_t>(h);
  }
};

// The checks of plan_redistribution's contract (an Error naming the broken rule).
void check_redistribution(const Layout& from, const Layout& to, const Shape& global) {
  CLEAVE_CHECK_ARG(from.num_devices() == to.num_devices(),
                   "plan_redistribution: {} is on {} devices and {} on {}; expected the same "
                   "device count",
                   from.to_string(), from.num_devices(), to.to_string(), to.num_devices());
  for (const Layout* l : {&from, &to}) {
    const std::string why = l->check_shape(global);
    CLEAVE_CHECK_ARG(why.empty(), "plan_redistribution: {} cannot lay out a tensor of shape {}: {}",
                     l->to_string(), global.to_string(), why);
  }
  // The partial axes are compared on the common device matrix: axis numbers of two different
  // matrices name different devices ([2, 2] partial (0) is not [4] partial (0)).
  bool same_partial = !to.is_partial();
  if (!same_partial) {
    const Layout f = from.normalized(), t = to.normalized();
    UnifiedMatrix u;
    same_partial = unify_device_matrices(f.device_matrix(), t.device_matrix(), u) &&
                   on_common(f, u, u.a_axes).partial() == on_common(t, u, u.b_axes).partial();
  }
  CLEAVE_CHECK_ARG(same_partial,
                   "plan_redistribution: the target {} is partial over other axes than {}; "
                   "expected a complete target or the same partial axes",
                   to.to_string(), from.to_string());
  // No step turns a pending max into a pending sum: such a target has no plan.
  CLEAVE_CHECK_ARG(!to.is_partial() || to.partial_op() == from.partial_op(),
                   "plan_redistribution: the target {} holds pending {} reductions but {} holds "
                   "pending {} ones; expected a complete target or the same reduction",
                   to.to_string(), partial_op_name(to.partial_op()), from.to_string(),
                   partial_op_name(from.partial_op()));
}

}  // namespace

const RedistributionPlan& plan_redistribution(const Layout& from, const Layout& to,
                                              const Shape& global, DType dtype) {
  // The key is the layouts' and shape's numbers (formatting them as text cost more than the
  // propagation's whole choice), built in a buffer of this thread: the strategy search asks
  // for millions of plans, almost all cached, so a hit allocates nothing and checks nothing (the
  // same key passed the checks when it was planned).
  // The cache is never destroyed: freeing its hundreds of thousands of plans at exit took
  // seconds after a strategy search on 1024 devices, and the process is ending anyway.
  static std::mutex mutex;
  static auto& cache = *new std::unordered_map<std::vector<int64_t>, RedistributionPlan, KeyHash>;
  thread_local std::vector<int64_t> key;
  key.clear();
  key.push_back(t_alltoall ? 1 : 0);
  key.push_back(static_cast<int64_t>(dtype));
  key.push_back(global.rank());
  auto add = [](const Layout& l) {
    key.push_back(static_cast<int64_t>(l.device_matrix().size()));
    key.insert(key.end(), l.device_matrix().begin(), l.device_matrix().end());
    for (const Layout::DimAxes& axes : l.tensor_map()) {
      key.push_back(static_cast<int64_t>(axes.size()));
      key.insert(key.end(), axes.begin(), axes.end());
    }
    key.push_back(static_cast<int64_t>(l.partial().size()));
    key.insert(key.end(), l.partial().begin(), l.partial().end());
    key.push_back(static_cast<int64_t>(l.partial_op()));
  };
  add(from);
  add(to);
  key.insert(key.end(), global.dims().begin(), global.dims().end());
  {
    std::lock_guard<std::mutex> lock(mutex);
    auto it = cache.find(key);
    if (it != cache.end()) return it->second;  // references stay valid as the map grows
  }
  check_redistribution(from, to, global);
  RedistributionPlan plan = plan_uncached(from, to, global, dtype);
  std::lock_guard<std::mutex> lock(mutex);
  return cache.emplace(key, std::move(plan)).first->second;
}

AllToAllScope::AllToAllScope(bool enabled) : previous_(t_alltoall) { t_alltoall = enabled; }
AllToAllScope::~AllToAllScope() { t_alltoall = previous_; }

}  // namespace cleave::parallel

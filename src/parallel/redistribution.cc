// Redistribution planning (NOTE [Redistribution] in cleave/parallel/redistribution.h).
#include "cleave/parallel/redistribution.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <array>
#include <cstring>
#include <map>
#include <mutex>
#include <queue>
#include <set>
#include <tuple>
#include <type_traits>
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

// NOTE [Packed search layouts]
// Every layout one search meets is on the target's device matrix and pends the start's reduction
// (if any), so the search keeps only what differs between them: each dimension's axes, in order
// and concatenated, and the partial axes as bits. Such a layout is a few dozen bytes held by
// value: the search allocates nothing per layout it meets, and its buffers are reused from one
// plan to the next on a thread. (Building a Layout, three vectors, for every step tried, and a
// key for each, took most of the strategy search's time at 1024 devices, which plans hundreds of
// thousands of redistributions.) Layouts are built only for the steps of the plan found. The
// steps are tried in the same order and compared by the same (bytes, steps) as before, so the
// plans are the same.
struct Packed {
  static constexpr int kMaxAxes = 32;  // device axes of size > 1: 2^32 devices and more
  static constexpr int kMaxDims = 32;  // tensor dimensions

  uint32_t partial = 0;  // bit a: pending over axis a
  uint32_t mapped = 0;   // bit a: axis a splits a dimension
  uint8_t rank = 0;
  std::array<uint8_t, kMaxDims + 1> start{};  // dim d's axes are axes[start[d], start[d + 1])
  std::array<uint8_t, kMaxAxes> axes{};       // unused entries 0, so that == compares bytes
  std::array<uint8_t, 2> zero{};              // no padding: every byte is a member's

  bool operator==(const Packed& o) const { return std::memcmp(this, &o, sizeof(Packed)) == 0; }
  uint64_t hash() const {
    uint64_t words[sizeof(Packed) / 8 + 1] = {};
    std::memcpy(words, this, sizeof(Packed));
    uint64_t h = 1469598103934665603ull;
    for (uint64_t w : words) h = (h ^ w) * 1099511628211ull;
    return h ^ (h >> 29);
  }
  int count(int64_t d) const {
    return start[static_cast<size_t>(d + 1)] - start[static_cast<size_t>(d)];
  }
  const uint8_t* dim_axes(int64_t d) const { return axes.data() + start[static_cast<size_t>(d)]; }
  int last(int64_t d) const { return dim_axes(d)[count(d) - 1]; }
  // Axis `a` appended to dimension d.
  void push(int64_t d, int a) {
    const size_t at = start[static_cast<size_t>(d + 1)];
    std::copy_backward(axes.begin() + at, axes.begin() + start[rank],
                       axes.begin() + start[rank] + 1);
    axes[at] = static_cast<uint8_t>(a);
    for (size_t e = static_cast<size_t>(d + 1); e <= rank; ++e) ++start[e];
    mapped |= 1u << a;
  }
  // The last k axes of dimension d dropped.
  void pop(int64_t d, int k) {
    const size_t end = start[static_cast<size_t>(d + 1)], at = end - static_cast<size_t>(k);
    for (size_t i = at; i < end; ++i) mapped &= ~(1u << axes[i]);
    std::copy(axes.begin() + end, axes.begin() + start[rank], axes.begin() + at);
    std::fill(axes.begin() + start[rank] - k, axes.begin() + start[rank], 0);
    for (size_t e = static_cast<size_t>(d + 1); e <= rank; ++e) start[e] -= static_cast<uint8_t>(k);
  }
};
static_assert(std::has_unique_object_representations_v<Packed>);

Packed pack(const Layout& l) {
  CLEAVE_CHECK_ARG(l.tensor_rank() <= Packed::kMaxDims &&
                       static_cast<int>(l.device_matrix().size()) <= Packed::kMaxAxes,
                   "plan_redistribution: {} has {} dimensions on {} device axes; expected at most "
                   "{} of each",
                   l.to_string(), l.tensor_rank(), l.device_matrix().size(), Packed::kMaxDims);
  Packed p;
  p.rank = static_cast<uint8_t>(l.tensor_rank());
  size_t n = 0;
  for (size_t d = 0; d < l.tensor_map().size(); ++d) {
    p.start[d] = static_cast<uint8_t>(n);
    for (int a : l.tensor_map()[d]) {
      p.axes[n++] = static_cast<uint8_t>(a);
      p.mapped |= 1u << a;
    }
  }
  p.start[static_cast<size_t>(p.rank)] = static_cast<uint8_t>(n);
  for (int a : l.partial()) p.partial |= 1u << a;
  return p;
}

std::vector<int> axes_of_mask(uint32_t mask) {
  std::vector<int> out;
  for (int a = 0; a < Packed::kMaxAxes; ++a) {
    if ((mask >> a) & 1) out.push_back(a);
  }
  return out;
}

// A step tried: its kind and operands, and the layout after it. An AllGather's axes are the last
// `gathered` of its dimension in the layout before it.
struct Move {
  Kind kind = Kind::kSlice;
  int8_t dim = -1, concat_dim = -1, axis = -1, gathered = 0;
  uint32_t reduced = 0;  // AllReduce: its axes
  double bytes = 0;
  Packed after;
};

// A layout reached: by `move` from visit `parent` (the start's move is a placeholder holding only
// the start).
struct Visit {
  double bytes;
  size_t steps;
  int parent;
  Move move;
};

// The layouts met by one search, by their best visit: open addressing over a power-of-two table
// whose slots name a visit (-1: empty), reused from plan to plan.
class SeenTable {
 public:
  struct Slot {
    int64_t best = -1;
    uint64_t hash = 0;
    bool done = false;
  };
  // Empties the slots the last search filled (a table grown for one long search stays grown).
  void clear() {
    if (slots_.empty()) slots_.resize(64);
    for (size_t i : filled_) slots_[i] = Slot{};
    filled_.clear();
  }
  // The slot of `p` and whether it was new (then naming `visit`).
  std::pair<Slot*, bool> find_or_add(const Packed& p, const std::vector<Visit>& visits,
                                     size_t visit) {
    if (2 * (filled_.size() + 1) > slots_.size()) grow();
    const uint64_t h = p.hash();
    for (size_t i = h & (slots_.size() - 1);; i = (i + 1) & (slots_.size() - 1)) {
      Slot& s = slots_[i];
      if (s.best < 0) {
        s = {static_cast<int64_t>(visit), h, false};
        filled_.push_back(i);
        return {&s, true};
      }
      if (s.hash == h && visits[static_cast<size_t>(s.best)].move.after == p) return {&s, false};
    }
  }

 private:
  void grow() {
    old_.clear();
    for (size_t i : filled_) old_.push_back(slots_[i]);
    slots_.assign(slots_.size() * 2, Slot{});
    filled_.clear();
    for (const Slot& s : old_) {
      size_t i = s.hash & (slots_.size() - 1);
      while (slots_[i].best >= 0) i = (i + 1) & (slots_.size() - 1);
      slots_[i] = s;
      filled_.push_back(i);
    }
  }
  std::vector<Slot> slots_, old_;  // old_: grow's copy, kept for its capacity
  std::vector<size_t> filled_;     // the slots in use
};

struct Search {
  const Layout& target;
  const Shape& global;
  double element_bytes;
  bool alltoall = t_alltoall;

  int64_t axis_size(int a) const { return target.device_matrix()[static_cast<size_t>(a)]; }
  int64_t splits(const Packed& l, int64_t d) const {
    int64_t n = 1;
    for (int i = 0; i < l.count(d); ++i) n *= axis_size(l.dim_axes(d)[i]);
    return n;
  }
  double local_bytes(const Packed& l) const {
    double n = element_bytes;
    for (int64_t d = 0; d < l.rank; ++d) {
      n *= static_cast<double>(global[d]) / static_cast<double>(splits(l, d));
    }
    return n;
  }
  // Whether dim d's axes are a prefix of its target axes, with `next` its next target axis.
  bool next_target_axis(const Packed& l, const Packed& want, int64_t d, int* next) const {
    const int have = l.count(d);
    if (have >= want.count(d) ||
        !std::equal(l.dim_axes(d), l.dim_axes(d) + have, want.dim_axes(d))) {
      return false;
    }
    *next = want.dim_axes(d)[have];
    return true;
  }

  // Every step that can follow `l`, into `out` (in the order the plans' ties depend on).
  void moves(const Packed& l, const Packed& want, std::vector<Move>& out) const {
    out.clear();
    const double m = local_bytes(l);
    // Pending reductions the target does not keep, and every subset of them reduced.
    const uint32_t pending = l.partial & ~want.partial;
    int pend[Packed::kMaxAxes];
    size_t num_pending = 0;
    for (int a = 0; a < Packed::kMaxAxes; ++a) {
      if ((pending >> a) & 1) pend[num_pending++] = a;
    }
    const size_t subsets = size_t{1} << num_pending;
    for (size_t mask = 1; mask < subsets; ++mask) {
      uint32_t reduced = 0;
      double n = 1;
      for (size_t i = 0; i < num_pending; ++i) {
        if ((mask >> i) & 1) {
          reduced |= 1u << pend[i];
          n *= static_cast<double>(axis_size(pend[i]));
        }
      }
      Move& s = out.emplace_back(Move{
          .kind = Kind::kAllReduce, .reduced = reduced, .bytes = 2 * m * (n - 1) / n, .after = l});
      s.after.partial &= ~reduced;
    }
    for (int64_t d = 0; d < l.rank; ++d) {
      int next = -1;
      const bool grows = next_target_axis(l, want, d, &next);
      const bool divides = grows && global[d] % (splits(l, d) * axis_size(next)) == 0;
      const auto dim = static_cast<int8_t>(d);
      // ReduceScatter of a pending sum into d.
      if (divides && op == PartialOp::kSum && ((pending >> next) & 1)) {
        const double n = static_cast<double>(axis_size(next));
        Move& s = out.emplace_back(Move{.kind = Kind::kReduceScatter,
                                        .dim = dim,
                                        .axis = static_cast<int8_t>(next),
                                        .bytes = m * (n - 1) / n,
                                        .after = l});
        s.after.push(d, next);
        s.after.partial &= ~(1u << next);
      }
      // Slice over a replica axis.
      if (divides && !(((l.mapped | l.partial) >> next) & 1)) {
        Move& s = out.emplace_back(
            Move{.kind = Kind::kSlice, .dim = dim, .axis = static_cast<int8_t>(next), .after = l});
        s.after.push(d, next);
      }
      // AllGather of the last k axes.
      double n = 1;
      for (int k = 1; k <= l.count(d); ++k) {
        n *= static_cast<double>(axis_size(l.dim_axes(d)[l.count(d) - k]));
        Move& s = out.emplace_back(Move{.kind = Kind::kAllGather,
                                        .dim = dim,
                                        .gathered = static_cast<int8_t>(k),
                                        .bytes = m * (n - 1),
                                        .after = l});
        s.after.pop(d, k);
      }
      // AlltoAll moving the last axis of another dim x to d.
      if (!divides || !alltoall) continue;
      for (int64_t x = 0; x < l.rank; ++x) {
        if (x == d || l.count(x) == 0 || l.last(x) != next) continue;
        const double n_next = static_cast<double>(axis_size(next));
        Move& s = out.emplace_back(Move{.kind = Kind::kAllToAll,
                                        .dim = dim,
                                        .concat_dim = static_cast<int8_t>(x),
                                        .axis = static_cast<int8_t>(next),
                                        .bytes = m * (n_next - 1) / n_next,
                                        .after = l});
        s.after.pop(x, 1);
        s.after.push(d, next);
      }
    }
  }

  Layout unpack(const Packed& p) const {
    std::vector<Layout::DimAxes> map(p.rank);
    for (int64_t d = 0; d < p.rank; ++d) {
      map[static_cast<size_t>(d)].assign(p.dim_axes(d), p.dim_axes(d) + p.count(d));
    }
    return Layout(target.device_matrix(), std::move(map), axes_of_mask(p.partial), op);
  }
  RedistributionStep step_of(const Move& move, const Packed& before) const {
    RedistributionStep s{.kind = move.kind,
                         .dev = target.device_matrix(),
                         .dim = move.dim,
                         .concat_dim = move.concat_dim,
                         .after = unpack(move.after),
                         .bytes = move.bytes};
    switch (move.kind) {
      case Kind::kAllReduce:
        s.axes = axes_of_mask(move.reduced);
        s.op = op;
        s.dim = -1;
        break;
      case Kind::kReduceScatter:
        s.op = op;
        s.axes = {move.axis};
        break;
      case Kind::kAllGather: {
        const uint8_t* end = before.dim_axes(move.dim) + before.count(move.dim);
        s.axes.assign(end - move.gathered, end);
        break;
      }
      default:
        s.axes = {move.axis};
    }
    return s;
  }

  int64_t group_of(const Move& move, const Packed& before) const {
    int64_t n = 1;
    switch (move.kind) {
      case Kind::kAllReduce:
        for (int a = 0; a < Packed::kMaxAxes; ++a) {
          if ((move.reduced >> a) & 1) n *= axis_size(a);
        }
        return n;
      case Kind::kAllGather:
        for (int k = 1; k <= move.gathered; ++k) {
          n *= axis_size(before.dim_axes(move.dim)[before.count(move.dim) - k]);
        }
        return n;
      default:
        return axis_size(move.axis);
    }
  }
  void append(RedistributionPlan& out, const Move& move, const Packed& before) const {
    out.steps.push_back(step_of(move, before));
  }
  void append(RedistributionCost& out, const Move& move, const Packed& before) const {
    out.steps.push_back({move.kind, group_of(move, before), move.bytes});
  }

  // Dijkstra over layouts from `start` to the target (same matrix): the plan found, as a
  // RedistributionPlan or its RedistributionCost.
  template <class Out>
  Out run(const Layout& start) {
    struct Entry {
      double bytes;
      size_t steps;
      size_t id;
      bool operator>(const Entry& o) const {
        return std::tie(bytes, steps, id) > std::tie(o.bytes, o.steps, o.id);
      }
    };
    // One search's buffers, kept by its thread.
    struct Scratch {
      std::vector<Visit> visits;
      std::vector<Entry> queue;  // a min-heap
      std::vector<Move> moves;
      SeenTable seen;
    };
    thread_local Scratch scratch;
    auto& [visits, queue, tried, seen] = scratch;
    op = start.partial_op();
    const Packed want = pack(target);
    visits.clear();
    queue.clear();
    seen.clear();
    visits.push_back({0, 0, -1, Move{.after = pack(start)}});
    seen.find_or_add(visits[0].move.after, visits, 0);
    queue.push_back({0, 0, 0});
    while (!queue.empty()) {
      std::pop_heap(queue.begin(), queue.end(), std::greater<>{});
      const Entry e = queue.back();
      queue.pop_back();
      const Packed here = visits[e.id].move.after;  // visits grows below
      SeenTable::Slot* mine = seen.find_or_add(here, visits, e.id).first;
      if (mine->done) continue;
      mine->done = true;
      if (here == want) {
        std::vector<size_t> path;
        for (int v = static_cast<int>(e.id); visits[static_cast<size_t>(v)].parent >= 0;
             v = visits[static_cast<size_t>(v)].parent) {
          path.push_back(static_cast<size_t>(v));
        }
        Out out;
        out.bytes = visits[e.id].bytes;
        for (auto it = path.rbegin(); it != path.rend(); ++it) {
          const Visit& v = visits[*it];
          append(out, v.move, visits[static_cast<size_t>(v.parent)].move.after);
        }
        return out;
      }
      moves(here, want, tried);
      const double here_bytes = visits[e.id].bytes;
      const size_t steps = visits[e.id].steps + 1;
      for (const Move& s : tried) {
        const double bytes = here_bytes + s.bytes;
        auto [slot, fresh] = seen.find_or_add(s.after, visits, visits.size());
        if (!fresh) {
          const Visit& best = visits[static_cast<size_t>(slot->best)];
          if (std::tie(best.bytes, best.steps) <= std::tie(bytes, steps)) continue;
          slot->best = static_cast<int64_t>(visits.size());
        }
        visits.push_back({bytes, steps, static_cast<int>(e.id), s});
        queue.push_back({bytes, steps, visits.size() - 1});
        std::push_heap(queue.begin(), queue.end(), std::greater<>{});
      }
    }
    CLEAVE_ASSERT(false, "no redistribution from {} to {}", start.to_string(), target.to_string());
    return {};
  }

  PartialOp op = PartialOp::kSum;  // the start's pending reduction (run sets it)
};

template <class Out>
Out plan_uncached(const Layout& from, const Layout& to, const Shape& global, DType dtype) {
  const Layout f = from.normalized(), t = to.normalized();
  const double element_bytes = static_cast<double>(dtype_size(dtype));
  UnifiedMatrix u;
  if (unify_device_matrices(f.device_matrix(), t.device_matrix(), u)) {
    const Layout target = on_common(t, u, u.b_axes);
    return Search{target, global, element_bytes}.run<Out>(on_common(f, u, u.a_axes));
  }
  // No common matrix: through the replicated tensor.
  const Layout whole = Layout::replicated(f.device_matrix(), f.tensor_rank());
  Out plan = Search{whole, global, element_bytes}.run<Out>(f);
  const Out rest = Search{t, global, element_bytes}.run<Out>(
      Layout::replicated(t.device_matrix(), t.tensor_rank()));
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

namespace {

// The plan, or its cost, of (from, to, global, dtype) from `cache`, planned on a miss.
template <class Out>
const Out& cached(const Layout& from, const Layout& to, const Shape& global, DType dtype) {
  // The key is the layouts' and shape's numbers (formatting them as text cost more than the
  // propagation's whole choice), built in a buffer of this thread: the strategy search asks
  // for millions of plans, almost all cached, so a hit allocates nothing and checks nothing (the
  // same key passed the checks when it was planned).
  // The cache is never destroyed: freeing its hundreds of thousands of plans at exit took
  // seconds after a strategy search on 1024 devices, and the process is ending anyway.
  static std::mutex mutex;
  static auto& cache = *new std::unordered_map<std::vector<int64_t>, Out, KeyHash>;
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
  Out plan = plan_uncached<Out>(from, to, global, dtype);
  std::lock_guard<std::mutex> lock(mutex);
  return cache.emplace(key, std::move(plan)).first->second;
}

}  // namespace

const RedistributionPlan& plan_redistribution(const Layout& from, const Layout& to,
                                              const Shape& global, DType dtype) {
  return cached<RedistributionPlan>(from, to, global, dtype);
}

const RedistributionCost& redistribution_cost(const Layout& from, const Layout& to,
                                              const Shape& global, DType dtype) {
  return cached<RedistributionCost>(from, to, global, dtype);
}

RedistributionCost cost_of(const RedistributionPlan& plan) {
  RedistributionCost cost{.bytes = plan.bytes};
  for (const RedistributionStep& step : plan.steps) {
    int64_t group = 1;
    for (int a : step.axes) group *= step.dev[static_cast<size_t>(a)];
    cost.steps.push_back({step.kind, group, step.bytes});
  }
  return cost;
}

AllToAllScope::AllToAllScope(bool enabled) : previous_(t_alltoall) { t_alltoall = enabled; }
AllToAllScope::~AllToAllScope() { t_alltoall = previous_; }

}  // namespace cleave::parallel

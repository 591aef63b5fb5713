// The dynamic-programming search on a cost graph (NOTE [Dynamic programming search] in
// cleave/parallel/search.h).
//
// Vocabulary. A *working node* is a node of the graph being reduced: an original cost node, or
// the product of two that a star elimination made (its candidates are pairs, its *members* the
// original nodes in it). A *front* is a list of *entries* (cost, memory, decision) sorted by cost
// with memory strictly falling; with no memory limit it keeps only its cheapest entry. A working
// node has a front per candidate, a working edge one per pair of its ends' candidates (an empty
// front: a forbidden pair). A *decision* records either "original node n takes candidate c" or
// the join of two decisions; an entry's decision, followed to its leaves, gives the candidate of
// every original node its cost counts. Combining fronts first computes the pairs' costs as
// *parts* (the decisions they would join), prunes, and makes decisions for the survivors only.
//
// NOTE [Single-entry fronts]
// With no memory limit every front holds one entry at most (prune keeps the cheapest), and the
// operator elimination, which for each pair (a, b) of its ends' candidates takes the least over
// the middle node's candidates c of edge(u, v)[a, c] + v[c] + edge(v, w)[c, b], is a (min, +)
// matrix product: at 1024 devices seed 001's ResNet-50 has products of 400 x 400 x 400, and
// building a Part per term and a vector per front made that most of the solve. So without a
// memory limit it runs on plain arrays of costs and memories (+inf for an empty front): each
// term is summed in the same order as sums() sums it, the winner is the first least term by
// (cost, memory) as prune() picks it, and its decision is joined as make() joins it, so the
// tables, the decisions and the plan replayed are those of the general code, bit for bit.
// The merge and contract (a leaf folded into its neighbour) take the same shortcut. An original
// edge is not made into fronts at all unless an elimination needs them (an edge elimination, a
// star, the exact solver, or a memory limit): its costs are read in place, which spares a front
// per cell (11 million at 1024 devices, most of them a parameter's forbidden pairs). Eliminated
// edges free their tables at once, and the eliminations read edges in place instead of copying
// their tables.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>
#include <deque>
#include <functional>
#include <limits>
#include <memory>

#include "cleave/core/error.h"
#include "cleave/parallel/search.h"
#include "parallel/search/candidates.h"

namespace cleave::parallel {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();
// The most candidate pairs an edge a star elimination makes may hold.
constexpr int64_t kMaxEdgeCells = int64_t{1} << 18;

struct Entry {
  double cost = 0, mem = 0;
  int32_t decision = -1;
};

// A front: its entries, sorted by cost with memory strictly falling. One entry is held in place
// and more in a vector on the heap: without a memory limit no front holds more than one (NOTE
// [Single-entry fronts]), and a table of a million cells then allocates nothing per cell.
class Front {
 public:
  Front() = default;
  Front(std::initializer_list<Entry> entries) {
    for (const Entry& e : entries) push_back(e);
  }
  Front(const Front& o)
      : one_(o.one_), many_(o.many_ ? std::make_unique<std::vector<Entry>>(*o.many_) : nullptr) {}
  Front(Front&&) noexcept = default;
  Front& operator=(const Front& o) {
    if (this != &o) *this = Front(o);
    return *this;
  }
  Front& operator=(Front&&) noexcept = default;

  bool empty() const { return size() == 0; }
  size_t size() const {
    if (many_) return many_->size();
    return one_.decision == kNoEntry ? 0 : 1;
  }
  const Entry* begin() const { return many_ ? many_->data() : &one_; }
  const Entry* end() const { return begin() + size(); }
  const Entry& operator[](size_t i) const { return begin()[i]; }
  const Entry& front() const { return *begin(); }
  const Entry& back() const { return begin()[size() - 1]; }
  void reserve(size_t) {}
  void clear() {
    many_.reset();
    one_.decision = kNoEntry;
  }
  void push_back(const Entry& e) {
    if (many_) {
      many_->push_back(e);
    } else if (empty()) {
      one_ = e;
    } else {
      many_ = std::make_unique<std::vector<Entry>>(std::vector<Entry>{one_, e});
    }
  }

 private:
  // one_'s decision when the front is empty (a real decision is -1 or an index).
  static constexpr int32_t kNoEntry = std::numeric_limits<int32_t>::min();
  Entry one_{0, 0, kNoEntry};                 // the entry of a front of one
  std::unique_ptr<std::vector<Entry>> many_;  // every entry of a front of two or more
};

struct Decision {
  int32_t node = -1, candidate = -1;  // node >= 0: original node `node` takes `candidate`
  int32_t a = -1, b = -1;             // node < 0: the join of decisions a and b
};

// An entry not made yet: its cost and memory, and the decisions it would join.
struct Part {
  double cost = 0, mem = 0;
  int32_t d[3] = {-1, -1, -1};
};

struct WorkNode {
  bool alive = true;
  int64_t candidates = 0;
  std::vector<Front> table;  // per candidate
  std::vector<int> edges;    // incident live edges
  std::vector<int> members;  // original nodes
};

struct WorkEdge {
  bool alive = true;
  int from = 0, to = 0;      // working nodes; `from` produces (for merge vs contract)
  std::vector<Front> table;  // [candidate of from][candidate of to]
  // Without a memory limit, an original edge's costs, read in place until an elimination needs
  // its fronts (then `table` is made and this is null; NOTE [Single-entry fronts]).
  const std::vector<double>* raw = nullptr;
};

class Engine {
 public:
  // The search on `g` (checked by the caller), or with drop_node >= 0 on `g` without candidate
  // `drop` of node `drop_node` (its edges' rows or columns removed, as a copy of the graph would
  // have them; the rest is read in place); the plan returned indexes g's candidates.
  Engine(const CostGraph& g, const SearchOptions& o, int drop_node = -1, int drop = -1)
      : g_(g),
        o_(o),
        use_memory_(g.memory_capacity_bytes > 0),
        drop_node_(drop_node),
        drop_(drop) {}

  SearchResult run() {
    init();
    reduce();
    return finish();
  }

 private:
  // ---- fronts ----

  int32_t join(int32_t a, int32_t b) {
    if (a < 0) return b;
    if (b < 0) return a;
    decisions_.push_back({-1, -1, a, b});
    return static_cast<int32_t>(decisions_.size() - 1);
  }

  // Pareto pruning: sorted by cost, memory strictly falling; only the cheapest with no limit.
  void prune(std::vector<Part>& parts) const {
    if (parts.size() <= 1) return;
    if (!use_memory_) {
      auto best = std::min_element(parts.begin(), parts.end(), [](const Part& x, const Part& y) {
        return x.cost < y.cost || (x.cost == y.cost && x.mem < y.mem);
      });
      const Part keep = *best;
      parts.assign(1, keep);
      return;
    }
    std::stable_sort(parts.begin(), parts.end(), [](const Part& x, const Part& y) {
      return x.cost < y.cost || (x.cost == y.cost && x.mem < y.mem);
    });
    size_t out = 0;
    double least = kInf;
    for (const Part& p : parts) {
      if (p.mem < least) {
        least = p.mem;
        parts[out++] = p;
      }
    }
    parts.resize(out);
  }

  Front make(std::vector<Part>& parts) {
    prune(parts);
    Front f;
    f.reserve(parts.size());
    for (const Part& p : parts) {
      f.push_back({p.cost, p.mem, join(join(p.d[0], p.d[1]), p.d[2])});
    }
    return f;
  }

  // Appends to `out` every sum of one entry of each front (two or three of them).
  static void sums(const Front& x, const Front& y, const Front* z, std::vector<Part>& out) {
    for (const Entry& a : x) {
      for (const Entry& b : y) {
        if (z == nullptr) {
          out.push_back({a.cost + b.cost, a.mem + b.mem, {a.decision, b.decision, -1}});
          continue;
        }
        for (const Entry& c : *z) {
          out.push_back({a.cost + b.cost + c.cost,
                         a.mem + b.mem + c.mem,
                         {a.decision, b.decision, c.decision}});
        }
      }
    }
  }

  // ---- the working graph ----

  // The front of edge e for candidate `a` of node `na` and `b` of its other end.
  // Requires the edge's fronts made (make_fronts).
  const Front& cell(const WorkEdge& e, int na, int64_t a, int64_t b) const {
    CLEAVE_ASSERT(e.raw == nullptr, "dynamic programming: an edge's fronts read before made");
    return e.table[at(e, na, a, b)];
  }

  size_t at(const WorkEdge& e, int na, int64_t a, int64_t b) const {
    const int64_t to_count = nodes_[static_cast<size_t>(e.to)].candidates;
    return static_cast<size_t>(e.from == na ? a * to_count + b : b * to_count + a);
  }

  // Without a memory limit: the one entry of that front of edge e into `out`, or false for an
  // empty front; an original edge's cost is read in place.
  bool single(const WorkEdge& e, int na, int64_t a, int64_t b, Entry& out) const {
    const size_t i = at(e, na, a, b);
    if (e.raw != nullptr) {
      const double c = (*e.raw)[i];
      if (std::isinf(c)) return false;
      out = {c, 0, -1};
      return true;
    }
    const Front& f = e.table[i];
    if (f.empty()) return false;
    out = f[0];
    return true;
  }

  // An original edge's fronts, made from its costs as init made every edge's before.
  static void make_fronts(WorkEdge& e) {
    if (e.raw == nullptr) return;
    e.table.reserve(e.raw->size());
    for (double c : *e.raw) e.table.push_back(std::isinf(c) ? Front{} : Front{{c, 0, -1}});
    e.raw = nullptr;
  }

  int other(const WorkEdge& e, int n) const { return e.from == n ? e.to : e.from; }

  // Removes edge e from the working graph and frees its table (nothing reads a dead edge).
  void unlink(int e) {
    WorkEdge& edge = edges_[static_cast<size_t>(e)];
    edge.alive = false;
    std::vector<Front>().swap(edge.table);
    edge.raw = nullptr;
    for (int n : {edge.from, edge.to}) {
      std::vector<int>& list = nodes_[static_cast<size_t>(n)].edges;
      list.erase(std::find(list.begin(), list.end(), e));
    }
  }

  // Adds an edge; one joining the same two nodes already absorbs it (edge elimination).
  void add_edge(WorkEdge edge) {
    for (int e : nodes_[static_cast<size_t>(edge.from)].edges) {
      WorkEdge& old = edges_[static_cast<size_t>(e)];
      if (other(old, edge.from) != edge.to) continue;
      make_fronts(old);
      make_fronts(edge);
      const int64_t nf = nodes_[static_cast<size_t>(old.from)].candidates;
      const int64_t nt = nodes_[static_cast<size_t>(old.to)].candidates;
      std::vector<Part> parts;
      for (int64_t a = 0; a < nf; ++a) {
        for (int64_t b = 0; b < nt; ++b) {
          parts.clear();
          Front& mine = old.table[static_cast<size_t>(a * nt + b)];
          sums(mine, cell(edge, old.from, a, b), nullptr, parts);
          mine = make(parts);
        }
      }
      ++counts_.edge;
      return;
    }
    const int id = static_cast<int>(edges_.size());
    nodes_[static_cast<size_t>(edge.from)].edges.push_back(id);
    nodes_[static_cast<size_t>(edge.to)].edges.push_back(id);
    edges_.push_back(std::move(edge));
  }

  void init() {
    for (size_t i = 0; i < g_.nodes.size(); ++i) {
      const CostNode& n = g_.nodes[i];
      const bool dropping = static_cast<int>(i) == drop_node_;
      WorkNode w;
      w.candidates = n.num_candidates() - (dropping ? 1 : 0);
      w.members = {static_cast<int>(i)};
      for (int64_t c = 0; c < n.num_candidates(); ++c) {
        if (dropping && c == drop_) continue;
        // The decision names g's candidate: the replayed plan indexes g.
        decisions_.push_back({static_cast<int32_t>(i), static_cast<int32_t>(c), -1, -1});
        w.table.push_back({{n.cost[static_cast<size_t>(c)], n.memory_bytes[static_cast<size_t>(c)],
                            static_cast<int32_t>(decisions_.size() - 1)}});
      }
      nodes_.push_back(std::move(w));
    }
    for (const CostEdge& e : g_.edges) {
      const std::vector<double>* costs = &e.cost;
      if (drop_node_ >= 0 && (e.from == drop_node_ || e.to == drop_node_)) {
        const int64_t cols = g_.nodes[static_cast<size_t>(e.to)].num_candidates();
        std::vector<double>& kept = reduced_.emplace_back();
        kept.reserve(e.cost.size());
        for (size_t k = 0; k < e.cost.size(); ++k) {
          const auto r = static_cast<int64_t>(k) / cols, c = static_cast<int64_t>(k) % cols;
          if ((e.from == drop_node_ && r == drop_) || (e.to == drop_node_ && c == drop_)) continue;
          kept.push_back(e.cost[k]);
        }
        costs = &kept;
      }
      WorkEdge w{true, e.from, e.to, {}, costs};
      if (use_memory_) make_fronts(w);
      add_edge(std::move(w));
    }
  }

  // ---- eliminations ----

  // A node with no edge: a finished component, summed into done_.
  void finish_component(int v) {
    WorkNode& n = nodes_[static_cast<size_t>(v)];
    std::vector<Part> parts;
    for (const Front& f : n.table) sums(done_, f, nullptr, parts);
    done_ = make(parts);
    n.alive = false;
    ++components_;
  }

  // Merge or contract: leaf v folded into its one neighbour.
  void eliminate_leaf(int v) {
    WorkNode& leaf = nodes_[static_cast<size_t>(v)];
    const int e = leaf.edges[0];
    const WorkEdge& edge = edges_[static_cast<size_t>(e)];  // edges_ does not grow here
    const int u = other(edge, v);
    WorkNode& keep = nodes_[static_cast<size_t>(u)];
    if (!use_memory_) {
      single_leaf(edge, leaf, u, keep);
    } else {
      leaf_fronts(edges_[static_cast<size_t>(e)], leaf, u, keep);
    }
    ++(edge.from == v ? counts_.merge : counts_.contract);
    unlink(e);  // last use of `edge`
    leaf.alive = false;
    push(u);
  }

  // The merge or contract in general: u's front for a gains the union over b of
  // edge(u, v)[a, b] + v[b].
  void leaf_fronts(WorkEdge& edge, const WorkNode& leaf, int u, WorkNode& keep) {
    make_fronts(edge);
    std::vector<Part> folded, parts;
    for (int64_t a = 0; a < keep.candidates; ++a) {
      folded.clear();
      for (int64_t b = 0; b < leaf.candidates; ++b) {
        sums(cell(edge, u, a, b), leaf.table[static_cast<size_t>(b)], nullptr, folded);
      }
      const Front side = make(folded);
      parts.clear();
      sums(keep.table[static_cast<size_t>(a)], side, nullptr, parts);
      keep.table[static_cast<size_t>(a)] = make(parts);
    }
  }

  // The same with no memory limit (NOTE [Single-entry fronts]): the first least
  // edge(u, v)[a, b] + v[b] over b, then added to u's entry, decisions joined as make() joins
  // them (the side's even where u's front is empty).
  void single_leaf(const WorkEdge& edge, const WorkNode& leaf, int u, WorkNode& keep) {
    for (int64_t a = 0; a < keep.candidates; ++a) {
      bool found = false;
      Entry side, e, l;
      int32_t de = -1, dl = -1;
      for (int64_t b = 0; b < leaf.candidates; ++b) {
        const Front& mine = leaf.table[static_cast<size_t>(b)];
        if (mine.empty() || !single(edge, u, a, b, e)) continue;
        l = mine[0];
        const double cost = e.cost + l.cost, mem = e.mem + l.mem;
        if (!found || cost < side.cost || (cost == side.cost && mem < side.mem)) {
          found = true;
          side = {cost, mem, -1};
          de = e.decision;
          dl = l.decision;
        }
      }
      Front& own = keep.table[static_cast<size_t>(a)];
      if (!found) {
        own.clear();
        continue;
      }
      side.decision = join(de, dl);
      if (own.empty()) continue;
      const Entry k = own[0];
      own = Front{{k.cost + side.cost, k.mem + side.mem, join(k.decision, side.decision)}};
    }
  }

  // Operator (or triangle): v with edges to u and w becomes an edge u-w.
  void eliminate_operator(int v) {
    WorkNode& mid = nodes_[static_cast<size_t>(v)];
    // References: edges_ grows only in add_edge, after the last use of these.
    const WorkEdge& left = edges_[static_cast<size_t>(mid.edges[0])];
    const WorkEdge& right = edges_[static_cast<size_t>(mid.edges[1])];
    const int u = other(left, v), w = other(right, v);
    const int64_t nu = nodes_[static_cast<size_t>(u)].candidates;
    const int64_t nw = nodes_[static_cast<size_t>(w)].candidates;
    bool joined = false;
    for (int e : nodes_[static_cast<size_t>(u)].edges) {
      if (other(edges_[static_cast<size_t>(e)], u) == w) joined = true;
    }
    WorkEdge edge{true, u, w, {}};
    edge.table.reserve(static_cast<size_t>(nu * nw));
    if (!use_memory_) {
      single_operator(left, mid, right, u, w, edge);
    } else {
      eliminate_operator_fronts(left, mid, right, u, w, edge);
    }
    ++(joined ? counts_.triangle : counts_.op);
    unlink(mid.edges[1]);
    unlink(mid.edges[0]);
    mid.alive = false;
    add_edge(std::move(edge));
    push(u);
    push(w);
  }

  // The operator elimination's fronts, in general (a memory limit: whole fronts).
  void eliminate_operator_fronts(const WorkEdge& left, const WorkNode& mid, const WorkEdge& right,
                                 int u, int w, WorkEdge& edge) {
    const int64_t nu = nodes_[static_cast<size_t>(u)].candidates;
    const int64_t nw = nodes_[static_cast<size_t>(w)].candidates;
    std::vector<Part> parts;
    for (int64_t a = 0; a < nu; ++a) {
      for (int64_t b = 0; b < nw; ++b) {
        parts.clear();
        for (int64_t c = 0; c < mid.candidates; ++c) {
          sums(cell(left, u, a, c), mid.table[static_cast<size_t>(c)], &cell(right, w, b, c),
               parts);
        }
        edge.table.push_back(make(parts));
      }
    }
  }

  // The operator elimination with no memory limit, where every front holds one entry at most
  // (NOTE [Single-entry fronts]): for each (a, b) the least over c of
  // edge(u, v)[a, c] + v[c] + edge(v, w)[c, b], a (min, +) product of two matrices through v's
  // costs, computed on plain arrays in the order the general code sums and picks.
  void single_operator(const WorkEdge& left, const WorkNode& mid, const WorkEdge& right, int u,
                       int w, WorkEdge& edge) {
    const int64_t nu = nodes_[static_cast<size_t>(u)].candidates;
    const int64_t nw = nodes_[static_cast<size_t>(w)].candidates;
    const int64_t nv = mid.candidates;
    // lm[a][c] = edge(u, v)[a, c] + v[c] (cost and memory), r[b][c] = edge(v, w)[c, b]; +inf
    // where a front is empty. Decisions are looked up for the winner only.
    std::vector<double> lm_cost(static_cast<size_t>(nu * nv)), lm_mem(lm_cost.size());
    std::vector<double> r_cost(static_cast<size_t>(nw * nv)), r_mem(r_cost.size());
    for (int64_t a = 0; a < nu; ++a) {
      for (int64_t c = 0; c < nv; ++c) {
        Entry l;
        const Front& m = mid.table[static_cast<size_t>(c)];
        const size_t i = static_cast<size_t>(a * nv + c);
        if (m.empty() || !single(left, u, a, c, l)) {
          lm_cost[i] = kInf;
          lm_mem[i] = 0;
        } else {
          lm_cost[i] = l.cost + m[0].cost;
          lm_mem[i] = l.mem + m[0].mem;
        }
      }
    }
    for (int64_t b = 0; b < nw; ++b) {
      for (int64_t c = 0; c < nv; ++c) {
        Entry r;
        const size_t i = static_cast<size_t>(b * nv + c);
        const bool some = single(right, w, b, c, r);
        r_cost[i] = some ? r.cost : kInf;
        r_mem[i] = some ? r.mem : 0;
      }
    }
    for (int64_t a = 0; a < nu; ++a) {
      const double* lc = &lm_cost[static_cast<size_t>(a * nv)];
      const double* lmem = &lm_mem[static_cast<size_t>(a * nv)];
      for (int64_t b = 0; b < nw; ++b) {
        const double* rc = &r_cost[static_cast<size_t>(b * nv)];
        const double* rmem = &r_mem[static_cast<size_t>(b * nv)];
        int64_t best = -1;
        double best_cost = kInf, best_mem = kInf;
        for (int64_t c = 0; c < nv; ++c) {
          const double cost = lc[c] + rc[c];
          if (cost > best_cost || std::isinf(cost)) continue;
          const double mem = lmem[c] + rmem[c];
          if (cost < best_cost || mem < best_mem) {
            best = c;
            best_cost = cost;
            best_mem = mem;
          }
        }
        if (best < 0) {
          edge.table.emplace_back();
          continue;
        }
        Entry l, r;
        single(left, u, a, best, l);
        single(right, w, b, best, r);
        const int32_t d =
            join(join(l.decision, mid.table[static_cast<size_t>(best)][0].decision), r.decision);
        edge.table.push_back(Front{{best_cost, best_mem, d}});
      }
    }
  }

  // Star: v (three edges or more) and its neighbour u become one node of their candidate pairs.
  // False when every such product would exceed the limits.
  bool eliminate_star() {
    int best_v = -1, best_u = -1;
    int64_t best = 0;
    for (size_t v = 0; v < nodes_.size(); ++v) {
      const WorkNode& n = nodes_[v];
      if (!n.alive || n.edges.size() < 3) continue;
      for (int e : n.edges) {
        const int u = other(edges_[static_cast<size_t>(e)], static_cast<int>(v));
        const WorkNode& m = nodes_[static_cast<size_t>(u)];
        const int64_t product = n.candidates * m.candidates;
        if (product > o_.max_star_candidates || (best_v >= 0 && product >= best)) continue;
        bool fits = true;
        for (const WorkNode* side : {&n, &m}) {
          for (int f : side->edges) {
            const int x =
                other(edges_[static_cast<size_t>(f)], side == &n ? static_cast<int>(v) : u);
            fits = fits && product * nodes_[static_cast<size_t>(x)].candidates <= kMaxEdgeCells;
          }
        }
        if (!fits) continue;
        best_v = static_cast<int>(v);
        best_u = u;
        best = product;
      }
    }
    if (best_v < 0) return false;
    merge_pair(best_v, best_u);
    ++counts_.star;
    return true;
  }

  void merge_pair(int v, int u) {
    const int64_t nv = nodes_[static_cast<size_t>(v)].candidates;
    const int64_t nu = nodes_[static_cast<size_t>(u)].candidates;
    int between = -1;
    for (int e : nodes_[static_cast<size_t>(v)].edges) {
      if (other(edges_[static_cast<size_t>(e)], v) == u) between = e;
    }
    CLEAVE_ASSERT(between >= 0, "star elimination of nodes {} and {} that share no edge", v, u);
    make_fronts(edges_[static_cast<size_t>(between)]);
    const WorkEdge link = edges_[static_cast<size_t>(between)];
    unlink(between);
    const int p = static_cast<int>(nodes_.size());
    WorkNode pair;
    pair.candidates = nv * nu;
    std::vector<Part> parts;
    // Candidate (a, b) of the pair is a * nu + b: v's a, u's b.
    for (int64_t a = 0; a < nv; ++a) {
      for (int64_t b = 0; b < nu; ++b) {
        parts.clear();
        sums(nodes_[static_cast<size_t>(v)].table[static_cast<size_t>(a)],
             nodes_[static_cast<size_t>(u)].table[static_cast<size_t>(b)], &cell(link, v, a, b),
             parts);
        pair.table.push_back(make(parts));
      }
    }
    for (int n : {v, u}) {
      const std::vector<int>& m = nodes_[static_cast<size_t>(n)].members;
      pair.members.insert(pair.members.end(), m.begin(), m.end());
    }
    nodes_.push_back(std::move(pair));
    for (int side : {v, u}) {
      const std::vector<int> incident = nodes_[static_cast<size_t>(side)].edges;
      for (int e : incident) {
        make_fronts(edges_[static_cast<size_t>(e)]);
        const WorkEdge old = edges_[static_cast<size_t>(e)];
        const int x = other(old, side);
        const int64_t nx = nodes_[static_cast<size_t>(x)].candidates;
        WorkEdge edge{true, p, x, {}};
        edge.table.reserve(static_cast<size_t>(nv * nu * nx));
        for (int64_t c = 0; c < nv * nu; ++c) {
          const int64_t mine = side == v ? c / nu : c % nu;
          for (int64_t d = 0; d < nx; ++d) edge.table.push_back(cell(old, side, mine, d));
        }
        unlink(e);
        add_edge(std::move(edge));
        push(x);
      }
      nodes_[static_cast<size_t>(side)].alive = false;
    }
    push(p);
  }

  void push(int v) { queue_.push_back(v); }

  void reduce() {
    for (size_t v = 0; v < nodes_.size(); ++v) push(static_cast<int>(v));
    for (;;) {
      while (!queue_.empty()) {
        const int v = queue_.front();
        queue_.pop_front();
        const WorkNode& n = nodes_[static_cast<size_t>(v)];
        if (!n.alive) continue;
        if (n.edges.empty()) {
          finish_component(v);
        } else if (n.edges.size() == 1) {
          eliminate_leaf(v);
        } else if (n.edges.size() == 2) {
          eliminate_operator(v);
        }
      }
      if (!eliminate_star()) break;
    }
  }

  // ---- the exact solver and the replay ----

  // The front of one plan of the nodes left: their candidates `pick`, their edges, and done_.
  Front plan_front(const std::vector<int>& left, const std::vector<int64_t>& pick, bool decide) {
    Front acc = done_;
    std::vector<Part> parts;
    auto add = [&](const Front& f) {
      parts.clear();
      sums(acc, f, nullptr, parts);
      if (decide) {
        acc = make(parts);
      } else {
        prune(parts);
        acc.clear();
        for (const Part& p : parts) acc.push_back({p.cost, p.mem, -1});
      }
    };
    for (size_t i = 0; i < left.size(); ++i) {
      add(nodes_[static_cast<size_t>(left[i])].table[static_cast<size_t>(pick[i])]);
    }
    for (size_t i = 0; i < left.size(); ++i) {
      for (int e : nodes_[static_cast<size_t>(left[i])].edges) {
        const WorkEdge& edge = edges_[static_cast<size_t>(e)];
        if (edge.from != left[i]) continue;
        const size_t j =
            static_cast<size_t>(std::find(left.begin(), left.end(), edge.to) - left.begin());
        add(cell(edge, left[i], pick[i], pick[j]));
      }
    }
    return acc;
  }

  // The best entry of `f` within the memory limit, or null.
  const Entry* best_of(const Front& f) const {
    for (const Entry& e : f) {
      if (!use_memory_ || e.mem <= g_.memory_capacity_bytes) return &e;
    }
    return nullptr;
  }

  std::string names_of(const std::vector<int>& left) const {
    std::vector<std::string> names;
    for (int v : left) {
      for (int m : nodes_[static_cast<size_t>(v)].members) {
        names.push_back(g_.nodes[static_cast<size_t>(m)].name);
      }
    }
    return fmt::format("{}", fmt::join(names, ", "));
  }

  SearchResult finish() {
    for (WorkEdge& e : edges_) {
      if (e.alive) make_fronts(e);
    }
    std::vector<int> left;
    double combinations = 1;
    for (size_t v = 0; v < nodes_.size(); ++v) {
      if (!nodes_[v].alive) continue;
      left.push_back(static_cast<int>(v));
      combinations *= static_cast<double>(nodes_[v].candidates);
    }
    CLEAVE_CHECK_ARG(
        combinations <= o_.max_exact_combinations,
        "dynamic programming: after {} eliminations, {} nodes of the cost graph remain that no "
        "elimination reduces (each joined to three others or more): {}; their candidates "
        "combine in {:.3g} ways, more than max_exact_combinations ({:.3g}) allows the exact "
        "solver; give some of these operators a strategy with shard(), raise the limit, or use "
        "search_mode \"sharding_propagation\"",
        counts_.total(), left.size(), names_of(left), combinations, o_.max_exact_combinations);
    // Branch and bound over the nodes left, on the cheapest entries (costs are >= 0).
    std::vector<int64_t> pick(left.size(), 0), best_pick;
    double best_cost = kInf, least_memory = kInf;
    std::vector<double> cheapest(left.size() + 1, 0);
    for (size_t i = left.size(); i-- > 0;) {
      double m = kInf;
      for (const Front& f : nodes_[static_cast<size_t>(left[i])].table) {
        if (!f.empty()) m = std::min(m, f.front().cost);
      }
      cheapest[i] = cheapest[i + 1] + m;
    }
    const double base = done_.empty() ? kInf : done_.front().cost;
    std::function<void(size_t, double)> walk = [&](size_t i, double partial) {
      if (!use_memory_ && base + partial + cheapest[i] >= best_cost) return;
      if (i == left.size()) {
        const Front f = plan_front(left, pick, false);
        if (!f.empty()) least_memory = std::min(least_memory, f.back().mem);
        const Entry* e = best_of(f);
        if (e != nullptr && e->cost < best_cost) {
          best_cost = e->cost;
          best_pick = pick;
        }
        return;
      }
      const WorkNode& n = nodes_[static_cast<size_t>(left[i])];
      for (int64_t c = 0; c < n.candidates; ++c) {
        const Front& own = n.table[static_cast<size_t>(c)];
        if (own.empty()) continue;
        double cost = partial + own.front().cost;
        pick[i] = c;
        bool allowed = true;
        for (int e : n.edges) {
          const WorkEdge& edge = edges_[static_cast<size_t>(e)];
          const int x = other(edge, left[i]);
          const size_t j =
              static_cast<size_t>(std::find(left.begin(), left.end(), x) - left.begin());
          if (j >= i) continue;
          const Front& f = cell(edge, left[i], c, pick[j]);
          if (f.empty()) {
            allowed = false;
            break;
          }
          cost += f.front().cost;
        }
        if (allowed) walk(i + 1, cost);
      }
    };
    if (!done_.empty()) walk(0, 0);
    if (best_pick.empty() && left.empty() && !done_.empty()) {
      least_memory = done_.back().mem;
      if (best_of(done_) != nullptr) best_cost = best_of(done_)->cost;
    }
    CLEAVE_CHECK_ARG(std::isfinite(least_memory) || !std::isinf(best_cost),
                     "dynamic programming: every plan of the cost graph uses a forbidden pair of "
                     "candidates (a parameter laid out in two ways by operators whose strategies "
                     "were given); give its users strategies that read it alike");
    CLEAVE_CHECK_ARG(std::isfinite(best_cost),
                     "dynamic programming: no plan fits the memory capacity of {:.0f} bytes per "
                     "rank; the smallest memory any plan needs is {:.0f} bytes ({:.2f} MiB); "
                     "raise the capacity or use more devices",
                     g_.memory_capacity_bytes, least_memory, least_memory / (1 << 20));
    const Front f = plan_front(left, best_pick.empty() ? pick : best_pick, true);
    const Entry* chosen = best_of(f);
    CLEAVE_ASSERT(chosen != nullptr, "the exact solver's plan vanished on replay");
    SearchResult r;
    r.choice = replay(chosen->decision);
    r.cost = g_.cost(r.choice);
    r.memory_bytes = g_.memory(r.choice);
    CLEAVE_ASSERT(std::abs(r.cost - chosen->cost) <= 1e-9 * std::max(1.0, std::abs(r.cost)),
                  "dynamic programming: the replayed plan costs {} but the search found {}", r.cost,
                  chosen->cost);
    r.eliminations = counts_;
    r.components = components_;
    r.exact_nodes = static_cast<int>(left.size());
    r.exact_combinations = left.empty() ? 0 : combinations;
    return r;
  }

  std::vector<int> replay(int32_t root) const {
    std::vector<int> choice(g_.nodes.size(), -1);
    std::vector<int32_t> stack{root};
    while (!stack.empty()) {
      const int32_t d = stack.back();
      stack.pop_back();
      if (d < 0) continue;
      const Decision& dec = decisions_[static_cast<size_t>(d)];
      if (dec.node >= 0) {
        int& c = choice[static_cast<size_t>(dec.node)];
        CLEAVE_ASSERT(c < 0 || c == dec.candidate, "node {} decided twice ({} and {})", dec.node, c,
                      dec.candidate);
        c = dec.candidate;
      } else {
        stack.push_back(dec.a);
        stack.push_back(dec.b);
      }
    }
    for (size_t i = 0; i < choice.size(); ++i) {
      CLEAVE_ASSERT(choice[i] >= 0, "the replay left node {} ({}) undecided", i, g_.nodes[i].name);
    }
    return choice;
  }

  const CostGraph& g_;
  const SearchOptions& o_;
  const bool use_memory_;
  const int drop_node_, drop_;               // a candidate left out (runner-ups), or -1
  std::deque<std::vector<double>> reduced_;  // the dropped node's edges without it
  std::vector<WorkNode> nodes_;
  std::vector<WorkEdge> edges_;
  std::vector<Decision> decisions_;
  std::deque<int> queue_;
  Front done_{{0, 0, -1}};  // the sum of the finished components
  EliminationCounts counts_;
  int components_ = 0;
};

}  // namespace

SearchResult solve_dynamic_programming(const CostGraph& graph, const SearchOptions& options) {
  graph.check();
  return Engine(graph, options).run();
}

namespace search_detail {

SearchResult solve_without_candidate(const CostGraph& graph, int node, int candidate,
                                     const SearchOptions& options) {
  CLEAVE_CHECK_ARG(node >= 0 && static_cast<size_t>(node) < graph.nodes.size() && candidate >= 0 &&
                       candidate < graph.nodes[static_cast<size_t>(node)].num_candidates() &&
                       graph.nodes[static_cast<size_t>(node)].num_candidates() > 1,
                   "solve_without_candidate: node {} candidate {} of a graph of {} nodes; "
                   "expected a candidate of a node that has another",
                   node, candidate, graph.nodes.size());
  return Engine(graph, options, node, candidate).run();
}

}  // namespace search_detail

}  // namespace cleave::parallel

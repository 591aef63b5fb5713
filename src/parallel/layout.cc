// Layouts (NOTE [Layouts] in cleave/parallel/layout.h).
#include "cleave/parallel/layout.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cctype>

#include "cleave/core/error.h"

namespace cleave::parallel {
namespace {

// The most devices a device matrix may have (ranks are int in places).
constexpr int64_t kMaxDevices = 2147483647;

}  // namespace

int64_t device_count(const DeviceMatrix& dev) {
  int64_t n = 1;
  for (int64_t d : dev) {
    // A matrix read from a file can hold any sizes: their product must not overflow.
    CLEAVE_CHECK_ARG(!__builtin_mul_overflow(n, d, &n),
                     "device matrix {} has more devices than an int64 holds; expected at most {}",
                     device_matrix_to_string(dev), kMaxDevices);
  }
  return n;
}

namespace {

// A device matrix a user may pass: at least one axis, every axis of size >= 1.
void check_device_matrix(const DeviceMatrix& dev, std::string_view where) {
  CLEAVE_CHECK_ARG(!dev.empty(), "{}: the device matrix is empty; expected at least one axis",
                   where);
  int64_t count = 1;
  for (int64_t d : dev) {
    CLEAVE_CHECK_ARG(d >= 1, "{}: device matrix {} has an axis of size {}; expected sizes >= 1",
                     where, device_matrix_to_string(dev), d);
    CLEAVE_CHECK_ARG(d <= kMaxDevices / count,
                     "{}: device matrix {} has more than {} devices; expected at most {}", where,
                     device_matrix_to_string(dev), kMaxDevices, kMaxDevices);
    count *= d;
  }
}

void check_rank(int64_t rank, const DeviceMatrix& dev, std::string_view where) {
  check_device_matrix(dev, where);
  CLEAVE_CHECK_ARG(rank >= 0 && rank < device_count(dev),
                   "{}: rank {} is outside device matrix {}; expected a rank in 0..{}", where, rank,
                   device_matrix_to_string(dev), device_count(dev) - 1);
}

}  // namespace

std::vector<int64_t> rank_to_coordinate(int64_t rank, const DeviceMatrix& dev) {
  check_rank(rank, dev, "rank_to_coordinate");
  std::vector<int64_t> c(dev.size());
  for (size_t a = dev.size(); a-- > 0;) {
    c[a] = rank % dev[a];
    rank /= dev[a];
  }
  return c;
}

int64_t coordinate_to_rank(std::span<const int64_t> coordinate, const DeviceMatrix& dev) {
  check_device_matrix(dev, "coordinate_to_rank");
  CLEAVE_CHECK_ARG(
      coordinate.size() == dev.size(),
      "coordinate_to_rank: a coordinate of {} entries on device matrix {}; expected {}",
      coordinate.size(), device_matrix_to_string(dev), dev.size());
  int64_t rank = 0;
  for (size_t a = 0; a < dev.size(); ++a) {
    CLEAVE_CHECK_ARG(coordinate[a] >= 0 && coordinate[a] < dev[a],
                     "coordinate_to_rank: coordinate {} on axis {} of device matrix {}; expected "
                     "0..{}",
                     coordinate[a], a, device_matrix_to_string(dev), dev[a] - 1);
    rank = rank * dev[a] + coordinate[a];
  }
  return rank;
}

std::vector<int64_t> ranks_along(int64_t rank, const DeviceMatrix& dev, std::span<const int> axes) {
  check_rank(rank, dev, "ranks_along");
  std::vector<bool> seen(dev.size(), false);
  for (int a : axes) {
    CLEAVE_CHECK_ARG(a >= 0 && a < static_cast<int>(dev.size()) && !seen[static_cast<size_t>(a)],
                     "ranks_along: axis {} of ({}) is {} device matrix {}; expected distinct axes "
                     "in 0..{}",
                     a, fmt::join(axes, ", "),
                     a >= 0 && a < static_cast<int>(dev.size()) ? "repeated on" : "outside",
                     device_matrix_to_string(dev), dev.size() - 1);
    seen[static_cast<size_t>(a)] = true;
  }
  std::vector<int64_t> c = rank_to_coordinate(rank, dev);
  int64_t count = 1;
  for (int a : axes) count *= dev[static_cast<size_t>(a)];
  std::vector<int64_t> out;
  out.reserve(static_cast<size_t>(count));
  for (int64_t i = 0; i < count; ++i) {
    int64_t rest = i;
    for (size_t k = axes.size(); k-- > 0;) {
      const auto a = static_cast<size_t>(axes[k]);
      c[a] = rest % dev[a];
      rest /= dev[a];
    }
    out.push_back(coordinate_to_rank(c, dev));
  }
  return out;
}

std::string device_matrix_to_string(const DeviceMatrix& dev) {
  return fmt::format("[{}]", fmt::join(dev, ", "));
}

const char* partial_op_name(PartialOp op) {
  switch (op) {
    case PartialOp::kMax:
      return "max";
    case PartialOp::kMin:
      return "min";
    default:
      return "sum";
  }
}

Layout::Layout(DeviceMatrix dev, std::vector<DimAxes> tensor_map, std::vector<int> partial,
               PartialOp partial_op)
    : dev_(std::move(dev)),
      map_(std::move(tensor_map)),
      partial_(std::move(partial)),
      partial_op_(partial_op) {
  check_device_matrix(dev_, "Layout");
  std::vector<bool> used(dev_.size(), false);
  auto use = [&](int a) {
    CLEAVE_CHECK_ARG(a >= 0 && a < static_cast<int>(dev_.size()),
                     "Layout: axis {} is outside device matrix {}; expected an axis in 0..{}", a,
                     device_matrix_to_string(dev_), dev_.size() - 1);
    CLEAVE_CHECK_ARG(!used[static_cast<size_t>(a)],
                     "Layout: axis {} is used twice ({}); expected each device axis at most once "
                     "over the tensor map and the partial axes",
                     a, to_string());
    used[static_cast<size_t>(a)] = true;
  };
  for (const DimAxes& axes : map_) {
    for (int a : axes) use(a);
  }
  std::sort(partial_.begin(), partial_.end());
  for (int a : partial_) use(a);
  if (partial_.empty()) partial_op_ = PartialOp::kSum;
}

Layout Layout::replicated(DeviceMatrix dev, int64_t tensor_rank) {
  return Layout(std::move(dev), std::vector<DimAxes>(static_cast<size_t>(tensor_rank)));
}

bool Layout::is_replicated() const {
  return partial_.empty() &&
         std::all_of(map_.begin(), map_.end(), [](const DimAxes& a) { return a.empty(); });
}

int64_t Layout::splits(int64_t dim) const {
  CLEAVE_CHECK_ARG(dim >= 0 && dim < tensor_rank(),
                   "Layout::splits: dimension {} of {}; expected a dimension in 0..{}", dim,
                   to_string(), tensor_rank() - 1);
  int64_t n = 1;
  for (int a : map_[static_cast<size_t>(dim)]) n *= dev_[static_cast<size_t>(a)];
  return n;
}

std::vector<int> Layout::replica_axes() const {
  std::vector<bool> used(dev_.size(), false);
  for (const DimAxes& axes : map_) {
    for (int a : axes) used[static_cast<size_t>(a)] = true;
  }
  for (int a : partial_) used[static_cast<size_t>(a)] = true;
  std::vector<int> out;
  for (size_t a = 0; a < dev_.size(); ++a) {
    if (!used[a]) out.push_back(static_cast<int>(a));
  }
  return out;
}

int64_t Layout::replicas() const {
  int64_t n = 1;
  for (int a : replica_axes()) n *= dev_[static_cast<size_t>(a)];
  return n;
}

std::string Layout::check_shape(const Shape& global) const {
  if (global.rank() != tensor_rank()) {
    return fmt::format("the tensor has rank {} but the layout has {} dimensions", global.rank(),
                       tensor_rank());
  }
  for (int64_t d = 0; d < tensor_rank(); ++d) {
    const int64_t s = splits(d);
    if (global[d] % s != 0) {
      return fmt::format("dim {} of size {} is split {} ways", d, global[d], s);
    }
  }
  return {};
}

Shape Layout::slice_shape(const Shape& global) const {
  const std::string why = check_shape(global);
  CLEAVE_CHECK_ARG(why.empty(), "Layout::slice_shape: {} cannot lay out a tensor of shape {}: {}",
                   to_string(), global.to_string(), why);
  std::vector<int64_t> dims = global.dims();
  for (size_t d = 0; d < dims.size(); ++d) dims[d] /= splits(static_cast<int64_t>(d));
  return Shape(std::move(dims));
}

int64_t Layout::slice_index(int64_t dim, int64_t rank) const {
  CLEAVE_CHECK_ARG(dim >= 0 && dim < tensor_rank(),
                   "Layout::slice_index: dimension {} of {}; expected a dimension in 0..{}", dim,
                   to_string(), tensor_rank() - 1);
  check_rank(rank, dev_, "Layout::slice_index");
  const std::vector<int64_t> c = rank_to_coordinate(rank, dev_);
  int64_t index = 0;
  for (int a : map_[static_cast<size_t>(dim)]) {
    index = index * dev_[static_cast<size_t>(a)] + c[static_cast<size_t>(a)];
  }
  return index;
}

std::vector<int64_t> Layout::slice_offset(const Shape& global, int64_t rank) const {
  const Shape local = slice_shape(global);
  std::vector<int64_t> offset(map_.size());
  for (size_t d = 0; d < map_.size(); ++d) {
    offset[d] = slice_index(static_cast<int64_t>(d), rank) * local[static_cast<int64_t>(d)];
  }
  return offset;
}

Layout Layout::normalized() const {
  std::vector<int> renumber(dev_.size(), -1);
  DeviceMatrix dev;
  for (size_t a = 0; a < dev_.size(); ++a) {
    if (dev_[a] > 1) {
      renumber[a] = static_cast<int>(dev.size());
      dev.push_back(dev_[a]);
    }
  }
  if (dev.empty()) dev.push_back(1);
  std::vector<DimAxes> map;
  for (const DimAxes& axes : map_) {
    DimAxes out;
    for (int a : axes) {
      if (renumber[static_cast<size_t>(a)] >= 0) out.push_back(renumber[static_cast<size_t>(a)]);
    }
    map.push_back(std::move(out));
  }
  std::vector<int> partial;
  for (int a : partial_) {
    if (renumber[static_cast<size_t>(a)] >= 0) partial.push_back(renumber[static_cast<size_t>(a)]);
  }
  const PartialOp op = partial.empty() ? PartialOp::kSum : partial_op_;
  return Layout(std::move(dev), std::move(map), std::move(partial), op);
}

bool Layout::same_distribution(const Layout& other) const {
  // normalized() == other.normalized(), without building them: the search and the rewrite ask
  // this for every pair of candidates of an edge. Axes of size 1 are dropped and the others
  // renumbered in order.
  constexpr size_t kMaxAxes = 32;
  if (dev_.size() > kMaxAxes || other.dev_.size() > kMaxAxes) {
    return normalized() == other.normalized();
  }
  if (map_.size() != other.map_.size()) return false;
  int mine[kMaxAxes], theirs[kMaxAxes];
  const auto renumber = [](const DeviceMatrix& dev, int* out) {
    int n = 0;
    for (size_t a = 0; a < dev.size(); ++a) out[a] = dev[a] > 1 ? n++ : -1;
    return n;
  };
  const int n = renumber(dev_, mine);
  if (renumber(other.dev_, theirs) != n) return false;
  {  // the device matrices without their 1s
    size_t b = 0;
    for (size_t a = 0; a < dev_.size(); ++a) {
      if (dev_[a] <= 1) continue;
      while (other.dev_[b] <= 1) ++b;
      if (dev_[a] != other.dev_[b++]) return false;
    }
  }
  // Two lists of axes, each without the axes of size 1, renumbered.
  const auto same_axes = [&](const std::vector<int>& x, const std::vector<int>& y) {
    size_t j = 0;
    for (int a : x) {
      if (mine[a] < 0) continue;
      while (j < y.size() && theirs[y[j]] < 0) ++j;
      if (j == y.size() || theirs[y[j]] != mine[a]) return false;
      ++j;
    }
    while (j < y.size() && theirs[y[j]] < 0) ++j;
    return j == y.size();
  };
  for (size_t d = 0; d < map_.size(); ++d) {
    if (!same_axes(map_[d], other.map_[d])) return false;
  }
  if (!same_axes(partial_, other.partial_)) return false;
  bool partial = false;
  for (int a : partial_) partial = partial || mine[a] >= 0;
  return !partial || partial_op_ == other.partial_op_;
}

std::string Layout::to_string() const {
  std::vector<std::string> dims;
  for (const DimAxes& axes : map_) {
    if (axes.empty()) {
      dims.push_back("-1");
    } else if (axes.size() == 1) {
      dims.push_back(std::to_string(axes[0]));
    } else {
      dims.push_back(fmt::format("({})", fmt::join(axes, ", ")));
    }
  }
  std::string text = fmt::format("layout(dev={}, map=({}{})", device_matrix_to_string(dev_),
                                 fmt::join(dims, ", "), dims.size() == 1 ? "," : "");
  if (!partial_.empty()) {
    text += fmt::format(
        ", partial{}=({})",
        partial_op_ == PartialOp::kSum ? "" : std::string("_") + partial_op_name(partial_op_),
        fmt::join(partial_, ", "));
  }
  return text + ")";
}

namespace {

// A cursor over the text of a layout: each expect_* consumes a token or throws Error naming the
// column, what was expected and what is there.
class LayoutText {
 public:
  explicit LayoutText(std::string_view text) : text_(text) {}

  [[noreturn]] void fail(const std::string& expected) const {
    const std::string_view rest = text_.substr(pos_, 12);
    CLEAVE_FAIL("layout '{}': at column {}: expected {}, got {}", text_, pos_ + 1, expected,
                rest.empty() ? std::string("the end") : fmt::format("'{}'", rest));
  }
  void skip_space() {
    while (pos_ < text_.size() && std::isspace(static_cast<unsigned char>(text_[pos_]))) ++pos_;
  }
  bool accept(std::string_view token) {
    skip_space();
    if (text_.substr(pos_, token.size()) != token) return false;
    pos_ += token.size();
    return true;
  }
  void expect(std::string_view token) {
    if (!accept(token)) fail(fmt::format("'{}'", token));
  }
  int64_t expect_int() {
    skip_space();
    const size_t begin = pos_;
    if (pos_ < text_.size() && text_[pos_] == '-') ++pos_;
    while (pos_ < text_.size() && std::isdigit(static_cast<unsigned char>(text_[pos_]))) ++pos_;
    const std::string digits(text_.substr(begin, pos_ - begin));
    if (digits.empty() || digits == "-" || digits.size() > 18) {
      pos_ = begin;
      fail("a number");
    }
    return std::stoll(digits);
  }
  // "(a, b, ...)" with an optional trailing comma; `item` reads one entry.
  template <typename Item>
  void expect_tuple(std::string_view open, std::string_view close, Item item) {
    expect(open);
    if (accept(close)) return;
    do {
      if (accept(close)) return;  // a trailing comma
      item();
    } while (accept(","));
    expect(close);
  }
  void expect_end() {
    skip_space();
    if (pos_ != text_.size()) fail("the end of the layout");
  }
  size_t position() {
    skip_space();
    return pos_;
  }
  void rewind(size_t pos) { pos_ = pos; }

 private:
  std::string_view text_;
  size_t pos_ = 0;
};

}  // namespace

Layout Layout::parse(std::string_view text) {
  LayoutText in(text);
  in.expect("layout");
  in.expect("(");
  in.expect("dev");
  in.expect("=");
  DeviceMatrix dev;
  in.expect_tuple("[", "]", [&] {
    const size_t at = in.position();
    const int64_t size = in.expect_int();
    if (size < 1) {
      in.rewind(at);
      in.fail("a device axis size >= 1");
    }
    dev.push_back(size);
  });
  if (dev.empty()) in.fail("a device matrix of at least one axis");
  std::vector<bool> used(dev.size(), false);
  auto axis = [&] {
    const size_t at = in.position();
    const int64_t a = in.expect_int();
    in.rewind(at);
    if (a < 0 || a >= static_cast<int64_t>(dev.size())) {
      in.fail(fmt::format("a device axis in [0, {}]", dev.size() - 1));
    }
    if (used[static_cast<size_t>(a)]) in.fail(fmt::format("an axis other than {} (used twice)", a));
    in.expect_int();
    used[static_cast<size_t>(a)] = true;
    return static_cast<int>(a);
  };
  in.expect(",");
  in.expect("map");
  in.expect("=");
  std::vector<DimAxes> map;
  in.expect_tuple("(", ")", [&] {
    DimAxes axes;
    if (in.accept("-1")) {
      // not split
    } else if (in.accept("(")) {
      do {
        axes.push_back(axis());
      } while (in.accept(","));
      in.expect(")");
    } else {
      axes.push_back(axis());
    }
    map.push_back(std::move(axes));
  });
  std::vector<int> partial;
  PartialOp op = PartialOp::kSum;
  if (in.accept(",")) {
    in.expect("partial");
    if (in.accept("_max")) {
      op = PartialOp::kMax;
    } else if (in.accept("_min")) {
      op = PartialOp::kMin;
    }
    in.expect("=");
    in.expect_tuple("(", ")", [&] { partial.push_back(axis()); });
    if (partial.empty()) in.fail("at least one partial axis");
  }
  in.expect(")");
  in.expect_end();
  return Layout(std::move(dev), std::move(map), std::move(partial), op);
}

}  // namespace cleave::parallel

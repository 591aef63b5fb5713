// Merging a sharded job's checkpoints (NOTE [Merging sharded checkpoints] in
// cleave/train/sharded_checkpoint.h).
#include "cleave/train/sharded_checkpoint.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <exception>
#include <filesystem>
#include <map>
#include <optional>
#include <set>
#include <thread>
#include <tuple>

#include "cleave/comm/group_registry.h"
#include "cleave/core/atomic_file.h"
#include "cleave/core/error.h"
#include "cleave/core/threads.h"
#include "cleave/train/checkpoint_set.h"
#include "train/checkpoint_bytes.h"
#include "train/checkpoint_names.h"

namespace cleave::train {
namespace {

namespace fs = std::filesystem;
using parallel::Layout;

// The strategy-file parameter `name` refers to (NOTE: the traced step's prefix may be absent, and
// optimizer state is "<state>.<parameter>"), or null.
const std::pair<Layout, Shape>* layout_of(const parallel::ParameterLayouts& layouts,
                                          const std::string& name) {
  const std::pair<Layout, Shape>* best = nullptr;
  size_t best_skip = SIZE_MAX;
  std::string ambiguous;
  for (const auto& [param, layout] : layouts.layouts) {
    // param without its first k components, for k = 0, 1, ...
    size_t skip = 0;
    for (size_t at = 0;; ++skip) {
      const std::string tail = param.substr(at);
      const bool state =
          name.size() > tail.size() + 1 && name.ends_with("." + tail) &&
          name.substr(0, name.size() - tail.size() - 1).find('.') == std::string::npos;
      if (name == tail || state) {
        if (skip < best_skip) {
          best = &layout;
          best_skip = skip;
          ambiguous.clear();
        } else if (skip == best_skip && best != &layout) {
          ambiguous = param;
        }
        break;
      }
      const size_t dot = param.find('.', at);
      if (dot == std::string::npos) break;
      at = dot + 1;
    }
  }
  CLEAVE_CHECK_ARG(ambiguous.empty(),
                   "merge: the checkpoint's tensor '{}' matches two parameters of the strategy "
                   "file ('{}' among them); expected names that say which",
                   name, ambiguous);
  return best;
}

// Copies the slice `part` (shape of `slice`) into `whole` at `offset`, or, when `check` is set,
// compares them instead; returns false at the first difference.
bool place_slice(const Tensor& part, Tensor& whole, const std::vector<int64_t>& offset,
                 bool check) {
  const Shape& g = whole.shape();
  const Shape& s = part.shape();
  const size_t elem = dtype_size(whole.dtype());
  const int64_t rank = g.rank();
  if (rank == 0) {
    if (check) return std::memcmp(whole.raw_data(), part.raw_data(), elem) == 0;
    std::memcpy(whole.raw_data(), part.raw_data(), elem);
    return true;
  }
  const int64_t row = s[rank - 1];  // contiguous elements per copy
  const int64_t rows = s.numel() / std::max<int64_t>(row, 1);
  std::vector<int64_t> index(static_cast<size_t>(rank), 0);  // within the slice
  const auto* src = static_cast<const char*>(part.raw_data());
  auto* dst = static_cast<char*>(whole.raw_data());
  for (int64_t r = 0; r < rows && row > 0; ++r) {
    int64_t at = 0;  // the row's first element in `whole`
    for (int64_t d = 0; d < rank; ++d) at = at * g[d] + offset[static_cast<size_t>(d)] + index[d];
    const size_t bytes = static_cast<size_t>(row) * elem;
    char* to = dst + static_cast<size_t>(at) * elem;
    const char* from = src + static_cast<size_t>(r * row) * elem;
    if (check) {
      if (std::memcmp(to, from, bytes) != 0) return false;
    } else {
      std::memcpy(to, from, bytes);
    }
    for (int64_t d = rank - 2; d >= 0; --d) {  // the next row
      if (++index[static_cast<size_t>(d)] < s[d]) break;
      index[static_cast<size_t>(d)] = 0;
    }
  }
  return true;
}

bool same_bytes(const Tensor& a, const Tensor& b) {
  return a.dtype() == b.dtype() && a.shape() == b.shape() &&
         std::memcmp(a.raw_data(), b.raw_data(),
                     static_cast<size_t>(a.numel()) * dtype_size(a.dtype())) == 0;
}

// Rank `rank`'s slice under `layout` of `whole` (of the layout's global shape): a new tensor.
Tensor slice_of(const Tensor& whole, const Layout& layout, int64_t rank) {
  const Shape& global = whole.shape();
  Tensor part = Tensor::empty(layout.slice_shape(global), whole.dtype());  // copied whole
  // The slice read out of `whole`: place_slice copies the other way with the roles swapped.
  const std::vector<int64_t> offset = layout.slice_offset(global, rank);
  const Shape& s = part.shape();
  const size_t elem = dtype_size(whole.dtype());
  const int64_t dims = global.rank();
  const int64_t row = dims == 0 ? 1 : s[dims - 1];
  const int64_t rows = row == 0 ? 0 : s.numel() / row;
  std::vector<int64_t> index(static_cast<size_t>(dims), 0);
  for (int64_t r = 0; r < rows; ++r) {
    int64_t at = 0;
    for (int64_t d = 0; d < dims; ++d) {
      at = at * global[d] + offset[static_cast<size_t>(d)] + index[static_cast<size_t>(d)];
    }
    std::memcpy(static_cast<char*>(part.raw_data()) + static_cast<size_t>(r * row) * elem,
                static_cast<const char*>(whole.raw_data()) + static_cast<size_t>(at) * elem,
                static_cast<size_t>(row) * elem);
    for (int64_t d = dims - 2; d >= 0; --d) {
      if (++index[static_cast<size_t>(d)] < s[d]) break;
      index[static_cast<size_t>(d)] = 0;
    }
  }
  return part;
}

// Every rank holds the tensors rank 0 holds, no more: else an Error naming the ranks, their
// files (`sources`) and the tensors. `tensors[r]` maps rank r's names to anything.
template <typename Map>
void check_same_names(const std::vector<Map>& tensors, const std::vector<std::string>& sources,
                      int64_t device_num) {
  CLEAVE_CHECK_ARG(static_cast<int64_t>(tensors.size()) == device_num,
                   "merge: {} checkpoints for a strategy of {} devices; expected one per rank",
                   tensors.size(), device_num);
  const Map& first = tensors[0];
  for (size_t r = 1; r < tensors.size(); ++r) {
    std::vector<std::string> missing, extra;
    for (const auto& [name, t] : first) {
      if (tensors[r].count(name) == 0) missing.push_back(name);
    }
    for (const auto& [name, t] : tensors[r]) {
      if (first.count(name) == 0) extra.push_back(name);
    }
    CLEAVE_CHECK_ARG(missing.empty() && extra.empty(),
                     "merge: rank {} ({}) and rank 0 ({}) hold different tensors: {} only in rank "
                     "0's, {} only in rank {}'s; expected the checkpoints of one job and step",
                     r, sources[r], sources[0],
                     missing.empty() ? "none" : fmt::format("'{}'", fmt::join(missing, "', '")),
                     extra.empty() ? "none" : fmt::format("'{}'", fmt::join(extra, "', '")), r);
  }
}

}  // namespace

NamedTensors merge_checkpoints(const std::vector<RankCheckpoint>& ranks,
                               const parallel::ParameterLayouts& layouts) {
  std::vector<ParamMap> tensors;
  std::vector<std::string> sources;
  for (const RankCheckpoint& r : ranks) {
    tensors.push_back(r.tensors);
    sources.push_back(r.source);
  }
  check_same_names(tensors, sources, layouts.device_num);
  const ParamMap& first = ranks[0].tensors;
  NamedTensors out;
  for (const auto& [name, zero] : first) {
    const std::pair<Layout, Shape>* laid = layout_of(layouts, name);
    if (laid == nullptr || laid->first.is_replicated()) {
      for (size_t r = 1; r < ranks.size(); ++r) {
        CLEAVE_CHECK_ARG(same_bytes(ranks[r].tensors.at(name), zero),
                         "merge: '{}' is not sharded by the strategy file, but rank {} ({}) and "
                         "rank 0 ({}) hold different values for it; expected the same on every "
                         "rank",
                         name, r, ranks[r].source, ranks[0].source);
      }
      out.emplace_back(name, zero.clone());
      continue;
    }
    const auto& [layout, global] = *laid;
    const Shape slice = layout.slice_shape(global);
    Tensor whole = Tensor::empty(global, zero.dtype());  // every element is some rank's
    std::set<std::vector<int64_t>> written;
    for (size_t r = 0; r < ranks.size(); ++r) {
      const Tensor& part = ranks[r].tensors.at(name);
      CLEAVE_CHECK_ARG(part.shape() == slice && part.dtype() == zero.dtype(),
                       "merge: rank {} ({}) holds '{}' as {} {}; its layout {} gives each rank a "
                       "{} {} slice of {}",
                       r, ranks[r].source, name, dtype_name(part.dtype()), part.shape().to_string(),
                       layout.to_string(), dtype_name(zero.dtype()), slice.to_string(),
                       global.to_string());
      const std::vector<int64_t> offset = layout.slice_offset(global, static_cast<int64_t>(r));
      const bool replica = !written.insert(offset).second;
      CLEAVE_CHECK_ARG(place_slice(part, whole, offset, replica),
                       "merge: rank {} ({}) holds a different '{}' slice than the rank before it "
                       "that holds the same slice (offset ({})); expected replicas to be equal",
                       r, ranks[r].source, name, fmt::join(offset, ", "));
    }
    out.emplace_back(name, std::move(whole));
  }
  return out;
}

NamedTensors split_checkpoint(const NamedTensors& whole, const parallel::ParameterLayouts& layouts,
                              int64_t rank) {
  CLEAVE_CHECK_ARG(rank >= 0 && rank < layouts.device_num,
                   "split: rank {} is out of range; the strategy has {} devices", rank,
                   layouts.device_num);
  NamedTensors out;
  for (const auto& [name, t] : whole) {
    const std::pair<Layout, Shape>* laid = layout_of(layouts, name);
    if (laid == nullptr || laid->first.is_replicated()) {
      out.emplace_back(name, t.clone());
      continue;
    }
    const auto& [layout, global] = *laid;
    CLEAVE_CHECK_ARG(t.shape() == global,
                     "split: '{}' is {} in the checkpoint but {} in the strategy file; expected "
                     "the single-device checkpoint of the network the strategy was planned for",
                     name, t.shape().to_string(), global.to_string());
    Tensor part = slice_of(t, layout, rank);
    out.emplace_back(name, std::move(part));
  }
  return out;
}

namespace {

// NOTE [Reading only what a rank needs]
// A destination rank d needs, of each tensor, its block under the destination layouts (the whole
// tensor where they do not lay it out). The source slices meeting that block are read from one
// rank per set of replicas (the source ranks holding the same slice), chosen so that the rank
// opens as few files as it can and the ranks spread over the replicas: a rank read already for
// another tensor, else d itself when it holds the slice (so a job resumed under the strategy it
// saved with reads only its own file), else replica number d % (replicas). Tensors laid out in
// the source are chosen first, as they constrain more; a tensor whole in the source (a replicated
// parameter, a counter) is then, nearly always, in a file read already. `cleave-ckpt transform
// --plan` prints this choice (plan_transform) and load_distributed_checkpoint reads exactly
// these files, each once.
struct SourcePiece {
  std::vector<int64_t> at;  // the source slice's offset; empty: the whole tensor, at the origin
  int64_t rank = 0;         // the source rank it is read from
};
struct RankReads {
  std::vector<int64_t> ranks;                              // ascending
  std::map<std::string, std::vector<SourcePiece>> pieces;  // per tensor
};

// The destination block of a tensor of global shape `global` laid out by `to` (null: not laid
// out, the whole tensor): its offset and shape.
std::pair<std::vector<int64_t>, Shape> destination_block(const std::pair<Layout, Shape>* to,
                                                         const Shape& global,
                                                         const std::string& name, int64_t d) {
  if (to == nullptr || to->first.is_replicated()) {
    return {std::vector<int64_t>(static_cast<size_t>(global.rank()), 0), global};
  }
  CLEAVE_CHECK_ARG(to->second == global,
                   "'{}' is {} in the source checkpoints but {} in the destination's layouts; "
                   "expected the same network",
                   name, global.to_string(), to->second.to_string());
  return {to->first.slice_offset(global, d), to->first.slice_shape(global)};
}

RankReads plan_rank_reads(std::vector<std::string> names, const parallel::ParameterLayouts& source,
                          const parallel::ParameterLayouts& destination, int64_t d) {
  std::sort(names.begin(), names.end());  // the same choice for names in any order
  std::set<int64_t> chosen;
  const auto choose = [&](const std::vector<int64_t>& replicas) {
    for (int64_t r : replicas) {
      if (chosen.count(r) != 0) return r;
    }
    const bool own = std::find(replicas.begin(), replicas.end(), d) != replicas.end();
    const int64_t pick = own ? d : replicas[static_cast<size_t>(d) % replicas.size()];
    chosen.insert(pick);
    return pick;
  };
  RankReads out;
  std::vector<const std::string*> whole;  // in the source
  for (const std::string& name : names) {
    const std::pair<Layout, Shape>* from = layout_of(source, name);
    if (from == nullptr || from->first.is_replicated()) {
      whole.push_back(&name);
      continue;
    }
    const Shape& global = from->second;
    const auto [lo, want] = destination_block(layout_of(destination, name), global, name, d);
    const Shape have = from->first.slice_shape(global);
    std::map<std::vector<int64_t>, std::vector<int64_t>> replicas;  // by offset, meeting the block
    for (int64_t s = 0; s < source.device_num; ++s) {
      std::vector<int64_t> at = from->first.slice_offset(global, s);
      bool meets = true;
      for (int64_t k = 0; k < global.rank() && meets; ++k) {
        const auto i = static_cast<size_t>(k);
        meets = at[i] < lo[i] + want[k] && lo[i] < at[i] + have[k];
      }
      if (meets) replicas[std::move(at)].push_back(s);
    }
    std::vector<SourcePiece>& pieces = out.pieces[name];
    for (const auto& [at, ranks] : replicas) pieces.push_back({at, choose(ranks)});
    if (pieces.empty()) whole.push_back(&name);  // an empty block: a file says its dtype
  }
  std::vector<int64_t> every(static_cast<size_t>(source.device_num));
  for (int64_t s = 0; s < source.device_num; ++s) every[static_cast<size_t>(s)] = s;
  for (const std::string* name : whole) {
    const int64_t r = choose(every);
    const std::pair<Layout, Shape>* from = layout_of(source, *name);
    out.pieces[*name] = {{from == nullptr || from->first.is_replicated()
                              ? std::vector<int64_t>{}
                              : from->first.slice_offset(from->second, r),
                          r}};
  }
  out.ranks.assign(chosen.begin(), chosen.end());
  return out;
}

// Copies the part of `src`, the block of a tensor at offset `src_at` (empty: the origin), that
// lies in the block `dst` of the same tensor at offset `dst_at`, to its place in `dst`, row by row
// (both contiguous, of one dtype).
void copy_overlap(const Tensor& src, const std::vector<int64_t>& src_at, const Tensor& dst,
                  const std::vector<int64_t>& dst_at) {
  const int64_t n = dst.shape().rank();
  const size_t elem = dtype_size(dst.dtype());
  if (n == 0) {
    std::memcpy(dst.raw_data(), src.raw_data(), elem);
    return;
  }
  const auto src_lo = [&](int64_t k) {
    return src_at.empty() ? int64_t{0} : src_at[static_cast<size_t>(k)];
  };
  std::vector<int64_t> lo(static_cast<size_t>(n)), hi(static_cast<size_t>(n));
  for (int64_t k = 0; k < n; ++k) {
    const auto i = static_cast<size_t>(k);
    lo[i] = std::max(src_lo(k), dst_at[i]);
    hi[i] = std::min(src_lo(k) + src.shape()[k], dst_at[i] + dst.shape()[k]);
    if (lo[i] >= hi[i]) return;
  }
  const std::vector<int64_t> src_strides = src.shape().strides();
  const std::vector<int64_t> dst_strides = dst.shape().strides();
  const size_t run = static_cast<size_t>(hi.back() - lo.back()) * elem;
  std::vector<int64_t> g = lo;  // the global index of the row's first element
  for (;;) {
    int64_t from = 0, to = 0;
    for (int64_t k = 0; k < n; ++k) {
      const auto i = static_cast<size_t>(k);
      from += (g[i] - src_lo(k)) * src_strides[i];
      to += (g[i] - dst_at[i]) * dst_strides[i];
    }
    std::memcpy(static_cast<char*>(dst.raw_data()) + static_cast<size_t>(to) * elem,
                static_cast<const char*>(src.raw_data()) + static_cast<size_t>(from) * elem, run);
    int64_t k = n - 2;
    for (; k >= 0; --k) {
      const auto i = static_cast<size_t>(k);
      if (++g[i] < hi[i]) break;
      g[i] = lo[i];
    }
    if (k < 0) return;
  }
}

}  // namespace

TransformPlan plan_transform(const std::vector<std::string>& tensor_names,
                             const parallel::ParameterLayouts& source,
                             const parallel::ParameterLayouts& destination) {
  TransformPlan plan;
  for (int64_t d = 0; d < destination.device_num; ++d) {
    plan.reads.push_back(plan_rank_reads(tensor_names, source, destination, d).ranks);
  }
  return plan;
}

namespace {

// A checkpoint file "<prefix>-<epoch>_<step>.<format>" of a rank's folder.
struct SavedFile {
  std::string prefix;  // "" for a file not named so
  int64_t epoch = 0, step = 0;
  fs::path path;
  std::optional<CommitMarker> marker;
};

// The newest set committed on every rank (NOTE [Checkpoint sets]): one file per rank, or an Error
// naming the ranks whose files are missing or from another step.
std::vector<std::string> newest_committed_set(const std::string& directory,
                                              const std::vector<std::vector<SavedFile>>& folders,
                                              const std::vector<fs::path>& folder_paths) {
  using Key = std::tuple<std::string, int64_t, int64_t>;
  const auto name = [](const Key& k) {
    return fmt::format("{}-{}_{}", std::get<0>(k), std::get<1>(k), std::get<2>(k));
  };
  std::map<Key, std::vector<std::string>> committed;  // key -> each rank's file
  for (size_t r = 0; r < folders.size(); ++r) {
    for (const SavedFile& f : folders[r]) {
      if (!f.marker) continue;
      std::vector<std::string>& files = committed[{f.prefix, f.epoch, f.step}];
      files.resize(folders.size());
      files[r] = f.path.string();
    }
  }
  const Key* newest_anywhere = nullptr;
  for (auto it = committed.rbegin(); it != committed.rend(); ++it) {
    if (newest_anywhere == nullptr) newest_anywhere = &it->first;
    const bool complete = std::all_of(it->second.begin(), it->second.end(),
                                      [](const std::string& f) { return !f.empty(); });
    if (complete) return it->second;
  }
  // No set is complete: name, for the newest step any rank committed, the ranks without it and
  // what they hold instead.
  std::vector<std::string> missing;
  for (size_t r = 0; r < folders.size(); ++r) {
    const std::vector<std::string>& files = committed.at(*newest_anywhere);
    if (!files[r].empty()) continue;
    std::string newest = "no committed checkpoint";
    for (const SavedFile& f : folders[r]) {
      if (f.marker) newest = fmt::format("newest committed {}", name({f.prefix, f.epoch, f.step}));
    }
    missing.push_back(fmt::format("rank {} ('{}': {})", r, folder_paths[r].string(), newest));
  }
  CLEAVE_FAIL(
      "merge: no checkpoint set in '{}' is complete on every rank (NOTE [Checkpoint sets]): the "
      "newest, {}, is missing on {}; a job stopped while saving leaves its previous set whole, "
      "but these folders hold no step committed by every rank",
      directory, name(*newest_anywhere), fmt::join(missing, ", "));
}

}  // namespace

std::vector<std::string> rank_checkpoint_files(const std::string& directory, int64_t device_num,
                                               const std::string& prefix,
                                               const parallel::ParameterLayouts* layouts) {
  std::error_code ec;
  CLEAVE_CHECK_ARG(fs::is_directory(directory, ec),
                   "merge: '{}' is not a folder; expected the folder holding one folder per rank "
                   "('0', '1', ... or 'rank_0', 'rank_1', ...)",
                   directory);
  CLEAVE_CHECK_ARG(device_num >= 1, "merge: device_num {} is not positive", device_num);
  const std::string fingerprint = layouts != nullptr ? layouts_fingerprint(*layouts) : "";
  std::vector<std::vector<SavedFile>> folders;
  std::vector<fs::path> folder_paths;
  bool any_marker = false;
  const CheckpointJob* first_job = nullptr;
  std::string first_marker;
  for (int64_t r = 0; r < device_num; ++r) {
    fs::path folder;
    for (const std::string& n : {std::to_string(r), fmt::format("rank_{}", r)}) {
      if (fs::is_directory(fs::path(directory) / n, ec)) folder = fs::path(directory) / n;
    }
    CLEAVE_CHECK_ARG(!folder.empty(),
                     "merge: '{}' has no folder '{}' or 'rank_{}' for rank {} of {}; expected one "
                     "folder per rank of the strategy's device_num",
                     directory, r, r, r, device_num);
    std::vector<SavedFile> found;
    std::set<std::string> prefixes;
    for (const fs::directory_entry& e : fs::directory_iterator(folder, ec)) {
      const std::string ext = e.path().extension().string();
      if (!e.is_regular_file() || (ext != ".ckpt" && ext != ".safetensors")) continue;
      SavedFile f{.path = e.path()};
      if (const std::optional<SavedName> saved = parse_saved_name(e.path().filename().string())) {
        f.prefix = saved->prefix;
        f.epoch = saved->epoch;
        f.step = saved->step;
      }
      if (!prefix.empty() && f.prefix != prefix) continue;
      prefixes.insert(f.prefix);
      f.marker = read_commit_marker(f.path.string());
      found.push_back(std::move(f));
    }
    CLEAVE_CHECK_ARG(!found.empty(), "merge: the folder '{}' holds no {} file", folder.string(),
                     prefix.empty() ? std::string(".ckpt or .safetensors")
                                    : fmt::format("'{}-<epoch>_<step>' checkpoint", prefix));
    if (prefixes.size() > 1 || prefixes.begin()->empty()) {
      CLEAVE_CHECK_ARG(found.size() == 1,
                       "merge: the folder '{}' holds {} checkpoints ({}); give --prefix to take "
                       "the newest '<prefix>-<epoch>_<step>' one",
                       folder.string(), found.size(), [&] {
                         std::vector<std::string> names;
                         for (const SavedFile& f : found) names.push_back(f.path.filename());
                         std::sort(names.begin(), names.end());
                         return fmt::format("{}", fmt::join(names, ", "));
                       }());
    }
    std::sort(found.begin(), found.end(), [](const SavedFile& a, const SavedFile& b) {
      return std::tie(a.epoch, a.step) < std::tie(b.epoch, b.step);
    });
    // Every marker must be this rank's, of one job (NOTE [Checkpoint sets]).
    for (const SavedFile& f : found) {
      if (!f.marker) continue;
      any_marker = true;
      const CheckpointJob& job = f.marker->job;
      const std::string marker = commit_marker_path(f.path.string());
      CLEAVE_CHECK_ARG(job.device_num == device_num && job.rank == r,
                       "merge: '{}' was saved by rank {} of {}, but it is in the folder of rank "
                       "{} of a set of {} ranks (the strategy's device_num); the folder holds "
                       "another job's checkpoints or the folders were renamed",
                       f.path.string(), job.rank, job.describe(), r, device_num);
      if (first_job == nullptr) {
        first_job = &f.marker->job;
        first_marker = f.path.string();
      }
      CLEAVE_CHECK_ARG(job.same_job(*first_job),
                       "merge: '{}' was saved by {} but '{}' by {}: the folders mix two jobs' "
                       "checkpoints",
                       f.path.string(), job.describe(), first_marker, first_job->describe());
      CLEAVE_CHECK_ARG(layouts == nullptr || job.layouts == fingerprint,
                       "merge: '{}' was saved by {}, but the strategy file lays the parameters "
                       "out otherwise (layouts {}): these checkpoints were written under another "
                       "strategy; give the strategy file their job wrote",
                       f.path.string(), job.describe(),
                       fingerprint.empty() ? std::string("none sharded") : fingerprint);
    }
    folders.push_back(std::move(found));
    folder_paths.push_back(folder);
  }
  if (any_marker) return newest_committed_set(directory, folders, folder_paths);
  // Folders without markers (older files, other tools): each folder's newest file.
  std::vector<std::string> files;
  for (const std::vector<SavedFile>& found : folders) files.push_back(found.back().path.string());
  return files;
}

TrainProgress load_distributed_checkpoint(nn::Cell& net, optim::Optimizer* optimizer,
                                          const std::string& directory,
                                          const std::string& strategy_file,
                                          const std::string& prefix,
                                          std::vector<std::string>* files_read) {
  parallel::ParameterLayouts source;
  if (!strategy_file.empty()) {
    source = parallel::load_parameter_layouts(strategy_file);
  } else {
    // Nothing sharded: as many ranks as the folder has rank folders.
    std::error_code ec;
    source.device_num = 0;
    while (fs::is_directory(fs::path(directory) / std::to_string(source.device_num), ec) ||
           fs::is_directory(fs::path(directory) / fmt::format("rank_{}", source.device_num), ec)) {
      ++source.device_num;
    }
    CLEAVE_CHECK_ARG(source.device_num > 0,
                     "load_distributed_checkpoint: '{}' holds no folder '0' or 'rank_0'; expected "
                     "the folder holding one folder per rank of the job that saved it",
                     directory);
  }
  const std::vector<std::string> files =
      rank_checkpoint_files(directory, source.device_num, prefix, &source);
  // This rank's blocks: its slices once its step is compiled (Model::build), else whole tensors
  // (NOTE [Reading only what a rank needs]).
  const parallel::ParameterLayouts destination = sharded_parameter_layouts(net);
  const int64_t rank = comm::world_rank();
  std::vector<std::string> names;
  for (const auto& [name, t] : train_state_tensors(net, optimizer, {})) names.push_back(name);
  const RankReads reads = plan_rank_reads(names, source, destination, rank);
  std::map<int64_t, ParamMap> loaded;
  for (int64_t r : reads.ranks) {
    const std::string& file = files[static_cast<size_t>(r)];
    loaded.emplace(r, load_checkpoint(file));
    if (files_read != nullptr) files_read->push_back(file);
  }
  ParamMap params;
  for (const std::string& name : names) {
    const std::vector<SourcePiece>& pieces = reads.pieces.at(name);
    const auto first = loaded.at(pieces[0].rank).find(name);
    if (first == loaded.at(pieces[0].rank).end()) continue;  // restore names what is missing
    const std::pair<Layout, Shape>* from = layout_of(source, name);
    const bool sliced = from != nullptr && !from->first.is_replicated();
    const Shape global = sliced ? from->second : first->second.shape();
    const std::pair<Layout, Shape>* to = layout_of(destination, name);
    if (!sliced && (to == nullptr || to->first.is_replicated())) {
      params.emplace(name, first->second);  // whole in both
      continue;
    }
    const auto [at, shape] = destination_block(to, global, name, rank);
    const Shape have = sliced ? from->first.slice_shape(global) : global;
    Tensor block = Tensor::empty(shape, first->second.dtype());
    for (const SourcePiece& piece : pieces) {
      const std::string& file = files[static_cast<size_t>(piece.rank)];
      const auto part = loaded.at(piece.rank).find(name);
      CLEAVE_CHECK_ARG(part != loaded.at(piece.rank).end(),
                       "load_distributed_checkpoint: '{}' holds no '{}', but '{}' does; expected "
                       "the checkpoints of one job and step",
                       file, name, files[static_cast<size_t>(pieces[0].rank)]);
      const Tensor& t = part->second;
      CLEAVE_CHECK_ARG(t.shape() == have && t.dtype() == block.dtype(),
                       "load_distributed_checkpoint: rank {} ({}) holds '{}' as {} {}; its "
                       "layout{} gives each rank a {} {} slice of {}",
                       piece.rank, file, name, dtype_name(t.dtype()), t.shape().to_string(),
                       sliced ? " " + from->first.to_string() : std::string(" (none)"),
                       dtype_name(block.dtype()), have.to_string(), global.to_string());
      copy_overlap(t, piece.at, block, at);
    }
    params.emplace(name, std::move(block));
  }
  if (optimizer != nullptr) return restore_train_state(net, *optimizer, params);
  load_param_into_net(net, params);
  const auto counter = [&](const char* name) {
    const auto it = params.find(name);
    return it == params.end() ? int64_t{0} : static_cast<int64_t>(it->second.item());
  };
  return {.epoch_num = counter("epoch_num"), .step_num = counter("step_num")};
}

// NOTE [Merging without copies]
// cleave-ckpt merge and transform map the source files and write the checkpoints they make
// straight from them: a tensor of the output is a list of pieces of the sources' bytes, handed to
// the file between the headers (write_file_atomically's parts), so each byte is copied once, by
// the kernel into the new file (merge_checkpoints + save_checkpoint copied it three times: out of
// the file, into the whole tensor, into the file). The output block (the whole tensor, or a
// destination rank's slice) is walked row by row (all dimensions but the last); each row is the
// runs of the source slices it crosses, and runs that follow each other in one source are joined:
// a layout splitting only the first dimension gives one piece per source slice, a column split
// one per row and slice. Small pieces are spliced from the mappings in batches (NOTE [Splicing
// from memory] in src/core/atomic_file.cc): gathering them into one buffer first cost a copy and
// fresh memory, and writev of them ran at a fraction of splice's speed here. Each source file
// is mapped once; its checksum reads it once, and the pieces then come from the page cache;
// pieces of 1 MiB or more are copied from the source files inside the kernel (copy_file_range,
// write_file_atomically's regions), as cp does. The checks and the files written are
// merge_checkpoints' and split_checkpoint's, byte for byte.
namespace {

// Runs fn(i) for every i in [0, n), on up to this thread's OpenMP thread count of threads (a
// worker sharing its host's cores keeps to its share). Every i runs, even after one throws; the
// Error of the lowest i that threw is then rethrown, so the message does not depend on timing.
template <class Fn>
void on_threads(size_t n, const Fn& fn) {
  const size_t count = std::min(n, static_cast<size_t>(std::max(1, threads::intra_op_threads())));
  std::vector<std::exception_ptr> errors(n);
  std::atomic<size_t> next{0};
  const auto work = [&] {
    for (size_t i = next++; i < n; i = next++) {
      try {
        fn(i);
      } catch (...) {
        errors[i] = std::current_exception();
      }
    }
  };
  std::vector<std::thread> pool;
  for (size_t t = 1; t < count; ++t) pool.emplace_back(work);
  work();
  for (std::thread& t : pool) t.join();
  for (const std::exception_ptr& e : errors) {
    if (e) std::rethrow_exception(e);
  }
}

struct MappedSources {
  std::vector<std::unique_ptr<MappedFile>> files;
  std::vector<std::map<std::string, TensorBytes>> tensors;  // per rank
  std::vector<FileRegion> regions() const {
    std::vector<FileRegion> out;
    for (const auto& f : files) out.push_back(f->region());
    return out;
  }
};

// The files mapped and checked (their checksums), several at once.
MappedSources map_sources(const std::vector<std::string>& files) {
  MappedSources out;
  out.files.resize(files.size());
  out.tensors.resize(files.size());
  on_threads(files.size(), [&](size_t i) {
    out.files[i] = std::make_unique<MappedFile>(files[i], "checkpoint");
    out.tensors[i] = ckpt_tensor_bytes(files[i], out.files[i]->bytes());
  });
  return out;
}

// A tensor of the merged checkpoint as its distinct slices in the sources (checked as
// merge_checkpoints checks them): a tensor the strategy does not lay out is one slice, rank 0's.
struct SourceSlices {
  DType dtype = DType::kFloat32;
  Shape global, slice;
  std::map<std::vector<int64_t>, std::string_view> by_index;  // slice index per dimension
};

SourceSlices source_slices(const MappedSources& src, const std::vector<std::string>& files,
                           const parallel::ParameterLayouts& layouts, const std::string& name) {
  const TensorBytes& zero = src.tensors[0].at(name);
  const auto bytes_of = [](const TensorBytes& t) {
    return t.pieces.empty() ? std::string_view() : t.pieces[0];
  };
  const std::pair<Layout, Shape>* laid = layout_of(layouts, name);
  SourceSlices out{.dtype = zero.dtype, .global = zero.shape, .slice = zero.shape};
  if (laid == nullptr || laid->first.is_replicated()) {
    for (size_t r = 1; r < files.size(); ++r) {
      const TensorBytes& t = src.tensors[r].at(name);
      CLEAVE_CHECK_ARG(
          t.dtype == zero.dtype && t.shape == zero.shape && bytes_of(t) == bytes_of(zero),
          "merge: '{}' is not sharded by the strategy file, but rank {} ({}) and rank 0 ({}) hold "
          "different values for it; expected the same on every rank",
          name, r, files[r], files[0]);
    }
    out.by_index.emplace(std::vector<int64_t>(static_cast<size_t>(zero.shape.rank()), 0),
                         bytes_of(zero));
    return out;
  }
  const auto& [layout, global] = *laid;
  out.global = global;
  out.slice = layout.slice_shape(global);
  for (size_t r = 0; r < files.size(); ++r) {
    const TensorBytes& part = src.tensors[r].at(name);
    CLEAVE_CHECK_ARG(part.shape == out.slice && part.dtype == zero.dtype,
                     "merge: rank {} ({}) holds '{}' as {} {}; its layout {} gives each rank a "
                     "{} {} slice of {}",
                     r, files[r], name, dtype_name(part.dtype), part.shape.to_string(),
                     layout.to_string(), dtype_name(zero.dtype), out.slice.to_string(),
                     global.to_string());
    const std::vector<int64_t> offset = layout.slice_offset(global, static_cast<int64_t>(r));
    std::vector<int64_t> index;
    for (size_t d = 0; d < offset.size(); ++d) {
      index.push_back(out.slice[static_cast<int64_t>(d)] == 0
                          ? 0
                          : offset[d] / out.slice[static_cast<int64_t>(d)]);
    }
    const auto [it, first] = out.by_index.emplace(index, bytes_of(part));
    CLEAVE_CHECK_ARG(first || it->second == bytes_of(part),
                     "merge: rank {} ({}) holds a different '{}' slice than the rank before it "
                     "that holds the same slice (offset ({})); expected replicas to be equal",
                     r, files[r], name, fmt::join(offset, ", "));
  }
  return out;
}

// The block of `src`'s tensor at `offset` of shape `shape` as pieces of the slices: for each of
// its rows (all dimensions but the last), the runs of the source slices it crosses, consecutive
// ones joined. The pieces stay where they are: the write splices them from the mapped sources in
// batches (NOTE [Splicing from memory] in src/core/atomic_file.cc).
TensorBytes block_of(const SourceSlices& src, const std::vector<int64_t>& offset,
                     const Shape& shape) {
  TensorBytes out{.dtype = src.dtype, .shape = shape};
  const int64_t n = shape.rank();
  const size_t elem = dtype_size(src.dtype);
  if (n == 0) {
    out.pieces.push_back(src.by_index.begin()->second);
    return out;
  }
  if (shape.numel() == 0) return out;
  const auto add = [&](std::string_view piece) {
    if (!out.pieces.empty() &&
        out.pieces.back().data() + out.pieces.back().size() == piece.data()) {
      out.pieces.back() =
          std::string_view(out.pieces.back().data(), out.pieces.back().size() + piece.size());
    } else {
      out.pieces.push_back(piece);
    }
  };
  const int64_t last = n - 1, width = src.slice[last];
  const int64_t rows = shape.numel() / shape[last];
  std::vector<int64_t> row(static_cast<size_t>(n), 0), index(static_cast<size_t>(n), 0);
  for (int64_t r = 0; r < rows; ++r) {
    int64_t local = 0;  // the row within its source slice
    for (int64_t d = 0; d < last; ++d) {
      const int64_t g = offset[static_cast<size_t>(d)] + row[static_cast<size_t>(d)];
      index[static_cast<size_t>(d)] = g / src.slice[d];
      local = local * src.slice[d] + g % src.slice[d];
    }
    const int64_t begin = offset[static_cast<size_t>(last)];
    const int64_t end = begin + shape[last];
    for (int64_t j = begin / width; j * width < end; ++j) {
      index[static_cast<size_t>(last)] = j;
      const int64_t lo = std::max(begin, j * width) - j * width;
      const int64_t hi = std::min(end, (j + 1) * width) - j * width;
      const std::string_view bytes = src.by_index.at(index);
      add(bytes.substr(static_cast<size_t>(local * width + lo) * elem,
                       static_cast<size_t>(hi - lo) * elem));
    }
    for (int64_t d = last - 1; d >= 0; --d) {  // the next row
      if (++row[static_cast<size_t>(d)] < shape[d]) break;
      row[static_cast<size_t>(d)] = 0;
    }
  }
  return out;
}

std::vector<SourceSlices> all_source_slices(const MappedSources& src,
                                            const std::vector<std::string>& files,
                                            const parallel::ParameterLayouts& layouts,
                                            std::vector<std::string>& names) {
  check_same_names(src.tensors, files, layouts.device_num);
  std::vector<SourceSlices> out;
  for (const auto& [name, t] : src.tensors[0]) {
    names.push_back(name);
    out.push_back(source_slices(src, files, layouts, name));
  }
  return out;
}

}  // namespace

MergeSummary merge_checkpoint_files(const std::vector<std::string>& files,
                                    const parallel::ParameterLayouts& layouts,
                                    const std::string& output) {
  const MappedSources src = map_sources(files);
  std::vector<std::string> names;
  const std::vector<SourceSlices> slices = all_source_slices(src, files, layouts, names);
  std::vector<std::pair<std::string, TensorBytes>> out;
  MergeSummary summary{.tensors = names.size()};
  for (size_t i = 0; i < names.size(); ++i) {
    const SourceSlices& t = slices[i];
    out.emplace_back(
        names[i],
        block_of(t, std::vector<int64_t>(static_cast<size_t>(t.global.rank()), 0), t.global));
    if (t.global != t.slice) ++summary.from_slices;
  }
  save_ckpt_bytes(out, output, src.regions());
  return summary;
}

std::string transform_output_path(const std::string& output_dir, int64_t rank,
                                  const std::string& file_name) {
  const fs::path folder = fs::path(output_dir) / std::to_string(rank);
  std::error_code ec;
  fs::create_directories(folder, ec);
  CLEAVE_CHECK_ARG(fs::is_directory(folder),
                   "transform: cannot create the output folder '{}': {}; expected a folder this "
                   "process may write",
                   folder.string(), ec ? ec.message() : "not a folder");
  return (folder / file_name).string();
}

void transform_checkpoint_files(const std::vector<std::string>& files,
                                const parallel::ParameterLayouts& source,
                                const parallel::ParameterLayouts& destination,
                                const std::string& output_dir, const std::string& file_name) {
  const MappedSources src = map_sources(files);
  std::vector<std::string> names;
  const std::vector<SourceSlices> slices = all_source_slices(src, files, source, names);
  const auto count = static_cast<size_t>(destination.device_num);
  std::vector<std::string> paths;
  for (size_t d = 0; d < count; ++d) {
    paths.push_back(transform_output_path(output_dir, static_cast<int64_t>(d), file_name));
  }
  // Several files are written at once, and every one before any is committed: the disk takes one
  // while the next is prepared (NOTE [Files committed together] in cleave/core/atomic_file.h).
  std::vector<std::optional<PendingFile>> written(count);
  on_threads(count, [&](size_t d) {
    std::vector<std::pair<std::string, TensorBytes>> out;
    for (size_t i = 0; i < names.size(); ++i) {
      const SourceSlices& t = slices[i];
      const auto [at, shape] = destination_block(layout_of(destination, names[i]), t.global,
                                                 names[i], static_cast<int64_t>(d));
      out.emplace_back(names[i], block_of(t, at, shape));
    }
    written[d].emplace(write_ckpt_bytes(out, paths[d], src.regions()));
  });
  for (std::optional<PendingFile>& f : written) f->commit();
}

}  // namespace cleave::train

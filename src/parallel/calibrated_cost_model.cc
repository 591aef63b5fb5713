// The calibrated cost model (include/cleave/parallel/calibrated_cost_model.h, NOTE [Calibrated
// cost model]).
#include "cleave/parallel/calibrated_cost_model.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <mutex>
#include <tuple>

#include "cleave/core/error.h"

namespace cleave::parallel {

double CalibratedCostModel::Curve::at(double w) const {
  if (w <= work.front()) return seconds.front();
  if (w >= work.back()) return seconds.back() + (w - work.back()) / last_rate;
  const size_t hi =
      static_cast<size_t>(std::upper_bound(work.begin(), work.end(), w) - work.begin());
  const size_t lo = hi - 1;
  const double f = (w - work[lo]) / (work[hi] - work[lo]);
  return seconds[lo] + f * (seconds[hi] - seconds[lo]);
}

CalibratedCostModel::Curve CalibratedCostModel::curve_of(const std::vector<ComputePoint>& points) {
  CLEAVE_ASSERT(!points.empty(), "a compute class without points passed the profile's checks");
  Curve c;
  for (const ComputePoint& p : points) {
    const double t = p.work / p.rate;
    c.work.push_back(p.work);
    c.seconds.push_back(c.seconds.empty() ? t : std::max(t, c.seconds.back()));
  }
  c.last_rate = points.back().rate;
  return c;
}

CalibratedCostModel::CalibratedCostModel(const MachineProfile& profile, const Options& options,
                                         const std::string& source)
    : compute_slowdown_(options.compute_slowdown),
      cores_(static_cast<double>(std::max<int64_t>(1, profile.machine.cores))),
      backend_(options.backend) {
  CLEAVE_CHECK_ARG(options.threads >= 1,
                   "CalibratedCostModel: threads is {}; expected >= 1 (OpenMP threads per rank)",
                   options.threads);
  CLEAVE_CHECK_ARG(std::isfinite(options.compute_slowdown) && options.compute_slowdown >= 1,
                   "CalibratedCostModel: compute_slowdown is {}; expected a finite number >= 1 "
                   "(ranks / cores where a job's ranks share a host's cores)",
                   options.compute_slowdown);
  CLEAVE_CHECK_ARG(!profile.compute.empty(), "CalibratedCostModel: {} has no compute table",
                   source);
  const auto it = profile.backends.find(options.backend);
  if (it == profile.backends.end()) {
    std::string known;
    for (const auto& [name, b] : profile.backends)
      known += (known.empty() ? "\"" : ", \"") + name + "\"";
    CLEAVE_FAIL("CalibratedCostModel: backend \"{}\" is not in {}; expected one of {}",
                options.backend, source, known);
  }
  const BackendProfile& backend = it->second;
  CLEAVE_CHECK_ARG(backend.measured,
                   "CalibratedCostModel: {} has not measured backend \"{}\" ({}); run "
                   "cleave-calibrate where that backend runs, or plan for another backend",
                   source, options.backend, backend.reason);
  // The table of the thread count asked for, else the nearest (the fewer threads on a tie).
  const ComputeTable* table = &profile.compute.front();
  for (const ComputeTable& t : profile.compute) {
    if (std::llabs(t.threads - options.threads) < std::llabs(table->threads - options.threads)) {
      table = &t;
    }
  }
  threads_ = table->threads;
  matmul_ = curve_of(table->matmul);
  convolution_ = curve_of(table->convolution);
  memory_ = curve_of(table->memory);
  for (const OpTiming& t : table->ops) ops_.emplace(t.key, t.seconds);
  for (const auto& [c, fits] : backend.collectives) {
    std::vector<GroupFit>& out = collectives_[c];
    for (const CollectiveFit& f : fits) {
      GroupFit g{f.group_size, f.latency_s, 1 / f.bandwidth_bytes_per_s};
      if (!out.empty()) {  // non-decreasing in the group size
        g.latency_s = std::max(g.latency_s, out.back().latency_s);
        g.seconds_per_byte = std::max(g.seconds_per_byte, out.back().seconds_per_byte);
      }
      out.push_back(g);
    }
  }
  // NOTE [Collectives of ranks sharing cores]: the rows of the job's rank count, or of the
  // nearest measured one (the smaller on a tie), per group size.
  const double ranks = std::round(compute_slowdown_ * cores_);
  if (compute_slowdown_ > 1 && ranks > cores_) {
    std::map<int64_t, SharedCoresLatency> nearest;
    for (const SharedCoresLatency& e : backend.shared_cores) {
      const auto [it, fresh] = nearest.emplace(e.group_size, e);
      const double distance = std::abs(static_cast<double>(e.ranks) - ranks);
      if (!fresh && distance < std::abs(static_cast<double>(it->second.ranks) - ranks)) {
        it->second = e;
      }
    }
    for (const auto& [n, e] : nearest) shared_latency_[n] = e.latency_s;
  }
}

double CalibratedCostModel::compute_s(ShardingRule::ComputeClass cls, double flops,
                                      double bytes) const {
  const double memory = memory_.at(std::max(bytes, 0.0));
  double seconds = memory;
  switch (cls) {
    case ShardingRule::ComputeClass::kMatMul:
      seconds = std::max(memory, matmul_.at(std::max(flops, 0.0)));
      break;
    case ShardingRule::ComputeClass::kConvolution:
      seconds = std::max(memory, convolution_.at(std::max(flops, 0.0)));
      break;
    case ShardingRule::ComputeClass::kMemory:
      break;
  }
  return compute_slowdown_ * seconds;
}

std::optional<double> CalibratedCostModel::measured_s(const std::string& key) const {
  const auto it = ops_.find(key);
  if (it == ops_.end()) return std::nullopt;
  return compute_slowdown_ * it->second;
}

double CalibratedCostModel::collective_s(Collective c, double bytes_sent,
                                         int64_t group_size) const {
  if (group_size <= 1) return 0;
  const auto it = collectives_.find(c);
  CLEAVE_ASSERT(it != collectives_.end() && !it->second.empty(),
                "collective {} missing from a checked profile", collective_key(c));
  const std::vector<GroupFit>& fits = it->second;
  const double n = static_cast<double>(group_size);
  double latency = 0, per_byte = 0;
  if (group_size <= fits.front().group_size) {
    latency = fits.front().latency_s;
    per_byte = fits.front().seconds_per_byte;
  } else if (group_size >= fits.back().group_size) {
    const GroupFit& last = fits.back();
    latency = last.latency_s * (n - 1) / static_cast<double>(last.group_size - 1);
    per_byte = last.seconds_per_byte;
  } else {
    size_t hi = 1;
    while (fits[hi].group_size < group_size) ++hi;
    const GroupFit& a = fits[hi - 1];
    const GroupFit& b = fits[hi];
    const double f =
        (n - static_cast<double>(a.group_size)) / static_cast<double>(b.group_size - a.group_size);
    latency = a.latency_s + f * (b.latency_s - a.latency_s);
    per_byte = a.seconds_per_byte + f * (b.seconds_per_byte - a.seconds_per_byte);
  }
  // NOTE [Collectives of ranks sharing cores]
  const double share = std::max(1.0, compute_slowdown_ / std::max(1.0, n / cores_));
  latency *= share;
  if (const auto shared = shared_latency_.find(group_size); shared != shared_latency_.end()) {
    latency = std::max(latency, shared->second);
  }
  return latency + share * std::max(bytes_sent, 0.0) * per_byte;
}

const CostModel& cost_model_for_profile(const std::string& path,
                                        const CalibratedCostModel::Options& options) {
  static std::mutex mutex;
  static std::map<std::tuple<std::string, std::string, int64_t, double>,
                  std::unique_ptr<CalibratedCostModel>>
      models;
  // Checked before it becomes a key (a NaN would break the map's order).
  CLEAVE_CHECK_ARG(std::isfinite(options.compute_slowdown) && options.compute_slowdown >= 1,
                   "cost_model_for_profile: compute_slowdown is {}; expected a finite number >= 1",
                   options.compute_slowdown);
  const std::lock_guard<std::mutex> lock(mutex);
  auto& model = models[{path, options.backend, options.threads, options.compute_slowdown}];
  if (model == nullptr) {
    const std::string source = path.empty() ? "the default profile" : fmt::format("'{}'", path);
    const MachineProfile profile =
        path.empty() ? default_machine_profile() : load_machine_profile(path);
    auto made = std::make_unique<CalibratedCostModel>(profile, options, source);
    warn_if_other_machine(profile, path.empty() ? "shipped with cleave" : source);
    model = std::move(made);
  }
  return *model;
}

}  // namespace cleave::parallel

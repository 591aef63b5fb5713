// The cost model of a machine profile (cleave/parallel/machine_profile.h): seconds from what the
// machine was measured to do.
//
// NOTE [Calibrated cost model]
// Compute. A compute class's measured points (work w_i, rate r_i), ascending in work, give times
// t_i = w_i / r_i, made non-decreasing (a point measured faster than a smaller one takes the
// smaller one's time: noise, never a real speed-up of more work). The time of work w is
//   w <= w_0:          t_0                         small ops are latency-bound: dispatch, setup
//   w_i < w <= w_i+1:  t_i + (w - w_i) (t_i+1 - t_i) / (w_i+1 - w_i)        linear between points
//   w > w_last:        t_last + (w - w_last) / r_last                 the largest point's rate
// so the model passes through every measured point and is non-decreasing in w. A matmul or a
// convolution takes max(its flops' time, its bytes' time as memory traffic); a memory-bound op its
// bytes' time. The table used is that of the thread count asked for (Options::threads), or the
// nearest measured. An op slice the table has timed (its "ops") costs its timing instead (NOTE
// [Measured op slices] in cleave/parallel/search.h).
// Communication. A collective over n ranks in which each rank sends b bytes (the ring figure of
// the redistribution planner) takes latency(n) + b * seconds_per_byte(n), the fit measured for
// the job's backend (Options::backend) at group size n. Between measured group sizes both terms
// are interpolated linearly in n; below the smallest measured, the smallest's; above the largest
// m, the latency grows with the ring's steps, latency(m) (n - 1) / (m - 1), and the time per byte
// stays latency(m)'s (b already grows with n). Both terms are made non-decreasing in n first, so
// a larger group never costs less. A group of one costs 0.
//
// NOTE [Collectives of ranks sharing cores]
// The profile's collectives of n ranks were measured with n ranks on the profile's cores and
// nothing else running, so n > cores already includes sharing them n / cores ways. In a job whose
// R ranks share the host's C cores (compute_slowdown = R / C > 1), a collective of a subgroup of
// n < R ranks runs while the other ranks keep the cores busy: its copies, reductions and barrier
// hand-overs get a rank's share of a core like any computation. Its time is therefore scaled by
// compute_slowdown / max(1, n / cores): 1 for the world group, R / C for a pair. Measured on 8
// processes on 2 cores (bench/README.md, "search"): the MLP plans whose collectives are over 2- and
// 4-rank subgroups measured 25-40% above their prediction without this, the world-group
// data-parallel plan 0-25%.
// That scaling still misses the latency: in a step, a rank that reaches a collective waits for
// members that sit behind another rank on their core, and hands its own core over while it
// waits. A small AllReduce with every rank computing between its calls (cleave-calibrate, the
// backend's "shared_cores" rows) added, on the 2-core host: 8.4 µs per call for a pair in a job
// of 4 ranks, 11 µs for all 4; 21 µs for a pair of 8 ranks, 31 µs for all 8; where the scaled
// tight-loop latencies give 3, 10, 6 and 16 µs. So where the profile has a row for the job's
// ranks R = round(compute_slowdown x cores) (else the nearest measured R) and the group size, a
// collective's latency is the larger of the scaled latency and that row's; its bytes stay as
// above. Measured on LeNet's plans on 4 workers (bench/README.md, "Collectives of ranks sharing
// cores"): without it the model priced the plans that trade gradient bytes for more, smaller
// collectives up to 2.5% faster than data parallelism, and they measured up to 4.5% slower.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <unordered_map>
#include <vector>

#include "cleave/parallel/cost_model.h"
#include "cleave/parallel/machine_profile.h"

namespace cleave::parallel {

class CalibratedCostModel : public CostModel {
 public:
  struct Options {
    // The backend the job's collectives use: "shm" for several ranks on one host (cleave's gloo
    // groups go through shared memory there), "gloo" (TCP) across hosts, "mpi", "nccl".
    std::string backend = "shm";
    // OpenMP threads per rank. 1 by default: the ranks of a job on one host share its cores, so
    // a rank computes at about one core's rate (NOTE [Calibrated cost model]).
    int64_t threads = 1;
    // How many times longer computation takes than the table of `threads` says because the job's
    // ranks share the host's cores (NOTE [Ranks sharing cores] in cleave/runtime/pipeline.h:
    // ranks / cores for one thread's table). >= 1.
    double compute_slowdown = 1;
  };

  // Throws Error when the profile has not measured options.backend (with the profile's reason)
  // or options.threads < 1; `source` names the profile in errors.
  CalibratedCostModel(const MachineProfile& profile, const Options& options,
                      const std::string& source = "the machine profile");
  explicit CalibratedCostModel(const MachineProfile& profile)
      : CalibratedCostModel(profile, Options{}) {}

  double compute_s(ShardingRule::ComputeClass cls, double flops, double bytes) const override;
  double collective_s(Collective c, double bytes_sent, int64_t group_size) const override;
  // The table's timed op slices, compute_slowdown times their measured seconds.
  std::optional<double> measured_s(const std::string& key) const override;
  bool has_measured_ops() const override { return !ops_.empty(); }

  int64_t threads() const { return threads_; }  // the thread count of the table in use
  double compute_slowdown() const { return compute_slowdown_; }
  const std::string& backend() const { return backend_; }

 private:
  struct Curve {  // a compute class: work -> seconds (NOTE [Calibrated cost model])
    std::vector<double> work, seconds;
    double last_rate = 0;
    double at(double w) const;
  };
  struct GroupFit {
    int64_t group_size;
    double latency_s, seconds_per_byte;
  };
  static Curve curve_of(const std::vector<ComputePoint>& points);

  int64_t threads_ = 1;
  double compute_slowdown_ = 1;
  double cores_ = 1;  // the profile's machine's (NOTE [Collectives of ranks sharing cores])
  std::string backend_;
  Curve matmul_, convolution_, memory_;
  std::map<Collective, std::vector<GroupFit>> collectives_;
  // The backend's shared_cores rows of this job's rank count (else the nearest measured), by
  // group size; empty unless the job's ranks outnumber the profile's cores.
  std::map<int64_t, double> shared_latency_;
  std::unordered_map<std::string, double> ops_;  // the table's timed op slices, seconds
};

// The cost model of the profile at `path` for a job on `options.backend` (loaded once per path
// and options, kept for the process); "" is the shipped default profile. The first model of a
// profile measured on another machine prints the warning of warn_if_other_machine. Throws Error
// when the file cannot be read or is not a valid profile.
const CostModel& cost_model_for_profile(const std::string& path,
                                        const CalibratedCostModel::Options& options = {});

}  // namespace cleave::parallel

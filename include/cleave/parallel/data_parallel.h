// DATA_PARALLEL's passes on a traced training step: the gradient AllReduce in buckets, then the
// schedule that overlaps it with the backward pass and starts each update as soon as its own
// bucket is done. They plan only (graph in, graph out); the runtime runs the AllReduces.
//
// NOTE [Gradient buckets]
// The gradients are taken in the order the backward pass computes them (the graph order of the
// ops producing them: the last layer's first) and cut into runs of one dtype of at most
// bucket_cap_mb each; the first bucket is capped at 1 MB so that communication starts early
// (PyTorch DDP's first bucket does the same), and when there is more than that in all, the last
// gradients computed (the first layers') get a last bucket of at most 1 MB and an eighth of all:
// its AllReduce starts only when the backward pass ends, so only the other buckets' updates can
// hide it. A bucket of several gradients is one FusedAllReduce: one AllReduce of their
// concatenation, made by the transport from the gradients where they lie and written into the
// bucket's outputs (NOTE [AllReduce into other buffers] in cleave/comm/process_group.h), without
// joining them into one buffer and slicing it back (ResNet-50 on 2 ranks: two copies of 90 MiB a
// step). Each element's sum is the same reduction of the same values as without buckets
// (bit-identical on the inproc and shared-memory engines, which sum in rank order).
// bucket_cap_mb = 0 gives one AllReduce per gradient. Measurements: bench/README.md, 'dp'.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "cleave/core/tensor.h"
#include "cleave/ir/graph.h"

namespace cleave::parallel {

struct GradientBucketOptions {
  int64_t device_num = 1;  // the world's ranks: the AllReduces' group size
  bool mean = false;       // AllReduce "mean" (gradients_mean / mirror_mean), else "sum"
  double cap_mb = 25;      // bucket_cap_mb
};

// Traces the AllReduce of `grads` (symbolic tensors of the graph being traced; undefined entries
// are skipped) over the world group in buckets (NOTE [Gradient buckets]) and replaces each by its
// reduced value. Requires an active ir::Tracer.
void all_reduce_gradients_in_buckets(std::vector<Tensor>& grads,
                                     const GradientBucketOptions& options);

// Moves the communication ops among nodes [begin, end) (those `which` accepts, when given), and
// the ops there that only feed them, to right after the last node they read, so each bucket's
// AllReduce runs on its group's communication thread while the rest of the backward pass computes
// (NOTE [Collectives in flight] in cleave/runtime/executor.h); every other node keeps its place.
// Returns the new index of the first node of [begin, end) that stayed (the start of the step's
// tail: the buckets' slices, then the optimizer), or the node count when none stayed.
int hoist_collectives(ir::Graph& graph, int begin, int end,
                      const std::function<bool(const ir::Node&)>& which = {});

// NOTE [Updates in bucket order]
// After hoisting, the step ends with a tail that reads the buckets' AllReduces: each bucket's
// slices and reshapes, then the optimizer's updates in the order of the parameters — the first
// layer's first, whose gradient is in the bucket issued last. Run in that order, every update
// would wait for the last AllReduce. This pass orders the tail by the latest communication op each
// node depends on (in issue order), then by trace order, so each update waits only for its own
// bucket. Only the order changes: data dependences are kept, and so are the anti-dependences of
// in-place updates — a node that reads a tensor (or a view of it) which an in-place op writes
// (OpDef::mutated_inputs) stays on the same side of that op as in the trace; read-only inputs that
// every update shares (the learning rate) order nothing. Communication ops keep their relative
// order, the same on every rank.
void order_tail_by_collectives(ir::Graph& graph, int tail);

// NOTE [Updates at their gradients]
// An update whose gradient needs no reduction (a parameter split over every rank, so no other
// rank holds its slice) can run as soon as its gradient is made and the backward has read the
// parameter for the last time; left in the tail, it keeps the gradient's buffer alive through the
// rest of the backward. This pass moves every update in the tail [tail, end) whose input ops all
// come before the tail to right after the last of: the ops it reads, every earlier write of a
// tensor it reads, and every earlier read of a tensor it writes (through views alike:
// ir::storage_roots), so the backward reads nothing it changes; the parameters and constants it
// reads (its optimizer state, the learning rate) move with it. Updates that read a reduced
// gradient stay where order_tail_by_collectives put them. The executor waits for a collective in
// flight only at updates that write its inputs' storage (NOTE [Collectives in flight] in
// cleave/runtime/executor.h), so an update moved into the backward does not stop a gradient
// AllReduce from overlapping it. What it saves is memory: the memory-plan peak of rank 0 of 2 fell
// from 1.54 to 1.10 MiB for the MLP split megatron-style, 2.26 to 2.15 MiB for LeNet with its fc
// layers split by columns (bench/README.md, search); step times stayed within 1%. Returns the
// updates moved.
int hoist_updates(ir::Graph& graph, int tail);

}  // namespace cleave::parallel

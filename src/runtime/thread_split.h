// The executors of a step whose batch the threads split (NOTE [Threads split the batch] in
// cleave/runtime/pipeline.h). Internal to the runtime.
#pragma once

#include <memory>
#include <utility>
#include <vector>

#include "cleave/ir/graph.h"
#include "cleave/runtime/executor.h"

namespace cleave::runtime {

// NOTE [Blocks on threads]
// The step arrives compiled for `parts` micro-batches (NOTE [Micro-batches]) on one rank: the
// ops of each block (everything computed from that block's inputs), the ops computed from the
// parameters alone, and the rest -- the blocks' sums and averages, the optimizer's updates and
// whatever follows the first update. It is cut into one graph per block, holding that block's
// ops and a copy of the parameter-only ops it reads, whose outputs are the values the rest
// reads; and the update graph, whose inputs are those values. Each graph has its own executor,
// so its own memory: the blocks run at once, block b on thread b of an OpenMP team with one
// intra-op thread each (the team's threads keep their kernels' per-thread caches from step to
// step), then the update runs on the calling thread with every thread. The blocks only read the
// parameters, which the update writes once they are done. Their outputs are handed over as
// views of their memory, read before the next step overwrites it.
class ThreadSplit {
 public:
  // `graph`: a step of `parts` micro-batches, its inputs micro-batch-major, `num_inputs` per
  // block (data_0, label_0, data_1, ...).
  ThreadSplit(const ir::Graph& graph, int parts, size_t num_inputs);

  // Runs the step on the blocks' inputs (micro-batch-major, as the graph's); returns its outputs.
  std::vector<Tensor> run(const std::vector<Tensor>& feed);

  int parts() const { return static_cast<int>(blocks_.size()); }
  Executor& update() { return *update_; }
  const Executor& update() const { return *update_; }
  const Executor& block(int b) const { return *blocks_[static_cast<size_t>(b)]; }
  // Per input of the whole graph (micro-batch-major): whether its block reads it.
  std::vector<bool> inputs_read() const;

 private:
  size_t num_inputs_;
  std::vector<std::unique_ptr<Executor>> blocks_;
  std::unique_ptr<Executor> update_;
  // Per input of update_: the block and the index of that block's output it is.
  std::vector<std::pair<int, int>> update_inputs_;
};

}  // namespace cleave::runtime

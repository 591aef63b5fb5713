// Gathering the current training state of a placed network onto every worker.
#pragma once

#include <vector>

#include "cleave/core/tensor.h"
#include "cleave/runtime/executor.h"

namespace cleave::runtime {

// NOTE [Saving a placed network]
// A worker of a placed network updates only the parameters (and optimizer state) its part of the
// step updates; its copies of the others keep their initial values. To save a checkpoint, every
// worker calls share_placed_state with the same list of tensors, in the same order (the training
// state: parameters, optimizer state, counters) and `step`, its executor of the placed training
// step. Each tensor that some worker's part updates (an input of an op that writes its inputs:
// the optimizer's updates, BatchNorm's moving statistics) is then broadcast from that worker (the
// highest rank if several update it: they hold equal values) over the world group, so afterwards
// every worker holds the current value of everything and writes the same checkpoint as one
// process would. The other tensors are left as they are (equal on all workers: never updated).
// Collective: every worker of the job must call it at the same point (the seed's pattern, the
// same program on every worker, does: callbacks run at the same steps everywhere).
void share_placed_state(const Executor& step, const std::vector<Tensor>& tensors);

}  // namespace cleave::runtime

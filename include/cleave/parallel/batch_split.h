// Whether a training step's batch may be cut into equal blocks computed apart: the plan behind
// the threads of one process splitting the batch (NOTE [Threads split the batch] in
// cleave/runtime/pipeline.h). Planning only: the runtime runs the blocks.
//
// NOTE [Exact batch blocks]
// A training step cut into P blocks of rows, each block's forward and backward run apart and the
// losses and gradients averaged (the micro-batch expansion of NOTE [Micro-batches]), gives the
// whole batch's loss and gradients, up to the order of the sums, when
//   - every op that reads a value computed from the inputs keeps the blocks apart: its sharding
//     rule, asked to split dimension 0 of those values P ways and to keep every other input
//     whole, accepts, and leaves each output split P ways along dimension 0 only, complete (no
//     pending sum) -- so block b of each output is the op run on block b of its inputs. This is
//     the rule every parallel step already relies on (NOTE [Sharding rules]); it refuses a
//     softmax over the batch, a MatMul contracting it, and BatchNorm in training, whose batch
//     statistics are outputs complete on every rank, not blocks;
//   - no such op draws random numbers (Dropout: one stream per call, whose masks the blocks
//     would draw differently), communicates or writes its inputs;
//   - the loss is a ReduceMean of all the elements of such a value (equal blocks: the mean of the
//     blocks' means), and nothing else reads the loss.
// A ReduceSum loss would need a sum of the blocks, not their mean: refused too, as is any other
// output. The check runs on the forward traced for one block (its batch = the whole / P), with
// the rules on P devices, so a block's rows must divide P ways again.
#pragma once

#include <string>

#include "cleave/ir/graph.h"

namespace cleave::parallel {

// Empty when `forward` (a training step's trace: inputs, parameters and forward ops, graph output
// 0 the loss) may run as `parts` blocks (NOTE [Exact batch blocks]) and one block's forward
// reaching the batch costs at least `min_block_flops` (the sharding rules' flops() of `forward`,
// which is one block's trace); else why not, naming the op ("BatchNorm 'bn1.batch_norm' (scope
// ...): output 1 ... is computed from the whole batch").
std::string batch_split_blocker(const ir::Graph& forward, int parts, double min_block_flops = 0);

}  // namespace cleave::parallel

// ProcessGroup: a set of ranks and the collectives among them, on one backend library.
//
// A group of `size` processes numbers them 0..size-1 (the group rank). Every collective is
// called by every rank of the group in the same order; tensors are contiguous buffers (comm knows
// buffers, not graphs). A failed or timed-out operation throws cleave::Error naming the operation,
// the group and the ranks involved, and marks the group broken: later calls fail at once.
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "cleave/comm/store.h"
#include "cleave/core/tensor.h"

namespace cleave::comm {

enum class ReduceOp { kSum, kMax, kMin, kProd };

struct ProcessGroupOptions {
  std::string backend = "gloo";  // "gloo" | "mpi" | "nccl"
  std::shared_ptr<Store> store;  // rendezvous (unused by "mpi")
  int rank = 0;                  // this process's rank in the group
  int size = 1;
  std::string name = "world";    // used in errors and as the store namespace
  std::chrono::milliseconds timeout{std::chrono::seconds(30)};
};

class ProcessGroup {
 public:
  virtual ~ProcessGroup() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  virtual const std::string& name() const = 0;
  virtual const std::string& backend() const = 0;
  // Collectives are declared by the implementation in this header's companions (see
  // src/comm/); the list grows with the comm issue.
};

// Makes a group on `options.backend`; blocks until every rank of the group has joined (or throws
// cleave::Error after options.timeout naming the ranks that did not arrive).
std::shared_ptr<ProcessGroup> create_process_group(const ProcessGroupOptions& options);

}  // namespace cleave::comm

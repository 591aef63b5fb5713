// The backend factories behind create_process_group (one per library; each file under its own
// folder). Internal to comm.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "cleave/comm/process_group.h"
#include "cleave/core/dtype.h"

namespace cleave::comm {

// A library's names for cleave's dtypes and reduce ops (the MPI and NCCL backends fill one each).
// Bool travels as an unsigned byte; kMean reduces as a sum (ProcessGroup scales the result).
template <typename Type, typename Op>
struct LibraryNames {
  Type float32, float64, int32, int64, boolean;
  Op sum, prod, max, min;

  Type type(DType dtype) const {
    switch (dtype) {
      case DType::kFloat32:
        return float32;
      case DType::kFloat64:
        return float64;
      case DType::kInt32:
        return int32;
      case DType::kInt64:
        return int64;
      case DType::kBool:
        return boolean;
    }
    return boolean;
  }
  Op op(ReduceOp op) const {
    switch (op) {
      case ReduceOp::kSum:
      case ReduceOp::kMean:
        return sum;
      case ReduceOp::kProd:
        return prod;
      case ReduceOp::kMax:
        return max;
      case ReduceOp::kMin:
        return min;
    }
    return sum;
  }
};

std::shared_ptr<ProcessGroup> make_gloo_group(const ProcessGroupOptions& options);
// Ranks as threads of this process (src/comm/inproc).
std::shared_ptr<ProcessGroup> make_inproc_group(const ProcessGroupOptions& options);
// How `group`'s collectives travel: "shm" for a gloo group whose ranks share this host (NOTE
// [Shared-memory collectives] in comm/shm/shm_collectives.h), "shm+tcp" for one over several
// hosts of which some hold several of its ranks (NOTE [Hierarchical collectives] in
// comm/gloo/gloo_process_group.cc), "tcp" for another gloo group, the backend's name for the
// other backends.
std::string collective_transport(const ProcessGroup& group);
// How `group`'s point-to-point messages travel: "shm" for a gloo group whose ranks share this host
// (NOTE [Shared-memory point-to-point] in comm/shm/shm_p2p.h), "shm+tcp" for one whose ranks on
// this host talk through shared memory and to other hosts over TCP, "tcp" for another gloo group,
// the backend's name for the other backends.
std::string p2p_transport(const ProcessGroup& group);
// Messages this rank of a gloo group has sent through shared memory (0 for other backends).
uint64_t shm_messages_sent(const ProcessGroup& group);
// Whether this thread is a group's communication thread, which runs the asynchronous operations
// while their callers compute (NOTE [Waiting beside computation] in comm/wait.h).
bool on_communication_thread();
#ifdef CLEAVE_HAVE_MPI
std::shared_ptr<ProcessGroup> make_mpi_group(const ProcessGroupOptions& options);
#endif
#ifdef CLEAVE_HAVE_NCCL
std::shared_ptr<ProcessGroup> make_nccl_group(const ProcessGroupOptions& options);
#endif

}  // namespace cleave::comm

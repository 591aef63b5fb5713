// Collective primitives, called eagerly or traced into a graph: the functional wrappers of the
// communication primitives of cleave/ir/comm_ops.h (AllReduce, AllGather, ReduceScatter,
// Broadcast, AlltoAll, NeighborExchange, NeighborExchangeV2, Send, Recv). Each wrapper looks the
// named group up and records its name and size as attributes, so inference and the gradient rules
// (written in these primitives) read attributes only; the runtime attaches the kernels.
//
// Every rank of the group calls the same collectives in the same order. `group` names a group of
// the registry (cleave/comm/group_registry.h); the world group is "hccl_world_group" (also
// "nccl_world_group", "world"), MindSpore's default. With no world group registered (a standalone
// process) the world has one rank and the collectives are identities.
//
// Gradients (NOTE [Gradients of collectives] in src/ir/ops/comm.cc):
//   AllReduce(sum) -> AllReduce(sum); mean -> AllReduce(mean); max/min -> AllReduce(sum) masked
//   where the input attains the result; prod -> AllReduce(sum) * y / x.
//   AllGather <-> ReduceScatter(sum).   Broadcast(root) <-> Reduce(sum, root).
//   AlltoAll -> AlltoAll with split_dim and concat_dim swapped.
//   NeighborExchange -> NeighborExchange with send and receive ranks swapped.   Send <-> Recv.
//   NeighborExchangeV2 -> NeighborExchangeV2Grad (halos sent back and added into the strips).
#pragma once

#include <string>
#include <vector>

#include "cleave/comm/group_registry.h"
#include "cleave/comm/process_group.h"
#include "cleave/core/tensor.h"
#include "cleave/ir/comm_ops.h"
#include "cleave/ir/graph.h"

namespace cleave::ops {

inline constexpr const char* kWorldCommGroup = ir::kWorldCommGroup;

struct AllReduceOptions {
  comm::ReduceOp op = comm::ReduceOp::kSum;
  std::string group = kWorldCommGroup;
};
// The elementwise reduction of x over the group's ranks (same shape as x, on every rank).
Tensor all_reduce(const Tensor& x, const AllReduceOptions& options = {});

struct GroupOptions {
  std::string group = kWorldCommGroup;
};
// The ranks' x concatenated along dim 0 in rank order: shape (size * d0, ...).
Tensor all_gather(const Tensor& x, const GroupOptions& options = {});

struct ReduceScatterOptions {
  comm::ReduceOp op = comm::ReduceOp::kSum;
  std::string group = kWorldCommGroup;
};
// x (dim 0 divisible by the group size) reduced over ranks; this rank keeps slice `rank` of dim 0.
Tensor reduce_scatter(const Tensor& x, const ReduceScatterOptions& options = {});

struct BroadcastOptions {
  int64_t root_rank = 0;  // group rank
  std::string group = kWorldCommGroup;
};
// x of `root_rank`, on every rank (x gives the shape and dtype on the others).
Tensor broadcast(const Tensor& x, const BroadcastOptions& options = {});

struct AlltoAllOptions {
  int64_t split_count = 1;  // must equal the group size
  int64_t split_dim = 0;
  int64_t concat_dim = 0;
  std::string group = kWorldCommGroup;
};
// MindSpore's AlltoAll: x is split along split_dim into split_count blocks, block j goes to rank
// j; the blocks received (in rank order) are concatenated along concat_dim.
Tensor all_to_all(const Tensor& x, const AlltoAllOptions& options = {});

struct NeighborExchangeOptions {
  std::vector<int64_t> send_rank_ids;  // one per input
  std::vector<int64_t> recv_rank_ids;  // one per output
  std::vector<Shape> recv_shapes;      // one per output
  DType recv_type = DType::kFloat32;
  std::string group = kWorldCommGroup;
};
// Sends xs[k] to send_rank_ids[k] and returns, for each k, the tensor received from
// recv_rank_ids[k] (shape recv_shapes[k]); all posted at once, so any pattern is deadlock-free.
std::vector<Tensor> neighbor_exchange(const std::vector<Tensor>& xs,
                                      const NeighborExchangeOptions& options);

struct NeighborExchangeV2Options {
  // Eight ranks, clockwise from the top: top, top_right, right, bottom_right, bottom,
  // bottom_left, left, top_left; -1 where there is no neighbour.
  std::vector<int64_t> send_rank_ids = std::vector<int64_t>(8, -1);
  std::vector<int64_t> recv_rank_ids = std::vector<int64_t>(8, -1);
  std::vector<int64_t> send_lens = {0, 0, 0, 0};  // [top, bottom, left, right]
  std::vector<int64_t> recv_lens = {0, 0, 0, 0};  // [top, bottom, left, right]
  std::string data_format = "NCHW";
  std::string group = kWorldCommGroup;
};
// MindSpore's NeighborExchangeV2, the 2-D halo exchange: x (N, C, H, W) is sent in strips and
// corners (send_lens wide) to the neighbours, and the result is x padded with the halos received
// (recv_lens wide): (N, C, H + recv_top + recv_bottom, W + recv_left + recv_right), zeros where
// no neighbour sends. NOTE [NeighborExchangeV2 regions] in src/runtime/neighbor_exchange_v2.cc.
Tensor neighbor_exchange_v2(const Tensor& x, const NeighborExchangeV2Options& options);

struct SendOptions {
  int64_t dest_rank = 0;
  int64_t sr_tag = 0;
  std::string group = kWorldCommGroup;
};
// Sends x to dest_rank (blocks until it is handed over). Returns an empty tensor (shape (0)) that
// carries the dependency for autodiff: its gradient receives x's gradient back from dest_rank.
Tensor send(const Tensor& x, const SendOptions& options);

struct RecvOptions {
  int64_t src_rank = 0;
  int64_t sr_tag = 0;
  Shape shape;
  DType dtype = DType::kFloat32;
  std::string group = kWorldCommGroup;
};
// Receives a tensor of `shape` and `dtype` from src_rank. `token` orders the call after what
// produced it (its values are unused; pass any tensor); its gradient sends the received tensor's
// gradient back to src_rank.
Tensor recv(const Tensor& token, const RecvOptions& options);

// Blocks until every rank of the group has arrived.
void barrier(const std::string& group = kWorldCommGroup);

}  // namespace cleave::ops

namespace cleave::runtime {

// Makes the groups named by the "rank_list" attributes of `graph`'s communication ops (NOTE
// [Groups from rank lists] in src/runtime/collective_ops.cc), in an order in which no rank waits
// forever. Collective: every rank loading the graph calls it (runtime::load). Throws Error when a
// group cannot be made (this process is standalone, a rank is outside the world, a member does not
// arrive).
void prepare_comm_groups(const ir::Graph& graph);

}  // namespace cleave::runtime

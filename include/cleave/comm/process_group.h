// ProcessGroup: a set of ranks and the collectives among them, on one backend library.
//
// A group of `size` processes numbers them 0..size-1 (the group rank). Every collective is
// called by every rank of the group in the same order; tensors are contiguous buffers (comm knows
// buffers, not graphs). A failed or timed-out operation throws cleave::Error naming the operation,
// the group and the ranks involved, and marks the group broken: later calls fail at once.
//
// NOTE [Collective semantics]
// Buffers are flat: a collective sees a tensor as numel() elements of its dtype, whatever its
// shape. `size` is the group size, `n` an element count.
//   all_reduce(t, op)              t (n) becomes op over the ranks' t, elementwise, in place.
//   all_reduce(out, in, op)        the same into out (n), in unchanged; with lists of buffers,
//                                  of their concatenations (NOTE [AllReduce into other buffers]).
//   all_gather(out, in)            out (size * n) = in of rank 0, in of rank 1, ... (in: n).
//   reduce_scatter(out, in, op)    in (size * n) is reduced over ranks; this rank keeps chunk
//                                  `rank` of n elements in out.
//   broadcast(t, root)             t of `root` is copied into t of every rank.
//   all_to_all(out, in)            in (size * n) is size chunks; chunk j goes to rank j, where it
//                                  is chunk `rank` of out (size * n).
//   exchange(sends, recvs, tag)    point-to-point: every send and receive posted at once, then
//                                  all awaited (neighbor exchanges, halo swaps); a matching
//                                  send/recv pair has the same tag and element count.
//   send(t, dst, tag) / recv(t, src, tag), barrier().
// The *_async variants return at once with a Work handle; collectives of one group run in call
// order (on the group's communication thread), so compute can overlap them.
#pragma once

#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <future>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "cleave/comm/store.h"
#include "cleave/core/tensor.h"

namespace cleave::comm {

// kMean is kSum divided by the group size (floating dtypes only).
enum class ReduceOp { kSum, kMax, kMin, kProd, kMean };

// "sum", "max", "min", "prod", "mean".
const char* reduce_op_name(ReduceOp op);

struct ProcessGroupOptions {
  std::string backend = "gloo";  // "gloo" | "inproc" (ranks as threads) | "mpi" | "nccl"
  std::shared_ptr<Store> store;  // rendezvous (unused by "mpi")
  int rank = 0;                  // this process's rank in the group
  int size = 1;
  std::string name = "world";  // used in errors and as the store namespace
  std::chrono::milliseconds timeout{std::chrono::seconds(30)};
  // Address the TCP transport (gloo) listens on: 127.0.0.1 on one host, this host's address
  // (or name) across hosts.
  std::string host = "127.0.0.1";
  // The world rank of each group rank; empty means 0..size-1 (the world group itself).
  std::vector<int> world_ranks;
};

// The handle of an asynchronous operation. Shared by the caller and the group.
class Work {
 public:
  explicit Work(std::shared_future<void> done) : done_(std::move(done)) {}
  // Blocks until the operation has finished; throws its cleave::Error if it failed. The
  // operation's own timeout bounds the wait.
  void wait() const { done_.get(); }
  // Whether the operation has finished (successfully or not), without blocking.
  bool is_completed() const {
    return done_.wait_for(std::chrono::seconds(0)) == std::future_status::ready;
  }

 private:
  std::shared_future<void> done_;
};

// A buffer sent to or received from one peer (group rank) in exchange(). A send matches the
// peer's receive with the same tag (in posting order among equal tags); tag -1 takes the tag
// given to exchange(). Tags are >= 0 and below 2^15 (MPI's guaranteed bound).
struct PeerBuffer {
  Tensor tensor;
  int peer = 0;
  int tag = -1;
};

class ProcessGroup {
 public:
  explicit ProcessGroup(ProcessGroupOptions options);
  virtual ~ProcessGroup();
  ProcessGroup(const ProcessGroup&) = delete;
  ProcessGroup& operator=(const ProcessGroup&) = delete;

  int rank() const { return options_.rank; }
  int size() const { return options_.size; }
  const std::string& name() const { return options_.name; }
  const std::string& backend() const { return options_.backend; }
  const ProcessGroupOptions& options() const { return options_; }
  // World rank of group rank `group_rank`, and back (-1 when `world_rank` is not a member).
  int world_rank(int group_rank) const;
  int group_rank(int world_rank) const;
  // Whether an earlier operation failed; every later operation then throws at once.
  bool broken() const;

  // Blocking collectives (NOTE [Collective semantics]). Each throws cleave::Error on bad input,
  // on failure and after options().timeout.
  void all_reduce(const Tensor& tensor, ReduceOp op = ReduceOp::kSum);
  void all_reduce(const Tensor& output, const Tensor& input, ReduceOp op = ReduceOp::kSum);
  void all_reduce(const std::vector<Tensor>& outputs, const std::vector<Tensor>& inputs,
                  ReduceOp op = ReduceOp::kSum);
  void all_gather(const Tensor& output, const Tensor& input);
  void reduce_scatter(const Tensor& output, const Tensor& input, ReduceOp op = ReduceOp::kSum);
  void broadcast(const Tensor& tensor, int root);
  void all_to_all(const Tensor& output, const Tensor& input);
  void exchange(const std::vector<PeerBuffer>& sends, const std::vector<PeerBuffer>& recvs,
                int tag = 0);
  void send(const Tensor& tensor, int dst, int tag = 0);
  void recv(const Tensor& tensor, int src, int tag = 0);
  void barrier();

  // Asynchronous variants: bad input throws at once; the tensors must stay alive and untouched
  // until the Work completes.
  std::shared_ptr<Work> all_reduce_async(const Tensor& tensor, ReduceOp op = ReduceOp::kSum);
  std::shared_ptr<Work> all_reduce_async(const Tensor& output, const Tensor& input,
                                         ReduceOp op = ReduceOp::kSum);
  std::shared_ptr<Work> all_reduce_async(const std::vector<Tensor>& outputs,
                                         const std::vector<Tensor>& inputs,
                                         ReduceOp op = ReduceOp::kSum);
  std::shared_ptr<Work> all_gather_async(const Tensor& output, const Tensor& input);
  std::shared_ptr<Work> reduce_scatter_async(const Tensor& output, const Tensor& input,
                                             ReduceOp op = ReduceOp::kSum);
  std::shared_ptr<Work> broadcast_async(const Tensor& tensor, int root);
  std::shared_ptr<Work> all_to_all_async(const Tensor& output, const Tensor& input);
  std::shared_ptr<Work> exchange_async(const std::vector<PeerBuffer>& sends,
                                       const std::vector<PeerBuffer>& recvs, int tag = 0);
  std::shared_ptr<Work> send_async(const Tensor& tensor, int dst, int tag = 0);
  std::shared_ptr<Work> recv_async(const Tensor& tensor, int src, int tag = 0);
  std::shared_ptr<Work> barrier_async();

  // Point-to-point posted without a thread of its own (for pipelines that post many small
  // messages): returns at once; Work::wait() blocks until the transfer is done, bounded by the
  // group's timeout, on the waiting thread. The tensor must stay alive and untouched until then.
  // Over Gloo's TCP pairs a send completes only once the peer has posted the matching receive
  // (Gloo's rendezvous), so post receives early; between ranks of one host (shared memory) it
  // completes once its bytes are in the peer's ring. Backends without a native path (the
  // default) use send_async/recv_async.
  std::shared_ptr<Work> isend(const Tensor& tensor, int dst, int tag);
  std::shared_ptr<Work> irecv(const Tensor& tensor, int src, int tag);

 protected:
  // Backend hooks. Arguments are checked already; size() > 1; element counts may be 0. A hook
  // throws any std::exception on failure (BackendFailure when it knows the peer); the base class
  // turns it into the cleave::Error of NOTE [Communication errors] and marks the group broken.
  virtual void do_all_reduce(const Tensor& tensor, ReduceOp op) = 0;
  // NOTE [AllReduce into other buffers]
  // Every AllReduce reaches the backend here. `outputs` and `inputs` are as many buffers (at
  // least one), buffer k of each with the same element count and all of one dtype; the operand is
  // the concatenation of the inputs, the result that of the outputs. An output is either its
  // input itself (in place) or disjoint from every input. `op` may be kMean. The default joins
  // several buffers into one (a copy each way), copies an input into a distinct output, runs
  // do_all_reduce with kSum for kMean and scales the result. A backend that reads its operand
  // where it lies overrides it: the shared-memory collectives read the inputs and write the
  // outputs in the passes they make anyway, and divide each reduced chunk while it is in cache
  // (the same bits as the default: the sum, then one multiplication by 1 / size). A compiled
  // step's AllReduce (an output apart from its input) thereby skips a copy of the whole buffer
  // and, for a mean, a second pass over it; a DATA_PARALLEL bucket (FusedAllReduce, NOTE
  // [Gradient buckets]) skips joining its gradients and slicing them back.
  virtual void do_all_reduce_parts(const std::vector<Tensor>& outputs,
                                   const std::vector<Tensor>& inputs, ReduceOp op);
  virtual void do_all_gather(const Tensor& output, const Tensor& input) = 0;
  virtual void do_reduce_scatter(const Tensor& output, const Tensor& input, ReduceOp op) = 0;
  virtual void do_broadcast(const Tensor& tensor, int root) = 0;
  virtual void do_all_to_all(const Tensor& output, const Tensor& input) = 0;
  // Every buffer's tag is resolved (>= 0); none is addressed to this rank itself.
  virtual void do_exchange(const std::vector<PeerBuffer>& sends,
                           const std::vector<PeerBuffer>& recvs) = 0;
  virtual void do_barrier() = 0;
  // Posts one point-to-point transfer (the peer is not this rank, the tag resolved, the tensor
  // not empty) and returns a function that waits for it, throwing on failure or timeout; null
  // when the backend has no native path.
  virtual std::function<void()> do_post(const Tensor& tensor, int peer, int tag, bool is_send);
  // Makes the sub-group described by `options` (rank, size, world_ranks and name set; store the
  // parent's store namespaced by the parent's name). `parent_ranks` are its members' ranks in
  // this group. The default calls create_process_group(options).
  virtual std::shared_ptr<ProcessGroup> make_subgroup(const ProcessGroupOptions& options,
                                                      const std::vector<int>& parent_ranks) const;
  friend std::shared_ptr<ProcessGroup> create_subgroup(const ProcessGroup&, const std::vector<int>&,
                                                       const std::string&);
  // Called by the destructor of the most derived class before its members go: stops the
  // communication thread.
  void shutdown();

 private:
  struct OpInfo {
    const char* op;
    int peer = -1;           // the peer named in errors
    std::vector<int> peers;  // point-to-point: the group ranks it waits for (comm/progress.h)
    int tag = -1;            // point-to-point: the message tag (-1: none)
  };
  // Runs `fn` in call order with the group's other operations (NOTE [Ordering of operations]),
  // translating failures.
  void run(const OpInfo& info, const std::function<void()>& fn);
  std::shared_ptr<Work> enqueue(const OpInfo& info, std::function<void()> fn);
  // isend / irecv: do_post when the backend has it, else send_async / recv_async.
  std::shared_ptr<Work> post(const Tensor& tensor, int peer, int tag, bool is_send);
  void guarded(const OpInfo& info, const std::function<void()>& fn);
  void worker_loop();
  void check_usable(const OpInfo& info) const;
  // An AllReduce whose arguments were checked: the size-1 and empty shortcut, else the hook.
  void all_reduce_checked(const std::vector<Tensor>& outputs, const std::vector<Tensor>& inputs,
                          ReduceOp op);

  ProcessGroupOptions options_;
  mutable std::mutex state_mutex_;
  std::string broken_reason_;  // empty while the group works

  std::mutex queue_mutex_;
  std::condition_variable queue_cv_;
  std::deque<std::function<void()>> queue_;
  bool worker_busy_ = false;
  bool stopping_ = false;
  std::thread worker_;
  std::mutex exec_mutex_;  // held while an operation runs
  int p2p_in_flight_ = 0;  // asynchronous point-to-point threads running (under queue_mutex_)
  std::condition_variable p2p_done_;
};

// Thrown by backend hooks when the failure concerns one peer (group rank).
struct BackendFailure : std::runtime_error {
  BackendFailure(const std::string& message, int peer) : std::runtime_error(message), peer(peer) {}
  int peer;
};

// Makes a group on `options.backend`; blocks until every rank of the group has joined (or throws
// a kUnavailable cleave::Error after options.timeout naming the ranks that did not arrive). A
// backend not in this build, or "hccl", is a kUnimplemented Error.
std::shared_ptr<ProcessGroup> create_process_group(const ProcessGroupOptions& options);

// Makes the sub-group of `parent` holding the parent ranks `ranks` (ascending: the group rank of
// ranks[i] is i), on the parent's backend, with the store namespace `name` inside the parent's
// (so names must be unique per parent). Called by every member, and only by members; blocks
// until all have joined. Throws cleave::Error when this rank is not in `ranks` or `ranks` is not
// ascending and within the parent.
std::shared_ptr<ProcessGroup> create_subgroup(const ProcessGroup& parent,
                                              const std::vector<int>& ranks,
                                              const std::string& name);

// Whether this build has the backend ("gloo", "inproc" always; "mpi", "nccl" if compiled in).
bool backend_available(const std::string& backend);

}  // namespace cleave::comm

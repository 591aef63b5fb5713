// ProcessGroup: argument checks, ordering, asynchronous execution and error translation shared
// by every backend (src/comm/gloo, src/comm/mpi, src/comm/nccl).
#include "cleave/comm/process_group.h"

#include <fmt/ranges.h>

#include <algorithm>
#include <cstring>

#include "cleave/comm/progress.h"
#include "cleave/core/dtype.h"
#include "cleave/core/error.h"
#include "comm/backends.h"

namespace cleave::comm {

const char* reduce_op_name(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum:
      return "sum";
    case ReduceOp::kMax:
      return "max";
    case ReduceOp::kMin:
      return "min";
    case ReduceOp::kProd:
      return "prod";
    case ReduceOp::kMean:
      return "mean";
  }
  return "?";
}

ProcessGroup::ProcessGroup(ProcessGroupOptions options) : options_(std::move(options)) {
  CLEAVE_CHECK_ARG(options_.size >= 1, "ProcessGroup '{}': size {} must be at least 1",
                   options_.name, options_.size);
  CLEAVE_CHECK_ARG(options_.rank >= 0 && options_.rank < options_.size,
                   "ProcessGroup '{}': rank {} is out of range; expected 0 <= rank < size {}",
                   options_.name, options_.rank, options_.size);
  if (options_.world_ranks.empty()) {
    for (int r = 0; r < options_.size; ++r) options_.world_ranks.push_back(r);
  }
  CLEAVE_CHECK_ARG(static_cast<int>(options_.world_ranks.size()) == options_.size,
                   "ProcessGroup '{}': world_ranks has {} entries; expected one per rank ({})",
                   options_.name, options_.world_ranks.size(), options_.size);
}

ProcessGroup::~ProcessGroup() { shutdown(); }

void ProcessGroup::shutdown() {
  {
    std::unique_lock<std::mutex> lock(queue_mutex_);
    p2p_done_.wait(lock, [&] { return p2p_in_flight_ == 0; });
    if (stopping_) return;
    stopping_ = true;
  }
  queue_cv_.notify_all();
  if (worker_.joinable()) worker_.join();
}

int ProcessGroup::world_rank(int group_rank) const {
  CLEAVE_CHECK_ARG(group_rank >= 0 && group_rank < size(),
                   "group '{}': rank {} is out of range; the group has {} ranks", name(),
                   group_rank, size());
  return options_.world_ranks[static_cast<size_t>(group_rank)];
}

int ProcessGroup::group_rank(int world_rank) const {
  for (int r = 0; r < size(); ++r) {
    if (options_.world_ranks[static_cast<size_t>(r)] == world_rank) return r;
  }
  return -1;
}

bool ProcessGroup::broken() const {
  std::lock_guard<std::mutex> lock(state_mutex_);
  return !broken_reason_.empty();
}

// ---- argument checks ----
namespace {

void check_tensor(const ProcessGroup& g, const char* op, const char* role, const Tensor& t) {
  CLEAVE_CHECK_ARG(t.defined(), "{} on group '{}' (rank {}): the {} tensor is undefined", op,
                   g.name(), g.rank(), role);
  if (g.backend() != "nccl") {
    CLEAVE_CHECK_ARG(t.device().is_cpu(),
                     "{} on group '{}' (rank {}): the {} tensor is on {}; the {} backend needs "
                     "CPU tensors",
                     op, g.name(), g.rank(), role, t.device().to_string(), g.backend());
  }
}

void check_same_dtype(const ProcessGroup& g, const char* op, const Tensor& out, const Tensor& in) {
  CLEAVE_CHECK_ARG(out.dtype() == in.dtype(),
                   "{} on group '{}' (rank {}): the output has dtype {} but the input has {}; "
                   "they must match",
                   op, g.name(), g.rank(), dtype_name(out.dtype()), dtype_name(in.dtype()));
}

void check_peer(const ProcessGroup& g, const char* op, const char* role, int peer) {
  CLEAVE_CHECK_ARG(peer >= 0 && peer < g.size(),
                   "{} on group '{}' (rank {}): {} rank {} is out of range; the group has {} "
                   "ranks (0..{})",
                   op, g.name(), g.rank(), role, peer, g.size(), g.size() - 1);
}

void check_reduce(const ProcessGroup& g, const char* op, const Tensor& t, ReduceOp rop) {
  if (rop == ReduceOp::kMean) {
    CLEAVE_CHECK_ARG(t.dtype() == DType::kFloat32 || t.dtype() == DType::kFloat64,
                     "{} on group '{}' (rank {}): op mean needs a floating tensor; got dtype {}",
                     op, g.name(), g.rank(), dtype_name(t.dtype()));
  }
  if (t.dtype() == DType::kBool) {
    CLEAVE_CHECK_ARG(rop == ReduceOp::kMax || rop == ReduceOp::kMin,
                     "{} on group '{}' (rank {}): op {} is not defined on Bool tensors; use max "
                     "(any) or min (all)",
                     op, g.name(), g.rank(), reduce_op_name(rop));
  }
}

void copy_bytes(const Tensor& dst, const Tensor& src, size_t dst_offset_bytes = 0) {
  if (src.nbytes() == 0) return;
  std::memcpy(static_cast<char*>(dst.raw_data()) + dst_offset_bytes, src.raw_data(), src.nbytes());
}

void scale_by_size(const Tensor& t, int size) {
  CLEAVE_DISPATCH_FLOAT(t.dtype(), [&] {
    T* p = t.data<T>();
    const T s = static_cast<T>(1.0 / size);
    const int64_t n = t.numel();
    for (int64_t i = 0; i < n; ++i) p[i] *= s;
  });
}

}  // namespace

// ---- execution ----

// NOTE [Communication errors]
// A backend failure (a peer gone, a timeout, a transport error) becomes one cleave::Error of kind
// ErrorKind::kUnavailable:
//   "<Op> on group '<name>' (<backend>, rank <r> of <n>[, peer rank <p> = world rank <w>]) failed:
//    <what the library said>. The group is now broken: later operations on it fail at once."
// and the group stays broken, so a rank that lost a peer never waits on it again; those later
// operations fail with kUnavailable too. A cleave::Error thrown inside the operation keeps its
// kind (a check of the backend on its arguments stays kInvalidArgument).
void ProcessGroup::check_usable(const OpInfo& info) const {
  std::lock_guard<std::mutex> lock(state_mutex_);
  if (!broken_reason_.empty()) {
    CLEAVE_UNAVAILABLE(
        "{} on group '{}' (rank {}): the group is broken by an earlier failure, so no operation "
        "can run on it; the first failure was: {}",
        info.op, name(), rank(), broken_reason_);
  }
}

void ProcessGroup::guarded(const OpInfo& info, const std::function<void()>& fn) {
  check_usable(info);
  std::string what;
  ErrorKind kind = ErrorKind::kUnavailable;
  int peer = info.peer;
  InFlight in_flight(*this, info.op, info.peers, info.tag);
  try {
    fn();
    return;
  } catch (const BackendFailure& e) {
    what = e.what();
    if (e.peer >= 0) peer = e.peer;
  } catch (const Error& e) {
    what = e.what();
    kind = e.kind();
  } catch (const std::exception& e) {
    what = e.what();
  }
  std::string where = fmt::format("{}, rank {} of {}", backend(), rank(), size());
  if (peer >= 0 && peer < size()) {
    where += fmt::format(", peer rank {} = world rank {}", peer, world_rank(peer));
  }
  const std::string message = fmt::format(
      "{} on group '{}' ({}) failed: {}. The group is now broken: later operations "
      "on it fail at once",
      info.op, name(), where, what);
  {
    std::lock_guard<std::mutex> lock(state_mutex_);
    if (broken_reason_.empty()) broken_reason_ = message;
  }
  // NOTE [Failure hook]: only a failure that a lost peer may explain waits for the job's verdict;
  // a wrong call (ranks calling different collectives, a bad argument) is this job's answer.
  if (kind == ErrorKind::kUnavailable) call_failure_hook(message);
  throw Error(kind, message);
}

// NOTE [Ordering of operations]
// Every rank must issue a group's collectives in the same order. Asynchronous operations go to
// the group's communication thread (started on first use) in FIFO order; a blocking call waits
// for the queue to drain and then runs on the calling thread (no hand-off, so small messages pay
// no thread switch). exec_mutex_ keeps one operation on the wire at a time.
void ProcessGroup::run(const OpInfo& info, const std::function<void()>& fn) {
  std::unique_lock<std::mutex> queue_lock(queue_mutex_);
  if (queue_.empty() && !worker_busy_) {
    std::lock_guard<std::mutex> exec(exec_mutex_);
    queue_lock.unlock();
    guarded(info, fn);
    return;
  }
  queue_lock.unlock();
  enqueue(info, fn)->wait();
}

std::shared_ptr<Work> ProcessGroup::enqueue(const OpInfo& info, std::function<void()> fn) {
  auto task = std::make_shared<std::packaged_task<void()>>(
      [this, info, fn = std::move(fn)] { guarded(info, fn); });
  auto work = std::make_shared<Work>(task->get_future().share());
  {
    std::lock_guard<std::mutex> lock(queue_mutex_);
    CLEAVE_ASSERT(!stopping_, "operation queued on a group being destroyed");
    queue_.push_back([task] { (*task)(); });
    if (!worker_.joinable()) worker_ = std::thread([this] { worker_loop(); });
  }
  queue_cv_.notify_all();
  return work;
}

namespace {
thread_local bool t_communication_thread = false;
}  // namespace

bool on_communication_thread() { return t_communication_thread; }

void ProcessGroup::worker_loop() {
  t_communication_thread = true;
  while (true) {
    std::function<void()> job;
    {
      std::unique_lock<std::mutex> lock(queue_mutex_);
      queue_cv_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
      if (queue_.empty()) return;
      job = std::move(queue_.front());
      queue_.pop_front();
      worker_busy_ = true;
    }
    {
      std::lock_guard<std::mutex> exec(exec_mutex_);
      job();
    }
    {
      std::lock_guard<std::mutex> lock(queue_mutex_);
      worker_busy_ = false;
    }
  }
}

// ---- the operations: check, then run the backend hook (or the size-1 shortcut) ----

namespace {
void check_all_reduce(const ProcessGroup& g, const std::vector<Tensor>& outs,
                      const std::vector<Tensor>& ins, ReduceOp op) {
  CLEAVE_CHECK_ARG(!ins.empty() && outs.size() == ins.size(),
                   "AllReduce on group '{}' (rank {}): {} outputs for {} inputs; expected as many "
                   "outputs as inputs, at least one",
                   g.name(), g.rank(), outs.size(), ins.size());
  for (size_t k = 0; k < ins.size(); ++k) {
    const Tensor& in = ins[k];
    const Tensor& out = outs[k];
    check_tensor(g, "AllReduce", "input", in);
    check_tensor(g, "AllReduce", "output", out);
    check_same_dtype(g, "AllReduce", out, in);
    CLEAVE_CHECK_ARG(in.dtype() == ins.front().dtype(),
                     "AllReduce on group '{}' (rank {}): input {} has dtype {} but input 0 has {}; "
                     "the buffers of one AllReduce share a dtype",
                     g.name(), g.rank(), k, dtype_name(in.dtype()),
                     dtype_name(ins.front().dtype()));
    CLEAVE_CHECK_ARG(out.numel() == in.numel(),
                     "AllReduce on group '{}' (rank {}): the output{} has {} elements but the "
                     "input has {}; they must match",
                     g.name(), g.rank(), ins.size() > 1 ? fmt::format(" {}", k) : "", out.numel(),
                     in.numel());
  }
  check_reduce(g, "AllReduce", ins.front(), op);
}
}  // namespace

void ProcessGroup::do_all_reduce_parts(const std::vector<Tensor>& outputs,
                                       const std::vector<Tensor>& inputs, ReduceOp op) {
  const auto reduce = [&](const Tensor& t) {
    do_all_reduce(t, op == ReduceOp::kMean ? ReduceOp::kSum : op);
    if (op == ReduceOp::kMean) scale_by_size(t, size());
  };
  if (inputs.size() == 1) {
    if (outputs[0].raw_data() != inputs[0].raw_data()) copy_bytes(outputs[0], inputs[0]);
    return reduce(outputs[0]);
  }
  int64_t total = 0;
  for (const Tensor& t : inputs) total += t.numel();
  const Tensor flat = Tensor::empty(Shape({total}), inputs[0].dtype());
  size_t at = 0;
  for (const Tensor& t : inputs) {
    copy_bytes(flat, t, at);
    at += t.nbytes();
  }
  reduce(flat);
  at = 0;
  for (const Tensor& t : outputs) {
    std::memcpy(t.raw_data(), static_cast<const char*>(flat.raw_data()) + at, t.nbytes());
    at += t.nbytes();
  }
}

void ProcessGroup::all_reduce_checked(const std::vector<Tensor>& outputs,
                                      const std::vector<Tensor>& inputs, ReduceOp op) {
  int64_t total = 0;
  for (const Tensor& t : inputs) total += t.numel();
  if (size() == 1 || total == 0) {
    for (size_t k = 0; k < inputs.size(); ++k) {
      if (outputs[k].raw_data() != inputs[k].raw_data()) copy_bytes(outputs[k], inputs[k]);
    }
    return;
  }
  do_all_reduce_parts(outputs, inputs, op);
}

void ProcessGroup::all_reduce(const Tensor& tensor, ReduceOp op) { all_reduce(tensor, tensor, op); }

void ProcessGroup::all_reduce(const Tensor& output, const Tensor& input, ReduceOp op) {
  all_reduce(std::vector<Tensor>{output}, std::vector<Tensor>{input}, op);
}

void ProcessGroup::all_reduce(const std::vector<Tensor>& outputs, const std::vector<Tensor>& inputs,
                              ReduceOp op) {
  check_all_reduce(*this, outputs, inputs, op);
  run({"AllReduce"}, [&] { all_reduce_checked(outputs, inputs, op); });
}

std::shared_ptr<Work> ProcessGroup::all_reduce_async(const Tensor& tensor, ReduceOp op) {
  return all_reduce_async(tensor, tensor, op);
}

std::shared_ptr<Work> ProcessGroup::all_reduce_async(const Tensor& output, const Tensor& input,
                                                     ReduceOp op) {
  return all_reduce_async(std::vector<Tensor>{output}, std::vector<Tensor>{input}, op);
}

std::shared_ptr<Work> ProcessGroup::all_reduce_async(const std::vector<Tensor>& outputs,
                                                     const std::vector<Tensor>& inputs,
                                                     ReduceOp op) {
  check_all_reduce(*this, outputs, inputs, op);
  return enqueue({"AllReduce"},
                 [this, outputs, inputs, op] { all_reduce_checked(outputs, inputs, op); });
}

namespace {
void check_gather(const ProcessGroup& g, const char* op, const Tensor& out, const Tensor& in,
                  const char* big, const char* small) {
  check_tensor(g, op, "output", out);
  check_tensor(g, op, "input", in);
  check_same_dtype(g, op, out, in);
  const Tensor& whole = std::string(big) == "output" ? out : in;
  const Tensor& part = std::string(big) == "output" ? in : out;
  CLEAVE_CHECK_ARG(whole.numel() == part.numel() * g.size(),
                   "{} on group '{}' (rank {}): the {} has {} elements; expected group size {} x "
                   "{} elements of the {} = {}",
                   op, g.name(), g.rank(), big, whole.numel(), g.size(), part.numel(), small,
                   part.numel() * g.size());
}
}  // namespace

void ProcessGroup::all_gather(const Tensor& output, const Tensor& input) {
  check_gather(*this, "AllGather", output, input, "output", "input");
  run({"AllGather"}, [&] {
    if (size() == 1) return copy_bytes(output, input);
    if (input.numel() > 0) do_all_gather(output, input);
  });
}

std::shared_ptr<Work> ProcessGroup::all_gather_async(const Tensor& output, const Tensor& input) {
  check_gather(*this, "AllGather", output, input, "output", "input");
  return enqueue({"AllGather"}, [this, output, input] {
    if (size() == 1) return copy_bytes(output, input);
    if (input.numel() > 0) do_all_gather(output, input);
  });
}

namespace {
void check_reduce_scatter(const ProcessGroup& g, const Tensor& out, const Tensor& in, ReduceOp op) {
  check_gather(g, "ReduceScatter", out, in, "input", "output");
  check_reduce(g, "ReduceScatter", in, op);
}
}  // namespace

void ProcessGroup::reduce_scatter(const Tensor& output, const Tensor& input, ReduceOp op) {
  check_reduce_scatter(*this, output, input, op);
  run({"ReduceScatter"}, [&] {
    if (size() == 1) return copy_bytes(output, input);
    if (output.numel() == 0) return;
    do_reduce_scatter(output, input, op == ReduceOp::kMean ? ReduceOp::kSum : op);
    if (op == ReduceOp::kMean) scale_by_size(output, size());
  });
}

std::shared_ptr<Work> ProcessGroup::reduce_scatter_async(const Tensor& output, const Tensor& input,
                                                         ReduceOp op) {
  check_reduce_scatter(*this, output, input, op);
  return enqueue({"ReduceScatter"}, [this, output, input, op] {
    if (size() == 1) return copy_bytes(output, input);
    if (output.numel() == 0) return;
    do_reduce_scatter(output, input, op == ReduceOp::kMean ? ReduceOp::kSum : op);
    if (op == ReduceOp::kMean) scale_by_size(output, size());
  });
}

void ProcessGroup::broadcast(const Tensor& tensor, int root) {
  check_tensor(*this, "Broadcast", "input", tensor);
  check_peer(*this, "Broadcast", "root", root);
  run({"Broadcast", root}, [&] {
    if (size() > 1 && tensor.numel() > 0) do_broadcast(tensor, root);
  });
}

std::shared_ptr<Work> ProcessGroup::broadcast_async(const Tensor& tensor, int root) {
  check_tensor(*this, "Broadcast", "input", tensor);
  check_peer(*this, "Broadcast", "root", root);
  return enqueue({"Broadcast", root}, [this, tensor, root] {
    if (size() > 1 && tensor.numel() > 0) do_broadcast(tensor, root);
  });
}

namespace {
void check_all_to_all(const ProcessGroup& g, const Tensor& out, const Tensor& in) {
  const char* op = "AlltoAll";
  check_tensor(g, op, "output", out);
  check_tensor(g, op, "input", in);
  check_same_dtype(g, op, out, in);
  CLEAVE_CHECK_ARG(in.numel() % g.size() == 0,
                   "{} on group '{}' (rank {}): the input has {} elements, not divisible into {} "
                   "equal chunks (one per rank)",
                   op, g.name(), g.rank(), in.numel(), g.size());
  CLEAVE_CHECK_ARG(out.numel() == in.numel(),
                   "{} on group '{}' (rank {}): the output has {} elements; expected {} (as many "
                   "as the input)",
                   op, g.name(), g.rank(), out.numel(), in.numel());
}
}  // namespace

void ProcessGroup::all_to_all(const Tensor& output, const Tensor& input) {
  check_all_to_all(*this, output, input);
  run({"AlltoAll"}, [&] {
    if (size() == 1) return copy_bytes(output, input);
    if (input.numel() > 0) do_all_to_all(output, input);
  });
}

std::shared_ptr<Work> ProcessGroup::all_to_all_async(const Tensor& output, const Tensor& input) {
  check_all_to_all(*this, output, input);
  return enqueue({"AlltoAll"}, [this, output, input] {
    if (size() == 1) return copy_bytes(output, input);
    if (input.numel() > 0) do_all_to_all(output, input);
  });
}

namespace {
// The remote messages of an exchange with their tags resolved, and the messages to this rank
// itself paired up (matched by tag, in order) so that backends see only real peers.
struct ExchangePlan {
  std::vector<PeerBuffer> sends, recvs;                // remote only
  std::vector<std::pair<Tensor, Tensor>> self_copies;  // (destination, source)
};

ExchangePlan plan_exchange(const ProcessGroup& g, const char* op,
                           const std::vector<PeerBuffer>& sends,
                           const std::vector<PeerBuffer>& recvs, int tag) {
  ExchangePlan plan;
  std::vector<PeerBuffer> self_sends;
  for (PeerBuffer s : sends) {
    check_tensor(g, op, "send", s.tensor);
    check_peer(g, op, "destination", s.peer);
    if (s.tag < 0) s.tag = tag;
    (s.peer == g.rank() ? self_sends : plan.sends).push_back(s);
  }
  std::vector<bool> used(self_sends.size(), false);
  for (PeerBuffer r : recvs) {
    check_tensor(g, op, "receive", r.tensor);
    check_peer(g, op, "source", r.peer);
    if (r.tag < 0) r.tag = tag;
    if (r.peer != g.rank()) {
      plan.recvs.push_back(r);
      continue;
    }
    size_t k = 0;
    while (k < self_sends.size() && (used[k] || self_sends[k].tag != r.tag)) ++k;
    CLEAVE_CHECK_ARG(k < self_sends.size(),
                     "{} on group '{}' (rank {}): a receive from this rank itself (tag {}) has no "
                     "matching send to itself",
                     op, g.name(), g.rank(), r.tag);
    used[k] = true;
    CLEAVE_CHECK_ARG(self_sends[k].tensor.nbytes() == r.tensor.nbytes(),
                     "{} on group '{}' (rank {}): the send to itself has {} bytes but the receive "
                     "from itself expects {}",
                     op, g.name(), g.rank(), self_sends[k].tensor.nbytes(), r.tensor.nbytes());
    plan.self_copies.emplace_back(r.tensor, self_sends[k].tensor);
  }
  const auto unmatched = std::count(used.begin(), used.end(), false);
  CLEAVE_CHECK_ARG(unmatched == 0,
                   "{} on group '{}' (rank {}): {} sends to this rank itself have no matching "
                   "receive from itself",
                   op, g.name(), g.rank(), unmatched);
  return plan;
}

void run_plan(const ExchangePlan& plan, const std::function<void()>& remote) {
  for (const auto& [dst, src] : plan.self_copies) copy_bytes(dst, src);
  if (!plan.sends.empty() || !plan.recvs.empty()) remote();
}

int single_peer(const std::vector<PeerBuffer>& sends, const std::vector<PeerBuffer>& recvs) {
  if (sends.size() + recvs.size() != 1) return -1;
  return sends.empty() ? recvs[0].peer : sends[0].peer;
}

// The distinct remote peers of an exchange, ascending.
std::vector<int> remote_peers(const ExchangePlan& plan) {
  std::vector<int> peers;
  for (const PeerBuffer& b : plan.sends) peers.push_back(b.peer);
  for (const PeerBuffer& b : plan.recvs) peers.push_back(b.peer);
  std::sort(peers.begin(), peers.end());
  peers.erase(std::unique(peers.begin(), peers.end()), peers.end());
  return peers;
}
}  // namespace

void ProcessGroup::exchange(const std::vector<PeerBuffer>& sends,
                            const std::vector<PeerBuffer>& recvs, int tag) {
  const char* op = sends.empty() ? "Recv" : recvs.empty() ? "Send" : "NeighborExchange";
  const ExchangePlan plan = plan_exchange(*this, op, sends, recvs, tag);
  run({op, single_peer(sends, recvs), remote_peers(plan), tag},
      [&] { run_plan(plan, [&] { do_exchange(plan.sends, plan.recvs); }); });
}

// NOTE [Asynchronous point-to-point]
// A send or receive posted asynchronously must not wait behind queued collectives: the matching
// operation of the peer may come after a collective this rank issues later (a pipeline stage
// posts its receive, then computes, then all-reduces). So point-to-point work runs on a thread of
// its own rather than on the group's queue; backends keep point-to-point traffic on tags apart
// from the collectives' (gloo slots, MPI tags), so they never match each other.
std::shared_ptr<Work> ProcessGroup::exchange_async(const std::vector<PeerBuffer>& sends,
                                                   const std::vector<PeerBuffer>& recvs, int tag) {
  const char* op = sends.empty() ? "Recv" : recvs.empty() ? "Send" : "NeighborExchange";
  const ExchangePlan plan = plan_exchange(*this, op, sends, recvs, tag);
  const OpInfo info{op, single_peer(sends, recvs), remote_peers(plan), tag};
  auto task = std::make_shared<std::packaged_task<void()>>([this, info, plan] {
    guarded(info, [&] { run_plan(plan, [&] { do_exchange(plan.sends, plan.recvs); }); });
  });
  auto work = std::make_shared<Work>(task->get_future().share());
  {
    std::lock_guard<std::mutex> lock(queue_mutex_);
    ++p2p_in_flight_;
  }
  // Detached, and counted so that shutdown() waits for it (each is bounded by the timeout).
  std::thread([this, task] {
    (*task)();
    std::lock_guard<std::mutex> lock(queue_mutex_);
    if (--p2p_in_flight_ == 0) p2p_done_.notify_all();
  }).detach();
  return work;
}

void ProcessGroup::send(const Tensor& tensor, int dst, int tag) {
  exchange({{tensor, dst}}, {}, tag);
}
void ProcessGroup::recv(const Tensor& tensor, int src, int tag) {
  exchange({}, {{tensor, src}}, tag);
}
std::shared_ptr<Work> ProcessGroup::send_async(const Tensor& tensor, int dst, int tag) {
  return exchange_async({{tensor, dst}}, {}, tag);
}
std::shared_ptr<Work> ProcessGroup::recv_async(const Tensor& tensor, int src, int tag) {
  return exchange_async({}, {{tensor, src}}, tag);
}

std::function<void()> ProcessGroup::do_post(const Tensor&, int, int, bool) { return nullptr; }

std::shared_ptr<Work> ProcessGroup::post(const Tensor& tensor, int peer, int tag, bool is_send) {
  const char* op = is_send ? "Send" : "Recv";
  check_tensor(*this, op, is_send ? "send" : "receive", tensor);
  check_peer(*this, op, is_send ? "destination" : "source", peer);
  auto fallback = [&] {
    return is_send ? send_async(tensor, peer, tag) : recv_async(tensor, peer, tag);
  };
  if (peer == rank() || tensor.nbytes() == 0) return fallback();
  const OpInfo info{op, peer, {peer}, tag};
  std::function<void()> wait;
  guarded(info, [&] { wait = do_post(tensor, peer, tag, is_send); });
  if (!wait) return fallback();
  // Deferred: the wait runs on the thread that calls Work::wait(), with the group's error
  // translation; `tensor` stays referenced until then.
  return std::make_shared<Work>(std::async(std::launch::deferred, [this, info, wait, tensor] {
                                  guarded(info, wait);
                                }).share());
}

std::shared_ptr<Work> ProcessGroup::isend(const Tensor& tensor, int dst, int tag) {
  return post(tensor, dst, tag, true);
}

std::shared_ptr<Work> ProcessGroup::irecv(const Tensor& tensor, int src, int tag) {
  return post(tensor, src, tag, false);
}

void ProcessGroup::barrier() {
  run({"Barrier"}, [&] {
    if (size() > 1) do_barrier();
  });
}

std::shared_ptr<Work> ProcessGroup::barrier_async() {
  return enqueue({"Barrier"}, [this] {
    if (size() > 1) do_barrier();
  });
}

// ---- construction ----

std::shared_ptr<ProcessGroup> ProcessGroup::make_subgroup(
    const ProcessGroupOptions& options, const std::vector<int>& /*parent_ranks*/) const {
  return create_process_group(options);
}

std::shared_ptr<ProcessGroup> create_subgroup(const ProcessGroup& parent,
                                              const std::vector<int>& ranks,
                                              const std::string& name) {
  CLEAVE_CHECK_ARG(!ranks.empty(), "create_subgroup('{}'): the rank list is empty", name);
  int my_rank = -1;
  for (size_t i = 0; i < ranks.size(); ++i) {
    CLEAVE_CHECK_ARG(ranks[i] >= 0 && ranks[i] < parent.size(),
                     "create_subgroup('{}'): rank {} is not in the parent group '{}' of {} ranks",
                     name, ranks[i], parent.name(), parent.size());
    CLEAVE_CHECK_ARG(i == 0 || ranks[i] > ranks[i - 1],
                     "create_subgroup('{}'): ranks must be ascending and distinct; got {} after {}",
                     name, ranks[i], ranks[i - 1]);
    if (ranks[i] == parent.rank()) my_rank = static_cast<int>(i);
  }
  CLEAVE_CHECK_ARG(my_rank >= 0,
                   "create_subgroup('{}'): this process (rank {} of '{}') is not one of the ranks "
                   "[{}]; only members create a group",
                   name, parent.rank(), parent.name(), fmt::join(ranks, ", "));
  ProcessGroupOptions options = parent.options();
  options.name = name;
  options.rank = my_rank;
  options.size = static_cast<int>(ranks.size());
  if (options.store) options.store = make_prefix_store(parent.name(), options.store);
  options.world_ranks.clear();
  for (int r : ranks) options.world_ranks.push_back(parent.world_rank(r));
  return parent.make_subgroup(options, ranks);
}

}  // namespace cleave::comm

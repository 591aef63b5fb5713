// The Gloo backend: TCP transport, rendezvous through comm::Store.
//
// NOTE [Gloo rendezvous]
// Gloo connects a full mesh of TCP pairs: each rank publishes the addresses of its pairs under
// its rank number in a gloo::rendezvous::Store and reads the others'. StoreAdapter serves that
// store from a comm::Store (the scheduler's over gRPC, or the in-memory one in tests), namespaced
// by the group's name, with the group's timeout on every wait.
//
// When every rank of the group is on this host, the collectives go through shared memory
// instead of TCP (NOTE [Shared-memory collectives] in comm/shm/shm_collectives.h), and so does
// point-to-point traffic between ranks of one host (NOTE [Shared-memory point-to-point] in
// comm/shm/shm_p2p.h); messages to ranks on other hosts stay on Gloo's pairs. CLEAVE_COMM_SHM=0
// keeps everything on TCP.
#include <fmt/ranges.h>
#include <gloo/allgather.h>
#include <gloo/allreduce.h>
#include <gloo/alltoall.h>
#include <gloo/barrier.h>
#include <gloo/broadcast.h>
#include <gloo/common/error.h>
#include <gloo/math.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/store.h>
#include <gloo/transport/tcp/device.h>
#include <gloo/types.h>

#include <algorithm>
#include <atomic>
#include <csignal>
#include <cstring>
#include <mutex>
#include <thread>

#include "cleave/comm/process_group.h"
#include "cleave/core/dtype.h"
#include "cleave/core/error.h"
#include "comm/backends.h"
#include "comm/shm/shm_collectives.h"
#include "comm/shm/shm_p2p.h"

namespace cleave::comm {
namespace {

using Clock = std::chrono::steady_clock;

class StoreAdapter final : public gloo::rendezvous::Store {
 public:
  StoreAdapter(std::shared_ptr<comm::Store> store, std::chrono::milliseconds timeout,
               std::string group)
      : store_(std::move(store)), timeout_(timeout), group_(std::move(group)) {}

  void set(const std::string& key, const std::vector<char>& data) override {
    store_->set(key, std::vector<uint8_t>(data.begin(), data.end()));
  }
  std::vector<char> get(const std::string& key) override {
    wait({key}, timeout_);
    const std::vector<uint8_t> v = store_->get(key, timeout_);
    return std::vector<char>(v.begin(), v.end());
  }
  void wait(const std::vector<std::string>& keys) override { wait(keys, timeout_); }
  void wait(const std::vector<std::string>& keys,
            const std::chrono::milliseconds& timeout) override {
    const auto deadline = Clock::now() + timeout;
    auto pause = std::chrono::microseconds(100);
    while (!store_->check(keys)) {
      if (Clock::now() >= deadline) {
        // Gloo's keys are "rank_<r>" (or "<r>"): name the ranks.
        std::vector<std::string> missing;
        for (const std::string& k : keys) {
          if (!store_->check({k})) missing.push_back(k.rfind("rank_", 0) == 0 ? k.substr(5) : k);
        }
        CLEAVE_UNAVAILABLE(
            "group '{}': rank(s) {} did not join within the timeout of {} ms (their rendezvous "
            "keys are unset in the store); check that every rank of the group was started and "
            "creates the group",
            group_, fmt::join(missing, ", "), timeout.count());
      }
      std::this_thread::sleep_for(pause);
      pause = std::min(pause * 2, std::chrono::microseconds(10000));
    }
  }

 private:
  std::shared_ptr<comm::Store> store_;
  std::chrono::milliseconds timeout_;
  std::string group_;
};

gloo::AllreduceOptions::Func reduce_fn(DType dtype, ReduceOp op) {
  using Raw = void (*)(void*, const void*, const void*, size_t);
  gloo::AllreduceOptions::Func fn;
  CLEAVE_DISPATCH_ALL(dtype, [&] {
    switch (op) {
      case ReduceOp::kSum:
      case ReduceOp::kMean:
        fn = static_cast<Raw>(&gloo::sum<T>);
        break;
      case ReduceOp::kProd:
        fn = static_cast<Raw>(&gloo::product<T>);
        break;
      case ReduceOp::kMax:
        fn = static_cast<Raw>(&gloo::max<T>);
        break;
      case ReduceOp::kMin:
        fn = static_cast<Raw>(&gloo::min<T>);
        break;
    }
  });
  return fn;
}

// Point-to-point traffic uses slots with this prefix; Gloo's collectives use small prefixes
// (NOTE [Asynchronous point-to-point]).
constexpr uint8_t kPeerSlotPrefix = 0x7f;

class GlooProcessGroup final : public ProcessGroup {
 public:
  explicit GlooProcessGroup(const ProcessGroupOptions& options) : ProcessGroup(options) {
    CLEAVE_CHECK_ARG(options.store != nullptr,
                     "create_process_group('{}', gloo): a rendezvous store is required",
                     options.name);
    if (options.size == 1) return;
    gloo::transport::tcp::attr attr;
    attr.hostname = options.host;
    try {
      device_ = gloo::transport::tcp::CreateDevice(attr);
    } catch (const std::exception& e) {
      CLEAVE_FAIL("create_process_group('{}', gloo): cannot listen on host '{}' (option host): {}",
                  options.name, options.host, e.what());
    }
    auto context = std::make_shared<gloo::rendezvous::Context>(options.rank, options.size);
    context->setTimeout(options.timeout);
    StoreAdapter store(make_prefix_store(options.name, options.store), options.timeout,
                       options.name);
    try {
      context->connectFullMesh(store, device_);
      context_ = std::move(context);
      // Returns only when every pair is connected on both ends (create_process_group's
      // contract), so a peer that leaves at once cannot cut a half-open connection.
      gloo::BarrierOptions barrier(context_);
      barrier.setTimeout(options.timeout);
      gloo::barrier(barrier);
    } catch (const std::exception& e) {
      CLEAVE_UNAVAILABLE(
          "create_process_group('{}', gloo): rank {} of {} could not connect to its peers: {}",
          options.name, options.rank, options.size, e.what());
    }
    std::shared_ptr<comm::Store> group_store = make_prefix_store(options.name, options.store);
    const std::vector<std::string> hosts = ShmCollectives::host_keys(options, *group_store);
    if (!hosts.empty()) use_shared_memory(hosts, *group_store);
  }

  // "shm", "shm+tcp" (NOTE [Hierarchical collectives]) or "tcp".
  std::string transport() const { return shm_ ? "shm" : hierarchical_ ? "shm+tcp" : "tcp"; }
  // Point-to-point: "shm" when every peer is on this host, "shm+tcp" when some are, else "tcp".
  std::string p2p_transport() const {
    if (!peers_) return "tcp";
    return shm_ ? "shm" : "shm+tcp";
  }
  uint64_t shm_messages_sent() const { return peers_ ? peers_->messages_sent() : 0; }

  ~GlooProcessGroup() override { shutdown(); }

 protected:
  uint32_t next_tag() { return tag_++ & 0xffffff; }

  // Points the options of a collective with an input and an output (AllGather, AlltoAll) at
  // their buffers, with the next tag and the group's timeout.
  template <typename Options>
  void set_input_output(Options& opts, const Tensor& out, const Tensor& in) {
    CLEAVE_DISPATCH_ALL(in.dtype(), [&] {
      opts.setInput(in.data<T>(), in.numel());
      opts.setOutput(out.data<T>(), out.numel());
    });
    opts.setTag(next_tag());
    opts.setTimeout(options().timeout);
  }

  void do_all_reduce(const Tensor& t, ReduceOp op) override {
    if (shm_) return shm_->all_reduce(t, op);
    if (hierarchical_) return hierarchical_all_reduce(t, op);
    gloo::AllreduceOptions opts(context_);
    CLEAVE_DISPATCH_ALL(t.dtype(), [&] { opts.setOutput(t.data<T>(), t.numel()); });
    opts.setReduceFunction(reduce_fn(t.dtype(), op));
    opts.setTag(next_tag());
    opts.setTimeout(options().timeout);
    gloo::allreduce(opts);
  }

  // NOTE [AllReduce into other buffers]: on shared memory, without copies of the inputs.
  void do_all_reduce_parts(const std::vector<Tensor>& outs, const std::vector<Tensor>& ins,
                           ReduceOp op) override {
    if (shm_) return shm_->all_reduce(outs, ins, op);
    ProcessGroup::do_all_reduce_parts(outs, ins, op);
  }

  void do_all_gather(const Tensor& out, const Tensor& in) override {
    if (shm_) return shm_->all_gather(out, in);
    gloo::AllgatherOptions opts(context_);
    set_input_output(opts, out, in);
    gloo::allgather(opts);
  }

  // Gloo has no reduce-scatter in its options API: all-reduce a copy, keep this rank's chunk.
  void do_reduce_scatter(const Tensor& out, const Tensor& in, ReduceOp op) override {
    if (shm_) return shm_->reduce_scatter(out, in, op);
    const Tensor whole = in.clone();
    do_all_reduce(whole, op);
    std::memcpy(out.raw_data(), static_cast<const char*>(whole.raw_data()) + out.nbytes() * rank(),
                out.nbytes());
  }

  void do_broadcast(const Tensor& t, int root) override {
    if (shm_) return shm_->broadcast(t, root);
    if (hierarchical_) return hierarchical_broadcast(t, root);
    gloo::BroadcastOptions opts(context_);
    CLEAVE_DISPATCH_ALL(t.dtype(), [&] { opts.setOutput(t.data<T>(), t.numel()); });
    opts.setRoot(root);
    opts.setTag(next_tag());
    opts.setTimeout(options().timeout);
    gloo::broadcast(opts);
  }

  void do_all_to_all(const Tensor& out, const Tensor& in) override {
    if (shm_) return shm_->all_to_all(out, in);
    gloo::AlltoallOptions opts(context_);
    set_input_output(opts, out, in);
    gloo::alltoall(opts);
  }

  void do_barrier() override {
    if (shm_) return shm_->barrier();
    if (hierarchical_) return hierarchical_barrier();
    gloo::BarrierOptions opts(context_);
    opts.setTag(next_tag());
    opts.setTimeout(options().timeout);
    gloo::barrier(opts);
  }

  // NOTE [Hierarchical collectives]
  // A group whose ranks share no single host but of which some share one: each host's ranks get a
  // shared-memory segment (ShmCollectives over the host's members), and the lowest rank of each
  // host, its leader, joins a Gloo context among the leaders. AllReduce reduces on each host in
  // rank order, the leaders all-reduce over TCP (Gloo's ring, so floating sums of 3 or more hosts
  // follow Gloo's order across hosts), and each leader broadcasts the result on its host; Barrier
  // is a host barrier, a leaders' barrier and a host barrier. The other collectives stay on the
  // group's full Gloo mesh; point-to-point between two ranks of one host goes through the host's
  // segment (NOTE [Shared-memory point-to-point]), to other hosts over the mesh (do_exchange
  // splits an exchange's buffers by peer). Used only when every host with several
  // ranks got its segment (all ranks agree through the store); else everything stays on TCP. A
  // leader whose TCP step fails marks its host's segment failed, so that its members fail at once.
  void use_shared_memory(const std::vector<std::string>& hosts, comm::Store& store) {
    std::vector<int> members, leaders;
    for (int r = 0; r < size(); ++r) {
      if (hosts[r] == hosts[rank()]) members.push_back(r);
      if (std::find(hosts.begin(), hosts.begin() + r, hosts[r]) == hosts.begin() + r) {
        leaders.push_back(r);
      }
    }
    std::unique_ptr<ShmCollectives> local = ShmCollectives::create(
        options(), store, members, ShmPeers::region_bytes(static_cast<int>(members.size())));
    if (leaders.size() == 1) {
      shm_ = std::move(local);
      if (shm_) peers_ = std::make_unique<ShmPeers>(shm_->segment(), rank(), options().timeout);
      return;
    }
    const bool shared = static_cast<int>(leaders.size()) < size();
    const bool ok = local != nullptr || members.size() == 1;
    store.set(fmt::format("shm/host_ok/{}", rank()), {static_cast<uint8_t>(ok ? '1' : '0')});
    bool all_ok = true;
    for (int r = 0; r < size(); ++r) {
      const std::vector<uint8_t> v = store.get(fmt::format("shm/host_ok/{}", r), options().timeout);
      all_ok = all_ok && v.size() == 1 && v[0] == '1';
    }
    if (!shared || !all_ok) return;  // TCP for everything
    local_ = std::move(local);
    if (local_) peers_ = std::make_unique<ShmPeers>(local_->segment(), rank(), options().timeout);
    hierarchical_ = true;
    members_ = members;
    leader_ranks_ = leaders;
    for (int r = 0; r < size(); ++r) {
      leader_of_.push_back(*std::find_if(leaders.begin(), leaders.end(),
                                         [&](int l) { return hosts[l] == hosts[r]; }));
    }
    if (rank() != members[0]) return;
    const int leader =
        static_cast<int>(std::find(leaders.begin(), leaders.end(), rank()) - leaders.begin());
    auto context =
        std::make_shared<gloo::rendezvous::Context>(leader, static_cast<int>(leaders.size()));
    context->setTimeout(options().timeout);
    StoreAdapter adapter(make_prefix_store(options().name + "/leaders", options().store),
                         options().timeout, options().name + " (leaders)");
    try {
      context->connectFullMesh(adapter, device_);
      gloo::BarrierOptions barrier(context);
      barrier.setTimeout(options().timeout);
      gloo::barrier(barrier);
    } catch (const std::exception& e) {
      CLEAVE_UNAVAILABLE(
          "create_process_group('{}', gloo): rank {} (the leader of its host) could not connect "
          "to the other hosts' leaders (ranks {}): {}",
          options().name, rank(), fmt::join(leaders, ", "), e.what());
    }
    leaders_ = std::move(context);
  }

  // Runs `step` (a Gloo operation among the leaders); on failure, first fails this host's segment.
  void leaders_step(const std::function<void()>& step) {
    try {
      step();
    } catch (...) {
      if (local_) local_->segment().abandon(rank());
      throw;
    }
  }

  void hierarchical_all_reduce(const Tensor& t, ReduceOp op) {
    if (local_) local_->all_reduce(t, op);
    if (leaders_) {
      leaders_step([&] {
        gloo::AllreduceOptions opts(leaders_);
        CLEAVE_DISPATCH_ALL(t.dtype(), [&] { opts.setOutput(t.data<T>(), t.numel()); });
        opts.setReduceFunction(reduce_fn(t.dtype(), op));
        opts.setTag(leader_tag_++ & 0xffffff);
        opts.setTimeout(options().timeout);
        gloo::allreduce(opts);
      });
    }
    if (local_) local_->broadcast(t, 0);  // from the leader, member 0
  }

  // The root's host first (from the root), then the leaders (from the root's leader), then the
  // other hosts (from their leaders).
  void hierarchical_broadcast(const Tensor& t, int root) {
    const auto index = [](const std::vector<int>& ranks, int r) {
      return static_cast<int>(std::find(ranks.begin(), ranks.end(), r) - ranks.begin());
    };
    const bool root_host = leader_of_[rank()] == leader_of_[root];
    if (root_host && local_) local_->broadcast(t, index(members_, root));
    if (leaders_) {
      leaders_step([&] {
        gloo::BroadcastOptions opts(leaders_);
        CLEAVE_DISPATCH_ALL(t.dtype(), [&] { opts.setOutput(t.data<T>(), t.numel()); });
        opts.setRoot(index(leader_ranks_, leader_of_[root]));
        opts.setTag(leader_tag_++ & 0xffffff);
        opts.setTimeout(options().timeout);
        gloo::broadcast(opts);
      });
    }
    if (!root_host && local_) local_->broadcast(t, 0);
  }

  void hierarchical_barrier() {
    if (local_) local_->barrier();
    if (leaders_) {
      leaders_step([&] {
        gloo::BarrierOptions opts(leaders_);
        opts.setTag(leader_tag_++ & 0xffffff);
        opts.setTimeout(options().timeout);
        gloo::barrier(opts);
      });
    }
    if (local_) local_->barrier();
  }

  std::function<void()> do_post(const Tensor& tensor, int peer, int tag, bool is_send) override {
    if (peers_ && peers_->reaches(peer)) {
      std::shared_ptr<ShmPeers::Op> op = peers_->post(tensor, peer, tag, is_send, true);
      return [peers = peers_.get(), op] { peers->wait(op); };
    }
    const auto slot =
        static_cast<uint64_t>(gloo::Slot::build(kPeerSlotPrefix, static_cast<uint32_t>(tag)));
    std::shared_ptr<gloo::transport::UnboundBuffer> buf =
        context_->createUnboundBuffer(tensor.raw_data(), tensor.nbytes());
    if (is_send) {
      buf->send(peer, slot);
    } else {
      buf->recv(peer, slot);
    }
    const std::chrono::milliseconds timeout = options().timeout;
    return [buf, peer, tag, is_send, timeout] {
      bool done = false;
      try {
        done = is_send ? buf->waitSend(timeout) : buf->waitRecv(timeout);
      } catch (const std::exception& e) {
        throw BackendFailure(fmt::format("{} (tag {}, {} bytes)", e.what(), tag, buf->size), peer);
      }
      if (!done) {
        throw BackendFailure(
            fmt::format("the {} with tag {} was aborted", is_send ? "send" : "receive", tag), peer);
      }
    };
  }

  void do_exchange(const std::vector<PeerBuffer>& sends,
                   const std::vector<PeerBuffer>& recvs) override {
    auto slot_of = [](int tag) {
      return static_cast<uint64_t>(gloo::Slot::build(kPeerSlotPrefix, static_cast<uint32_t>(tag)));
    };
    struct Posted {
      std::unique_ptr<gloo::transport::UnboundBuffer> buffer;
      int peer;
      int tag;
      bool is_send;
    };
    // Peers on this host through shared memory (0-byte messages too: a frame each), receives
    // first so that fewer messages arrive unexpected; awaited first, since waiting on them drives
    // their progress while Gloo's pairs progress on their own.
    std::vector<std::shared_ptr<ShmPeers::Op>> local;
    const auto on_host = [&](const PeerBuffer& b) { return peers_ && peers_->reaches(b.peer); };
    for (const PeerBuffer& r : recvs) {
      if (on_host(r)) local.push_back(peers_->post(r.tensor, r.peer, r.tag, false));
    }
    for (const PeerBuffer& s : sends) {
      if (on_host(s)) local.push_back(peers_->post(s.tensor, s.peer, s.tag, true));
    }
    std::vector<Posted> posted;
    for (const PeerBuffer& s : sends) {
      if (s.tensor.nbytes() == 0 || on_host(s)) continue;
      auto buf = context_->createUnboundBuffer(s.tensor.raw_data(), s.tensor.nbytes());
      buf->send(s.peer, slot_of(s.tag));
      posted.push_back({std::move(buf), s.peer, s.tag, true});
    }
    for (const PeerBuffer& r : recvs) {
      if (r.tensor.nbytes() == 0 || on_host(r)) continue;
      auto buf = context_->createUnboundBuffer(r.tensor.raw_data(), r.tensor.nbytes());
      buf->recv(r.peer, slot_of(r.tag));
      posted.push_back({std::move(buf), r.peer, r.tag, false});
    }
    const auto deadline = Clock::now() + options().timeout;
    for (const auto& op : local) peers_->wait(op, deadline);
    for (Posted& p : posted) {
      const auto left =
          std::max(std::chrono::milliseconds(1),
                   std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()));
      bool done = false;
      try {
        done = p.is_send ? p.buffer->waitSend(left) : p.buffer->waitRecv(left);
      } catch (const std::exception& e) {
        throw BackendFailure(fmt::format("{} (tag {}, {} bytes)", e.what(), p.tag, p.buffer->size),
                             p.peer);
      }
      if (!done) {
        throw BackendFailure(
            fmt::format("the {} with tag {} was aborted", p.is_send ? "send" : "receive", p.tag),
            p.peer);
      }
    }
  }

 private:
  std::shared_ptr<gloo::transport::Device> device_;
  std::shared_ptr<gloo::Context> context_;
  std::atomic<uint32_t> tag_{0};
  std::unique_ptr<ShmCollectives> shm_;  // every rank on this host: collectives in memory
  // NOTE [Hierarchical collectives]: the ranks of this host (null when this rank is alone on it),
  // and among the hosts' leaders (the lowest rank of each host) a Gloo context of their own.
  bool hierarchical_ = false;
  std::unique_ptr<ShmCollectives> local_;
  std::shared_ptr<gloo::Context> leaders_;  // on leaders only
  uint32_t leader_tag_ = 0;   // leaders_'s own tags: the main context's stay equal on all ranks
  std::vector<int> members_;  // the group ranks on this host
  std::vector<int> leader_ranks_;  // the leader of each host, ascending
  std::vector<int> leader_of_;     // per group rank: its host's leader
  // Point-to-point with the ranks of this host, in shm_'s or local_'s segment (declared after
  // them: destroyed first).
  std::unique_ptr<ShmPeers> peers_;
};

// Gloo's TCP transport writes to its sockets without MSG_NOSIGNAL: a write to a peer that has
// died would end this process by SIGPIPE, without a word (a flaky test caught it when a peer
// exited during a collective). Ignored, the write fails with EPIPE and the operation raises an
// Error that says which group and peer, or the scheduler names the lost rank. Only a default
// disposition is changed: a program that handles SIGPIPE itself keeps its handler.
void ignore_sigpipe() {
  static std::once_flag once;
  std::call_once(once, [] {
    struct sigaction current {};
    if (sigaction(SIGPIPE, nullptr, &current) == 0 && current.sa_handler == SIG_DFL) {
      std::signal(SIGPIPE, SIG_IGN);
    }
  });
}

}  // namespace

std::string collective_transport(const ProcessGroup& group) {
  if (const auto* gloo = dynamic_cast<const GlooProcessGroup*>(&group)) {
    return gloo->transport();
  }
  return group.backend();
}

std::string p2p_transport(const ProcessGroup& group) {
  if (const auto* gloo = dynamic_cast<const GlooProcessGroup*>(&group)) {
    return gloo->p2p_transport();
  }
  return group.backend();
}

uint64_t shm_messages_sent(const ProcessGroup& group) {
  const auto* gloo = dynamic_cast<const GlooProcessGroup*>(&group);
  return gloo != nullptr ? gloo->shm_messages_sent() : 0;
}

std::shared_ptr<ProcessGroup> make_gloo_group(const ProcessGroupOptions& options) {
  ignore_sigpipe();
  return std::make_shared<GlooProcessGroup>(options);
}

}  // namespace cleave::comm

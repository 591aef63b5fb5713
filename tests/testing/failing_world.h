// A world whose communication always fails: for proving that something does not communicate
// (compiling a step of any rank of any job, NOTE [Compile pipeline] in
// cleave/runtime/pipeline.h). Its size and rank are real; every collective, point-to-point
// transfer and sub-group throws an Error naming the operation.
#pragma once

#include <memory>
#include <string>

#include "cleave/comm/group_registry.h"
#include "cleave/comm/process_group.h"
#include "cleave/core/error.h"

namespace cleave::testing {

class FailingGroup final : public comm::ProcessGroup {
 public:
  FailingGroup(int rank, int size) : ProcessGroup(options(rank, size)) {}
  ~FailingGroup() override { shutdown(); }

 protected:
  void do_all_reduce(const Tensor&, comm::ReduceOp) override { fail("all_reduce"); }
  void do_all_gather(const Tensor&, const Tensor&) override { fail("all_gather"); }
  void do_reduce_scatter(const Tensor&, const Tensor&, comm::ReduceOp) override {
    fail("reduce_scatter");
  }
  void do_broadcast(const Tensor&, int) override { fail("broadcast"); }
  void do_all_to_all(const Tensor&, const Tensor&) override { fail("all_to_all"); }
  void do_exchange(const std::vector<comm::PeerBuffer>&,
                   const std::vector<comm::PeerBuffer>&) override {
    fail("exchange");
  }
  void do_barrier() override { fail("barrier"); }
  std::function<void()> do_post(const Tensor&, int, int, bool) override { fail("send/recv"); }
  std::shared_ptr<ProcessGroup> make_subgroup(const comm::ProcessGroupOptions& o,
                                              const std::vector<int>&) const override {
    fail("a sub-group '" + o.name + "'");
  }

 private:
  static comm::ProcessGroupOptions options(int rank, int size) {
    comm::ProcessGroupOptions o;
    o.backend = "failing";
    o.rank = rank;
    o.size = size;
    return o;
  }
  [[noreturn]] static void fail(const std::string& what) {
    CLEAVE_FAIL("FailingGroup: {} was called; nothing may communicate here", what);
  }
};

// While alive, this thread's world is a FailingGroup of `size` ranks in which it is `rank`.
class FailingWorld {
 public:
  FailingWorld(int rank, int size)
      : group_(std::make_shared<FailingGroup>(rank, size)), scope_("world", group_) {}

 private:
  std::shared_ptr<FailingGroup> group_;
  comm::ThreadGroupScope scope_;
};

}  // namespace cleave::testing

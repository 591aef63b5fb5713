// The process-wide record of operations in flight (cleave/comm/progress.h).
#include "cleave/comm/progress.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <atomic>
#include <mutex>

#include "cleave/comm/process_group.h"

namespace cleave::comm {
namespace {

struct Registry {
  std::mutex mu;
  std::vector<const InFlight*> running;  // in start order
  int64_t completed = 0;
};

Registry& registry() {
  static Registry* r = new Registry;  // never destroyed: backend threads may outlive statics
  return *r;
}

}  // namespace

InFlight::InFlight(const ProcessGroup& g, const char* o, const std::vector<int>& p, int t)
    : group(g), op(o), peers(p), tag(t), start(std::chrono::steady_clock::now()) {
  Registry& r = registry();
  std::lock_guard lock(r.mu);
  r.running.push_back(this);
}

InFlight::~InFlight() {
  Registry& r = registry();
  std::lock_guard lock(r.mu);
  r.running.erase(std::find(r.running.begin(), r.running.end(), this));
  ++r.completed;
}

CommSnapshot comm_snapshot() {
  Registry& r = registry();
  std::lock_guard lock(r.mu);
  CommSnapshot s;
  s.completed = r.completed;
  s.in_flight = static_cast<int>(r.running.size());
  if (r.running.empty()) return s;
  // A group is alive while one of its operations is registered (the entry goes before the
  // operation returns), so reading it under the lock is safe.
  const InFlight& oldest = *r.running.front();
  const ProcessGroup& g = oldest.group;
  s.op = fmt::format("{} on group '{}' ({})", oldest.op, g.name(), g.backend());
  if (!oldest.peers.empty()) {
    s.op += fmt::format(" with group rank{} {}", oldest.peers.size() > 1 ? "s" : "",
                        fmt::join(oldest.peers, ", "));
    for (int rank : oldest.peers) s.peers.push_back(g.world_rank(rank));
    if (oldest.tag >= 0) s.op += fmt::format(", tag {}", oldest.tag);
  } else {
    for (int rank = 0; rank < g.size(); ++rank) {
      if (rank != g.rank()) s.peers.push_back(g.world_rank(rank));
    }
  }
  s.waited = std::chrono::duration_cast<std::chrono::milliseconds>(
      std::chrono::steady_clock::now() - oldest.start);
  return s;
}

namespace {
std::atomic<FailureHook> failure_hook{nullptr};
}  // namespace

void set_failure_hook(FailureHook hook) { failure_hook.store(hook); }

void call_failure_hook(const std::string& error) {
  if (FailureHook hook = failure_hook.load()) hook(error);
}

}  // namespace cleave::comm

// What this process is doing, for the one line a worker prints when its job fails (NOTE
// [Stopping on a failed job] in src/cluster/worker.h): "... this process was <activity>".
// The cluster layer marks its own waits (registration, store keys, barriers, backend set-up);
// higher layers mark theirs, e.g. a collective primitive:
//   cluster::ActivityScope activity("in all_reduce on group 'world'");
#pragma once

#include <string>

namespace cleave::cluster {

// Sets this process's activity for the scope's lifetime. Scopes nest (the innermost one is
// reported) and are process-wide: use them on the thread that drives the job.
class ActivityScope {
 public:
  explicit ActivityScope(std::string activity);
  ~ActivityScope();
  ActivityScope(const ActivityScope&) = delete;
  ActivityScope& operator=(const ActivityScope&) = delete;

  // The innermost activity of this process ("running (between cleave::init and
  // cleave::release)" when no scope is open).
  static std::string current();

 private:
  std::string previous_;
};

}  // namespace cleave::cluster

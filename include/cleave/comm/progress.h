// What the communication layer of this process is doing: the operations in flight and a count of
// those finished. The cluster layer sends it with every heartbeat, so the scheduler can tell a
// rank that waits inside a collective from one that never arrives (NOTE [Stuck collectives] in
// src/cluster/liveness.h), and a failure line can say what this process was doing.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

namespace cleave::comm {

class ProcessGroup;

struct CommSnapshot {
  int64_t completed = 0;  // operations finished (successfully or not) since the process started
  int in_flight = 0;      // operations running now (blocking or asynchronous)
  // The oldest operation in flight (when in_flight > 0): e.g. "AllReduce on group 'world'
  // (gloo)" or "Recv on group 'world' (gloo) with group rank 1, tag 7", the world ranks it waits
  // for, and how long it has been running.
  std::string op;
  std::vector<int> peers;
  std::chrono::milliseconds waited{0};
};

// The state of every group of this process, now.
CommSnapshot comm_snapshot();

// NOTE [Failure hook]
// A failed operation often is not the root cause: a peer that was killed or stopped makes the
// transport fail at once, before the job's scheduler has noticed and named the lost rank. So a
// failed operation calls the process's failure hook with its error, on the thread that ran it
// and while it still counts as in flight, before the error is thrown. The cluster layer installs
// one that waits (bounded) for the scheduler's verdict, so that the process stops with the
// job's one failure line; when there is none, the hook returns and the error is thrown as usual.
// Only kUnavailable failures call it: an invalid-argument error (ranks calling different
// collectives, found by the shared-memory path) has no lost peer behind it to wait for.
using FailureHook = void (*)(const std::string& error);
void set_failure_hook(FailureHook hook);  // nullptr removes it
void call_failure_hook(const std::string& error);

// Marks one operation of `group` as in flight for its lifetime (ProcessGroup does this around
// every operation). `peers` are the group ranks it waits for (point-to-point: its peers); empty
// for a collective, which waits for every other rank of the group; `tag` is a point-to-point
// message's tag (-1: none). Cheap: one uncontended lock on entry and exit.
class InFlight {
 public:
  InFlight(const ProcessGroup& group, const char* op, const std::vector<int>& peers, int tag = -1);
  ~InFlight();
  InFlight(const InFlight&) = delete;
  InFlight& operator=(const InFlight&) = delete;

  const ProcessGroup& group;
  const char* op;
  const std::vector<int>& peers;
  int tag;
  std::chrono::steady_clock::time_point start;
};

}  // namespace cleave::comm

// Shared-memory mailboxes: point-to-point messages between the ranks of one host, for messages
// whose tags and sizes are known in advance (the cut edges of a placed graph).
//
// NOTE [Shared-memory mailboxes]
// A message through Gloo's TCP transport costs a socket write, an epoll wake-up of the
// receiver's Gloo thread, a read and a condition-variable wake-up of the receiving thread: on a
// small machine shared by many processes that is ~100-200 us and most of a pipeline stage's time
// (measured: 75% of the hub rank's CPU time was kernel TCP/epoll/scheduling). Here every rank
// owns an inbox: one POSIX shared-memory segment with a fixed slot per incoming edge (tag) — a
// state word and room for the message. A send copies into the slot and flips its state word; a
// receive waits on the state word (a short spin, then futex waits), copies out and flips it back.
// One copy each way, one futex wake, no thread in between. Each edge carries one message per step,
// so a slot is free again once the receiver has read the previous step's message: a sender waits
// only when it runs a full step ahead of its receiver, which cannot deadlock (the receiver's step
// needs nothing from the sender's next step). Segments are unlinked as soon as every peer has
// mapped them, so nothing is left in /dev/shm even when a process is killed.
#pragma once

#include <chrono>
#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "cleave/comm/process_group.h"

namespace cleave::comm {

struct MailboxEdge {
  int src = 0;  // group ranks
  int dst = 0;
  int tag = 0;  // unique among the edges
  size_t bytes = 0;
};

class ShmMailboxes {
 public:
  // Collective over `group`: every rank calls it with the same edges (in the same order). Creates
  // this rank's inbox and maps the inboxes of the ranks it sends to. Returns null on every rank
  // (use the group's own point-to-point instead) when the ranks are not all on this host or a
  // segment cannot be created. `timeout` bounds each wait of send() and recv(), which count as
  // operations of `group` in flight (comm/progress.h), so the scheduler's stuck-rank detection
  // sees them; the group must outlive their use.
  static std::unique_ptr<ShmMailboxes> create(ProcessGroup& group,
                                              const std::vector<MailboxEdge>& edges,
                                              std::chrono::milliseconds timeout);
  ~ShmMailboxes();
  ShmMailboxes(const ShmMailboxes&) = delete;
  ShmMailboxes& operator=(const ShmMailboxes&) = delete;

  // Whether the edge with `tag` goes through these mailboxes.
  bool has(int tag) const;
  // Copies `bytes` (the edge's size) from `data` into the edge's slot in the receiver's inbox;
  // waits while the receiver has not read the previous message. Throws Error after the timeout.
  void send(int tag, const void* data, size_t bytes);
  // Waits for the edge's message and copies it to `data`. Throws Error after the timeout.
  void recv(int tag, void* data, size_t bytes);

 private:
  struct Slot {
    int peer = 0;
    bool outgoing = false;
    size_t bytes = 0;
    unsigned char* base = nullptr;  // the slot: state word, then the message
  };
  ShmMailboxes() = default;
  const Slot& slot(int tag, bool outgoing, size_t bytes) const;

  const ProcessGroup* group_ = nullptr;  // must outlive the use of the mailboxes
  std::string group_name_;
  int rank_ = 0;
  std::chrono::milliseconds timeout_{0};
  std::vector<std::pair<void*, size_t>> mappings_;
  std::vector<int> slot_index_;  // tag -> index into slots_, -1 when absent
  std::vector<Slot> slots_;
};

}  // namespace cleave::comm

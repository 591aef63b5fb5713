// Shared-memory mailboxes: point-to-point messages between the ranks of one host, for messages
// whose tags and sizes are known in advance (the cut edges of a placed graph).
//
// NOTE [Shared-memory mailboxes]
// A message through Gloo's TCP transport costs a socket write, an epoll wake-up of the receiver's
// Gloo thread, a read and a condition-variable wake-up of the receiving thread: on a small machine
// most of a pipeline stage's time. Here every rank owns an inbox: one POSIX shared-memory segment
// with a fixed slot per incoming edge (tag) — a state word and room for the message. A send copies
// into the slot and flips its state word; a receive waits on the state word, copies out and flips
// it back. One copy each way, one futex wake, no thread in between. Each edge carries one message
// per step, so a slot is free again once the receiver has read the previous step's message: a
// sender waits only when it runs a full step ahead of its receiver, which cannot deadlock (the
// receiver's step needs nothing from the sender's next step). Segments are unlinked as soon as
// every peer has mapped them, so nothing is left in /dev/shm even when a process is killed.
// Measurements: bench/README.md, 'shm'.
//
// NOTE [Mailboxes and point-to-point rings]
// A gloo group's own point-to-point on one host (NOTE [Shared-memory point-to-point] in
// src/comm/shm/shm_p2p.h) streams messages of any tag and size through byte rings and matches
// them MPI-style, so a message has no fixed address; NOTE [Messages in place] needs one, and a
// placed graph knows every edge's tag and size in advance, so each edge gets a preallocated slot
// and nothing is matched. The two stay apart and share their pieces: the wait policy (NOTE
// [Waiting] in src/comm/wait.h), the creation and mapping of segments (src/comm/shm/shm_mapping.h)
// and the same-host test (src/comm/shm/shm_host.h).
//
// NOTE [Waiting for a message]
// A receiver whose message has not arrived (or a sender whose slot is still held) polls the state
// word for up to a `spin` (2000 us by default, CLEAVE_RPC_SPIN_US), calling sched_yield() between
// polls, and only then sleeps (NOTE [Waiting] in src/comm/wait.h). On a machine with fewer cores
// than busy ranks a sleeping receiver costs a futex wake on the sender's side and a wake-up on its
// own (cross-CPU interrupts, and in a VM exits to the hypervisor); the yielding poll mostly catches
// the message without either, and gives the core to any rank that has work meanwhile (a pure spin
// would keep it from them). Once the workers are bound to cores (NOTE [Placed workers on few
// cores] in cleave/runtime/core_binding.h) a yield only hands the core to the workers sharing it,
// and a long poll wins. An edge whose waits have lately averaged more than twice the spin (a rank
// idle for most of the step) sleeps at once. Measurements: bench/README.md, 'shm'.
//
// NOTE [Messages in place]
// Copies are most of a crossing's cost for large activations, so the executor of a placed graph
// avoids both (see NOTE [Zero-copy cut edges] in cleave/runtime/executor.h): a sender's op writes
// its output straight into message(tag) after claim(tag) and send() then only publishes it; a
// receiver's consumers read message(tag) where it lies and the receiver release()s it after its
// last reader. The slot protocol is unchanged — the state word goes empty -> full (publish) ->
// empty (release), and only the sender writes the message, only while the slot is empty — so the
// deadlock argument above still holds: a sender waits only for the release of the previous step's
// message, which needs nothing from the sender's current step. Measurements: bench/README.md,
// 'shm'.
#pragma once

#include <chrono>
#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "cleave/comm/process_group.h"

namespace cleave::comm {

namespace shm {
class Mapping;
}  // namespace shm

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
  // sees them; the group must outlive their use. A wait first polls for up to `spin`, yielding
  // the core on every round, before it sleeps (NOTE [Waiting for a message]).
  static std::unique_ptr<ShmMailboxes> create(ProcessGroup& group,
                                              const std::vector<MailboxEdge>& edges,
                                              std::chrono::milliseconds timeout,
                                              std::chrono::microseconds spin = kDefaultSpin);
  static constexpr std::chrono::microseconds kDefaultSpin{2000};
  ~ShmMailboxes();
  ShmMailboxes(const ShmMailboxes&) = delete;
  ShmMailboxes& operator=(const ShmMailboxes&) = delete;

  // Whether the edge with `tag` goes through these mailboxes.
  bool has(int tag) const;
  // Receiver: whether the edge's message is there (a recv() would not wait).
  bool arrived(int tag) const;
  // Copies `bytes` (the edge's size) from `data` into the edge's slot in the receiver's inbox and
  // publishes it; waits while the receiver has not released the previous message. When `data` is
  // message(tag) itself (written in place after claim()), it only publishes. Throws Error after
  // the timeout.
  void send(int tag, const void* data, size_t bytes);
  // Waits for the edge's message, copies it to `data` and releases the slot. When `data` is
  // message(tag) itself, it only waits: the caller reads the message in place and calls
  // release(tag) when done. Throws Error after the timeout.
  void recv(int tag, void* data, size_t bytes);

  // Zero-copy use (NOTE [Messages in place]): the edge's message area, in the receiver's inbox,
  // 64-byte aligned and `bytes` of the edge long; the same memory on both ranks of the edge.
  void* message(int tag) const;
  // Sender: waits until the receiver has released the previous message of the edge, so that
  // message(tag) may be written. Throws Error after the timeout.
  void claim(int tag);
  // Receiver: the message read in place is no longer needed; the sender may write the next one.
  void release(int tag);

 private:
  struct Slot {
    int peer = 0;
    int tag = -1;
    bool outgoing = false;
    size_t bytes = 0;
    std::byte* base = nullptr;          // the slot: state word, then the message
    mutable float typical_wait_us = 0;  // running average of this rank's waits on the slot
  };
  ShmMailboxes() = default;
  const Slot& slot(int tag, bool outgoing) const;
  // Waits until the slot is empty (sending) or full (receiving); false after the timeout.
  bool await(const Slot& s, bool sending) const;
  const Slot& slot(int tag, bool outgoing, size_t bytes) const;

  const ProcessGroup* group_ = nullptr;  // must outlive the use of the mailboxes
  std::string group_name_;
  int rank_ = 0;
  std::chrono::milliseconds timeout_{0};
  std::chrono::microseconds spin_{0};
  std::vector<std::unique_ptr<shm::Mapping>> mappings_;
  std::vector<int> slot_index_;  // tag -> index into slots_, -1 when absent
  std::vector<Slot> slots_;
};

}  // namespace cleave::comm

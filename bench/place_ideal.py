#!/usr/bin/env python3
"""The ideal time of a placed training step: its schedule replayed with perfect overlap.

Usage: place_ideal.py PREFIX CORES [STEPS]

PREFIX.rank<R> are the files `lenet_place --stats --op-times PREFIX` writes (tab-separated: graph,
op, node, tag, seconds, runs; every op of a worker's placed graphs in the order it runs them, with
its total CPU time). For each worker the graph with the most runs is its part of the training step.

The replay keeps everything that a perfect machine could not change and drops everything else:
  - each worker runs its ops one after another in its own order, each kernel taking its measured
    mean CPU time (time descheduled is not in it);
  - an RpcRecv may pass once the RpcSend with the same tag has run (same step); sending and
    receiving take no time (no copies, no transport, no wake-ups);
  - at most CORES kernels run at a time; a free core goes to a waiting worker by one of three
    greedy rules (the longest waiting; the one whose next kernel is longest; the one with the most
    kernel time left in its step), and the ideal is the best of the three replays;
  - steps follow each other on every worker, so a worker may start step k+1 while others finish
    step k, exactly as far as the messages allow.
It replays STEPS steps (default 40) and prints the mean time per step of the last 3/4 of them (the
first ones fill the pipeline), in seconds: `IDEAL step_s=<s> kernel_s=<sum of kernel means> ...`.
"""

import collections
import glob
import heapq
import sys

COMM_OPS = ("RpcSend", "RpcRecv")


def load(prefix):
    workers = []
    for path in sorted(glob.glob(prefix + ".rank*"), key=lambda p: int(p.rsplit("rank", 1)[1])):
        graphs = collections.OrderedDict()
        with open(path) as f:
            for line in f:
                graph, op, node, tag, seconds, runs = line.rstrip("\n").split("\t")
                graphs.setdefault(graph, []).append((op, node, int(tag), float(seconds), int(runs)))
        ops = []
        if graphs:
            step = max(graphs.values(), key=lambda ops: max((r for *_, r in ops), default=0))
            for op, node, tag, seconds, runs in step:
                if runs > 0:
                    ops.append((op, tag, 0.0 if op in COMM_OPS else seconds / runs))
        workers.append(ops)
    if not workers:
        sys.exit(f"place_ideal.py: no files {prefix}.rank*")
    return workers


POLICIES = ("fifo", "longest_kernel", "most_work_left")


def replay(workers, cores, steps, policy):
    n = len(workers)
    pc = [0] * n                  # next op, counted over all steps
    free_at = [0.0] * n           # when the worker's running kernel ends
    running = set()
    sent = {}                     # (step, tag) -> time the send ran
    step_end = [[0.0] * steps for _ in range(n)]
    waiting = []                  # (priority, worker): wants a core, smallest first
    queued = set()
    now = 0.0
    events = []                   # kernel ends: (time, worker)

    # Kernel time left in the step from each op on, per worker.
    left = []
    for ops in workers:
        suffix = [0.0] * (len(ops) + 1)
        for k in range(len(ops) - 1, -1, -1):
            suffix[k] = suffix[k + 1] + ops[k][2]
        left.append(suffix)

    def priority(w):
        k = pc[w] % len(workers[w])
        if policy == "longest_kernel":
            return -workers[w][k][2]
        if policy == "most_work_left":
            return -left[w][k]
        return now

    def advance(w):
        """Runs w's zero-time ops; queues it when its next op is a kernel."""
        ops = workers[w]
        while pc[w] < steps * len(ops):
            step, k = divmod(pc[w], len(ops))
            op, tag, seconds = ops[k]
            if op == "RpcRecv":
                if (step, tag) not in sent:
                    return
            elif op == "RpcSend":
                sent[(step, tag)] = now
            else:
                if w not in queued:
                    heapq.heappush(waiting, (priority(w), w))
                    queued.add(w)
                return
            pc[w] += 1
            if pc[w] % len(ops) == 0:
                step_end[w][step] = now

    while True:
        progress = True
        while progress:  # a send may unblock another worker's receive at the same instant
            before = list(pc)
            for w in range(n):
                if w not in running and workers[w]:
                    advance(w)
            progress = pc != before
        while waiting and len(running) < cores:
            _, w = heapq.heappop(waiting)
            queued.discard(w)
            step, k = divmod(pc[w], len(workers[w]))
            running.add(w)
            heapq.heappush(events, (now + workers[w][k][2], w))
        if not events:
            break
        now, w = heapq.heappop(events)
        running.discard(w)
        pc[w] += 1
        if pc[w] % len(workers[w]) == 0:
            step_end[w][pc[w] // len(workers[w]) - 1] = now
    stuck = [w for w in range(n) if workers[w] and pc[w] < steps * len(workers[w])]
    if stuck:
        sys.exit(f"place_ideal.py: the replay stops with workers {stuck} waiting for a message "
                 "(files from different runs?)")
    ends = [max(step_end[w][s] for w in range(n)) for s in range(steps)]
    first = steps // 4
    return (ends[-1] - ends[first - 1]) / (steps - first)


def main():
    if len(sys.argv) not in (3, 4):
        sys.exit(__doc__)
    workers = load(sys.argv[1])
    cores = int(sys.argv[2])
    steps = int(sys.argv[3]) if len(sys.argv) == 4 else 40
    per_step = min(replay(workers, cores, steps, policy) for policy in POLICIES)
    busy = [sum(s for op, _, s in ops if op not in COMM_OPS) for ops in workers]
    print(f"IDEAL step_s={per_step:.9f} kernel_s={sum(busy):.9f} max_worker_kernel_s={max(busy):.9f} "
          f"cores={cores}")


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""The rows of `bench/run.sh search`'s trained plans, for one network and worker count.

    search_rows.py ROWS NET NP

ROWS holds plan_train_bench's ROW lines (several runs of each plan). Prints, per plan,

    BENCH search_<net>_np<N>_<plan> step_ms=<median of its runs> predicted_ms=..
        samples_per_s=.. runs=<count> runs_ms=<fastest run>-<slowest run>

and then, over all the plans,

    BENCH search_<net>_np<N> searched_ms=.. best_hand=<plan> best_hand_ms=..
        searched_vs_best=<searched / best hand step> spearman=<rank correlation of predicted
        and measured> spearman_alike_tied=<the same, plans that measure alike sharing one rank>
        measure_alike=<those plans, a group per ';', or none> plans=<count>

Plans that measure alike (bench/README.md, "Plans that measure alike"): in order of median, a
plan leads a group, and each next plan whose median is within the leader's runs (at most their
upper quartile, so that one slow run of five is left out) joins it. Their order is what the runs
cannot tell; a group's plans share one measured rank, the mean of the ranks they span.
"""
import statistics
import sys


def ranks(values):
    """Ranks from 0, equal values sharing the mean of the ranks they span."""
    order = sorted(range(len(values)), key=lambda i: values[i])
    r = [0.0] * len(values)
    i = 0
    while i < len(order):
        j = i
        while j + 1 < len(order) and values[order[j + 1]] == values[order[i]]:
            j += 1
        for k in range(i, j + 1):
            r[order[k]] = (i + j) / 2
        i = j + 1
    return r


def spearman(a, b):
    """Spearman's rank correlation (Pearson's of the ranks); NaN when either side is constant."""
    a, b = ranks(a), ranks(b)
    ma, mb = statistics.mean(a), statistics.mean(b)
    cov = sum((x - ma) * (y - mb) for x, y in zip(a, b))
    var = (sum((x - ma) ** 2 for x in a) * sum((y - mb) ** 2 for y in b)) ** 0.5
    return cov / var if var > 0 else float("nan")


def upper_quartile(runs):
    return statistics.quantiles(runs, n=4, method="inclusive")[2] if len(runs) > 1 else runs[0]


def alike_groups(medians, runs):
    """Groups of plans that measure alike, in order of median (see the module's text)."""
    groups = []
    for plan in sorted(medians, key=lambda p: medians[p]):
        if groups and medians[plan] <= upper_quartile(runs[groups[-1][0]]):
            groups[-1].append(plan)
        else:
            groups.append([plan])
    return groups


def main(path, net, np_):
    rows = {}
    for number, line in enumerate(open(path), 1):
        try:
            f = dict(kv.split("=", 1) for kv in line.split()[1:])
            rows.setdefault(f["plan"], []).append(f)
        except (ValueError, KeyError):
            sys.exit(f"search_rows.py: {path}:{number}: not a ROW line of plan_train_bench: {line!r}")
    med, pred, runs = {}, {}, {}
    for plan, fs in rows.items():
        runs[plan] = sorted(float(f["step_ms"]) for f in fs)
        med[plan] = statistics.median(runs[plan])
        pred[plan] = float(fs[0]["predicted_ms"])
        samples = statistics.median(float(f["samples_per_s"]) for f in fs)
        print(f"BENCH search_{net}_np{np_}_{plan} step_ms={med[plan]:.3f} "
              f"predicted_ms={pred[plan]:.3f} samples_per_s={samples:.1f} runs={len(fs)} "
              f"runs_ms={runs[plan][0]:.3f}-{runs[plan][-1]:.3f}")
    plans = sorted(med)
    groups = alike_groups(med, runs)
    group_of = {p: g for g, members in enumerate(groups) for p in members}
    nan = float("nan")
    enough = len(plans) >= 3
    rho = spearman([med[p] for p in plans], [pred[p] for p in plans]) if enough else nan
    rho_alike = (spearman([group_of[p] for p in plans], [pred[p] for p in plans])
                 if enough else nan)
    hand = {p: m for p, m in med.items() if p != "searched"}
    best = min(hand, key=hand.get) if hand else "none"
    searched = med.get("searched", nan)
    alike = ";".join(",".join(g) for g in groups if len(g) > 1) or "none"
    print(f"BENCH search_{net}_np{np_} searched_ms={searched:.3f} best_hand={best} "
          f"best_hand_ms={hand.get(best, nan):.3f} "
          f"searched_vs_best={searched / hand[best] if hand else nan:.2f} "
          f"spearman={rho:.2f} spearman_alike_tied={rho_alike:.2f} measure_alike={alike} "
          f"plans={len(med)}")


if __name__ == "__main__":
    if len(sys.argv) != 4:
        sys.exit("usage: search_rows.py ROWS NET NP")
    main(*sys.argv[1:])

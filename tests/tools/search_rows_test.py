#!/usr/bin/env python3
"""bench/search_rows.py on rows written here: its medians, its groups of plans that measure
alike, both rank correlations (worked out by hand below), and its error on a line that is not
a ROW line. Usage: search_rows_test.py SOURCE_DIR"""
import os
import subprocess
import sys
import tempfile

script = os.path.join(sys.argv[1], "bench", "search_rows.py")
failures = []


def run(rows):
    with tempfile.NamedTemporaryFile("w", suffix=".rows", delete=False) as f:
        f.write(rows)
    try:
        return subprocess.run([sys.executable, script, f.name, "lenet", "2"],
                              capture_output=True, text=True, timeout=60)
    finally:
        os.unlink(f.name)


def rows_of(plan, steps, predicted):
    return "".join(f"ROW net=lenet plan={plan} np=2 step_ms={s} samples_per_s={64 / s * 1e3:.1f} "
                   f"predicted_ms={predicted} cost_ms={predicted}\n" for s in steps)


def expect(what, out, field, value):
    for line in out.splitlines():
        if line.startswith(f"BENCH {what} "):
            fields = dict(kv.split("=", 1) for kv in line.split()[2:])
            if fields.get(field) != value:
                failures.append(f"{what} {field}={fields.get(field)}, expected {value}:\n{out}")
            return
    failures.append(f"no row BENCH {what}:\n{out}")


# Four plans. `data` and `example` measure alike: example's median (1.025) is within data's runs
# up to their upper quartile (1.03; the slow run 1.10 left out). The model orders that pair the
# other way round and the two others right.
#   Plain ranks, measured (data, example, fc_column, searched) 0 1 2 3, predicted 1 0 2 3:
#     1 - 6 * (1 + 1) / (4 * 15) = 0.80.
#   Alike tied, measured 0.5 0.5 2 3 against 1 0 2 3: deviations from 1.5 are (-1, -1, .5, 1.5)
#     and (-.5, -1.5, .5, 1.5): 4.5 / sqrt(4.5 * 5) = 0.95.
rows = (rows_of("data", [1.00, 1.01, 1.02, 1.03, 1.10], 1.1) +
        rows_of("example", [1.00, 1.02, 1.025, 1.03, 1.04], 1.0) +
        rows_of("fc_column", [1.99, 2.0, 2.0, 2.0, 2.01], 2.0) +
        rows_of("searched", [2.99, 3.0, 3.0, 3.0, 3.01], 3.0))
result = run(rows)
if result.returncode != 0:
    failures.append(f"status {result.returncode}: {result.stderr}")
out = result.stdout
expect("search_lenet_np2_data", out, "step_ms", "1.020")
expect("search_lenet_np2_data", out, "runs_ms", "1.000-1.100")
expect("search_lenet_np2_example", out, "step_ms", "1.025")
expect("search_lenet_np2", out, "spearman", "0.80")
expect("search_lenet_np2", out, "spearman_alike_tied", "0.95")
expect("search_lenet_np2", out, "measure_alike", "data,example")
expect("search_lenet_np2", out, "best_hand", "data")
expect("search_lenet_np2", out, "searched_vs_best", "2.94")

# A median past the leader's upper quartile does not join it, even below the leader's slowest
# run (1.10); and a group is led by its fastest plan, not chained from plan to plan: fc_column
# (1.05) is within example's runs but not within data's.
rows = (rows_of("data", [1.00, 1.01, 1.02, 1.03, 1.10], 1.0) +
        rows_of("example", [1.01, 1.02, 1.03, 1.06, 1.07], 1.1) +
        rows_of("fc_column", [1.04, 1.05, 1.05, 1.06, 1.06], 1.2) +
        rows_of("fc_megatron", [1.2, 1.2, 1.2, 1.2, 1.2], 1.3) +
        rows_of("searched", [2.0, 2.0, 2.0, 2.0, 2.0], 2.0))
out = run(rows).stdout
expect("search_lenet_np2", out, "measure_alike", "data,example")
expect("search_lenet_np2", out, "spearman", "1.00")

# Nothing alike: both correlations are the plain one.
out = run(rows_of("a", [1.0], 3.0) + rows_of("b", [2.0], 2.0) + rows_of("c", [3.0], 1.0)).stdout
expect("search_lenet_np2", out, "measure_alike", "none")
expect("search_lenet_np2", out, "spearman", "-1.00")
expect("search_lenet_np2", out, "spearman_alike_tied", "-1.00")

# A line that is not a ROW line names the file and the line.
result = run(rows_of("data", [1.0], 1.0) + "ROW garbage\n")
if result.returncode == 0 or ":2: not a ROW line of plan_train_bench" not in result.stderr:
    failures.append(f"a bad line: status {result.returncode}, stderr {result.stderr!r}")

if failures:
    print("\n".join(failures))
    sys.exit(1)
print("search_rows.py: all cases as worked out")

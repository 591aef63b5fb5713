#!/usr/bin/env bash
# cleave-calibrate --quick under mpirun on 2 processes: the profile has measured mpi rows (ranks as
# processes); without mpirun they are "not launched by mpirun" (calibrate_cli_test.sh).
# Usage: calibrate_mpi_test.sh PATH_TO_cleave-calibrate MPIRUN [MPIRUN_FLAGS...]
set -uo pipefail
tool=$1
shift
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
out=$(timeout 100 "$@" -n 2 "$tool" --quick -o "$work/p.json" 2>&1) || {
  echo "FAIL: mpirun -n 2 cleave-calibrate --quick: $out" >&2
  exit 1
}
python3 - "$work/p.json" <<'PY' || exit 1
import json, sys
p = json.load(open(sys.argv[1]))
mpi = p["comm"]["mpi"]
assert mpi["measured"] and mpi["ranks"] == "processes", mpi
assert "mpi" in p["machine"]["backends"], p["machine"]
assert mpi["collectives"]["all_reduce"][0]["group_size"] == 2, mpi
PY
echo "calibrate_mpi: ok"

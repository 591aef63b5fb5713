#!/usr/bin/env bash
# Usage: watchdog_test.sh MPIRUN PROGRAM [MPIRUN FLAGS...]
# The MPI watchdog: a blocking collective past its timeout ends the MPI job non-zero, quickly,
# with one line naming the operation, the group and the rank.
set -u
mpirun=$1
program=$2
shift 2
start=$(date +%s)
output=$(timeout 60 "$mpirun" "$@" -n 2 "$program" 2>&1)
rc=$?
elapsed=$(($(date +%s) - start))
echo "$output"
fail() {
  echo "watchdog_test: $1 (exit status $rc, ${elapsed} s)" >&2
  exit 1
}
[ "$rc" -ne 0 ] || fail "mpirun exited 0"
[ "$rc" -ne 124 ] || fail "the job did not end within 60 s"
[ "$elapsed" -lt 20 ] || fail "the job took ${elapsed} s to end; expected about 1 s"
grep -q "rank 1: first AllReduce ok" <<<"$output" || fail "the first AllReduce did not complete"
line="cleave: AllReduce on group 'watched' (mpi, rank 0 of 2) timed out after 500 ms"
[ "$(grep -c "$line" <<<"$output")" -eq 1 ] || fail "expected one line: $line"
grep -q "was not stopped" <<<"$output" && fail "a rank was not stopped"
echo "watchdog_test: ok"

#!/usr/bin/env bash
# cleave-ir --ranks on the hand-written per-rank dumps of tests/tools/partition (3 ranks: rank 1
# computes a MatMul and sends it to rank 0 (tag 0), which applies ReLU and sends the result to
# rank 2 (tag 1), which computes the loss): the per-rank summary, one Graphviz cluster per rank,
# the cut edges between the clusters, and the errors for mismatched tags and ranks.
# Usage: cleave_ir_ranks_test.sh BIN_DIR
set -euo pipefail
bin=$(cd "$1" && pwd)
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

fail() {
  echo "FAIL: $*" >&2
  exit 1
}
expect() {  # file pattern (grep -E)
  grep -Eq -- "$2" "$1" || {
    cat "$1"
    fail "'$2' not in $1"
  }
}

# The good partition: summary and Graphviz file.
"$bin/cleave-ir" --ranks "$here/partition" --render none --out "$work/p.dot" > "$work/out" 2>&1 ||
  { cat "$work/out"; fail "cleave-ir --ranks failed on a consistent partition"; }
expect "$work/out" "^partition 10_partition .*: 3 ranks, 2 cut edges$"
expect "$work/out" "rank 0: 3 ops, 1 sends, 1 recvs"
expect "$work/out" "rank 1: 2 ops, 1 sends, 0 recvs"
expect "$work/out" "rank 2: 3 ops, 0 sends, 1 recvs"
expect "$work/out" "cut edge tag 0: rank 1 %3 -> rank 0 %1$"
expect "$work/out" "cut edge tag 1: rank 0 %3 -> rank 2 %1$"
for r in 0 1 2; do expect "$work/p.dot" "subgraph cluster_rank$r \{"; done
# Node r<rank>_<index of the value in its dump>; the cut edges join the clusters.
expect "$work/p.dot" 'r1_3 -> r0_1 \[style=dashed.*label="tag 0"'
expect "$work/p.dot" 'r0_3 -> r2_1 \[style=dashed.*label="tag 1"'
# Edges inside a rank, from the %N references (parameter and op inputs).
expect "$work/p.dot" "r1_1 -> r1_2;"
expect "$work/p.dot" "r2_1 -> r2_2;"
[ "$(grep -c 'style=dashed' "$work/p.dot")" -eq 2 ] || fail "expected exactly 2 cut edges"
echo "ok: summary, clusters and cut edges"

if command -v dot > /dev/null; then
  "$bin/cleave-ir" --ranks "$here/partition" --stage 10_partition --out "$work/p.svg" > "$work/out"
  expect "$work/out" "rendered $work/p.svg"
  expect "$work/p.svg" "<title>cluster_rank2</title>"
  echo "ok: rendered with Graphviz"
else
  echo "SKIPPED: Graphviz's dot not installed: rendering"
fi

# A recv whose tag no send carries: both ends reported, exit status 1, the .dot still written.
cp -r "$here/partition" "$work/bad"
sed -i 's/src_rank: 0, tag: 1}/src_rank: 0, tag: 7}/' "$work/bad/10_partition_rank2.ir"
if "$bin/cleave-ir" --ranks "$work/bad" --render none > "$work/out" 2>&1; then
  fail "a mismatched tag was not reported"
fi
expect "$work/out" "error: RpcSend %3 on rank 0 \(tag 1, dst_rank 2\) has no matching RpcRecv on rank 2"
expect "$work/out" "error: RpcRecv %1 on rank 2 \(tag 7, src_rank 0\) has no matching RpcSend on rank 0"
expect "$work/out" "2 mismatched sends/recvs"
[ -f "$work/bad/10_partition_ranks.dot" ] || fail "no .dot written for the mismatched partition"
echo "ok: a mismatched tag is an error"

# The same tag on a send and a recv that do not name each other's ranks.
cp -r "$here/partition" "$work/ranks"
sed -i 's/src_rank: 1, tag: 0}/src_rank: 2, tag: 0}/' "$work/ranks/10_partition_rank0.ir"
if "$bin/cleave-ir" --ranks "$work/ranks" --render none > "$work/out" 2>&1; then
  fail "a send/recv pair naming the wrong ranks was not reported"
fi
expect "$work/out" "RpcSend %3 on rank 1 \(dst_rank 0\) and RpcRecv %1 on rank 0 \(src_rank 2\) share tag 0"
echo "ok: a pair naming the wrong rank is an error"

# A send to a rank without a dump; several stages without --stage.
rm "$work/ranks/10_partition_rank2.ir"
cp "$work/ranks/10_partition_rank0.ir" "$work/ranks/01_trace_rank0.ir"
if "$bin/cleave-ir" --ranks "$work/ranks" --render none > "$work/out" 2>&1; then
  fail "several stages without --stage were accepted"
fi
expect "$work/out" "several stages \(01_trace, 10_partition\); choose one with --stage"
if "$bin/cleave-ir" --ranks "$work/ranks" --stage 10_partition --render none > "$work/out" 2>&1; then
  fail "a send to a rank without a dump was not reported"
fi
expect "$work/out" "RpcSend %3 on rank 0 \(tag 1, dst_rank 2\) has no matching RpcRecv: rank 2 has no dump"
if "$bin/cleave-ir" --ranks "$work/empty-does-not-exist" > "$work/out" 2>&1; then
  fail "a missing folder was accepted"
fi
expect "$work/out" "is not a folder"
echo "ok: stage choice and missing ranks"

#!/usr/bin/env bash
# Usage: scripts/netns_test.sh [BUILD_DIR]   (as root; BUILD_DIR defaults to build/Release)
#
# cleave's multi-host paths on real hosts: network namespaces joined by a bridge, each one a host
# with its own address, its own host name (a UTS namespace) and its own /dev/shm (a mount
# namespace), so that shared memory cannot cross hosts and TCP must. Cases (each prints PASS or
# FAIL with its time; the script exits 1 when one fails):
#   seed002_2x4     seed 002 (examples/manual_parallel) under cleave-run --node_rank 0 on host A
#                   (with the scheduler) and --node_rank 1 on host B, 4 workers each: every rank's
#                   losses and parameters equal the single process's (relative 1e-5)
#   seed003_2x4     seed 003 (examples/sharding_propagation) started by hand (MS_ROLE): the
#                   scheduler and 4 workers on A, 4 workers on B: the single process's 20 losses
#   hierarchical    cluster_test_program checksum on 2 hosts x 3 ranks (shared memory inside a
#                   host, Gloo between the leaders): bit-identical on every rank and to the same
#                   topology simulated on one host (two UTS namespaces on loopback, in cleave-l), and within
#                   float tolerance of 6 ranks on one host (shared memory only)
#   rank_table      a rank table with two server_ids (A's and B's addresses), 2 ranks each,
#                   CLEAVE_RANK_TABLE_PORT: every rank all-reduces and passes a barrier
#   mpirun          mpirun on host A with -H A,B and an rsh agent that enters host B's namespaces
#                   (seed 002 under mpirun, 2 ranks per host: the single process's losses)
#   kill_host       all of host B's processes killed (SIGKILL) in an AllReduce loop: the
#                   scheduler and A's workers end within 15 s naming a rank of host B
#   kill_host_cleave_run  the same under cleave-run --node_rank 0 (A) and 1 (B): B's cleave-run
#                   and workers killed; A's cleave-run ends within 15 s naming B's ranks
#   link_down       host B's link set down: A's processes end naming host B, B's naming the
#                   lost scheduler, all within 15 s
#   sched_link_down the scheduler alone on host C, workers on A and B; C's link set down: every
#                   worker ends itself within 15 s naming the scheduler
#   starved_link    host B's link starved to 1 kbit/s each way with tc htb in an AllReduce loop:
#                   the scheduler and A's workers end within 15 s naming host B's ranks, B's
#                   naming the lost scheduler
#   throttle        host B's link throttled to 20 Mbit/s each way with tc tbf: a 1 MB AllReduce
#                   loop goes on, slower (prints both rates), and the checksum job gives the
#                   unthrottled hash
# Every fault case runs with the default timeouts (CLEAVE_HEARTBEAT_TIMEOUT_MS=10000).
#
# Setup and teardown are idempotent: the namespaces (cleave-sw holding the bridge, cleave-a,
# cleave-b, cleave-c, and cleave-l for the one-machine runs), their veths and every process
# started in them (every process of a case) are removed at exit, on failure and on Ctrl-C, and
# leftovers of an interrupted run are removed first. On a minimal root
# (a chroot that mounts only /proc, /dev and /dev/shm) the script mounts /sys when missing and
# unmounts it at exit (and /run/netns, which `ip netns add` bind-mounts), and installs iproute2
# with apt-get when `ip` or `tc` is missing.
#
# Environment: NETNS_CASES (space-separated case names, default all), NETNS_KEEP=1 keeps the work
# folder (logs of every process) and prints its path.
set -uo pipefail

if [ "$(id -u)" != 0 ]; then
  echo "netns_test.sh: must run as root (it creates network namespaces, a bridge and veths, and" \
    "mounts /dev/shm per host); try: sudo $0 $*" >&2
  exit 2
fi

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=$(cd "${1:-$root/build/Release}" 2>/dev/null && pwd) || {
  echo "netns_test.sh: no build folder '${1:-$root/build/Release}'; build with scripts/build.sh Release" >&2
  exit 2
}
bin=$build/bin
program=$build/tests/cluster/cluster_test_program
for f in "$bin/cleave-run" "$bin/cleave-datagen" "$bin/manual_parallel" \
  "$bin/sharding_propagation" "$program"; do
  [ -x "$f" ] || {
    echo "netns_test.sh: $f is missing; build with scripts/build.sh Release" >&2
    exit 2
  }
done

# ---- Hosts ------------------------------------------------------------------------------------

hosts=(cleave-a cleave-b cleave-c)
declare -A addr=([cleave-a]=10.213.7.1 [cleave-b]=10.213.7.2 [cleave-c]=10.213.7.3)
declare -A holder  # host -> pid of the process holding its UTS and mount namespaces
switch=cleave-sw   # the namespace of the bridge
machine=cleave-l   # one machine with loopback only, for the one-host runs of the checksum job
work=$(mktemp -d /tmp/cleave-netns.XXXXXX)
chmod 755 "$work"
mounted=()  # what this script mounted, for the cleanup
current_case=  # the subshell running a case

# The ids of the processes living in network namespace $1 (ip netns pids), without failing.
netns_pids() { ip netns pids "$1" 2> /dev/null || true; }

teardown() {
  local pid ns
  # Every process of a case runs in one of these namespaces: killing theirs kills no other.
  for ns in "${hosts[@]}" "$switch" "$machine"; do
    # Processes left in the namespaces (a previous run's holders and jobs).
    for pid in $(netns_pids "$ns"); do kill -KILL "$pid" 2> /dev/null; done
    ip netns del "$ns" 2> /dev/null
  done
  wait 2> /dev/null
}

cleanup() {
  trap - EXIT INT TERM
  exec 2> /dev/null  # the shell's notes on the processes it kills
  [ -z "$current_case" ] || kill -KILL "$current_case"
  teardown
  local m
  for m in /run/netns /sys; do
    [[ " ${mounted[*]} " == *" $m "* ]] || continue
    # /run/netns only when no other namespace was added meanwhile.
    if [ "$m" = /sys ] || [ -z "$(ls -A /run/netns)" ]; then umount "$m" 2> /dev/null; fi
  done
  if [ "${NETNS_KEEP:-0}" = 1 ]; then echo "netns_test.sh: logs kept in $work"; else rm -rf "$work"; fi
}
trap cleanup EXIT
trap 'echo "netns_test.sh: interrupted" >&2; exit 130' INT TERM

# ---- The machine: /sys, /run/netns, iproute2 ---------------------------------------------------

# What this script mounts in the root's namespace is unmounted at exit (cleanup), so that a
# chroot (such as a fresh-machine test's) keeps no mount behind: /sys when missing, and
# /run/netns, which `ip netns add` turns into a bind mount of itself.
if [ ! -d /sys/class/net ]; then mount -t sysfs sysfs /sys && mounted+=(/sys); fi
mkdir -p /run/netns
mountpoint -q /run/netns || mounted+=(/run/netns)
if ! command -v ip > /dev/null || ! command -v tc > /dev/null; then
  echo "netns_test.sh: installing iproute2"
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q iproute2 > /dev/null 2>&1 ||
    { apt-get update -q > /dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -q iproute2 > /dev/null; } ||
    { echo "netns_test.sh: cannot install iproute2" >&2; exit 2; }
fi
for tool in ip tc unshare nsenter mountpoint; do
  command -v $tool > /dev/null || { echo "netns_test.sh: $tool not found" >&2; exit 2; }
done

teardown  # leftovers of an interrupted run
[ "${NETNS_DEBUG:-0}" = 1 ] && set -x

# Runs a command in network namespace $1 (not `ip -n` or `ip netns exec`: they remount /sys in a
# new mount namespace whose root they make a slave, which fails in a chroot).
in_ns() {
  local ns=$1
  shift
  nsenter --net="/run/netns/$ns" -- "$@"
}

# Each host mounts its own /dev/shm over this one in its mount namespace, made private there
# first so that nothing propagates back (a chroot's "/" is no mount point, so the namespace's
# root cannot be made private: `unshare --propagation private` and `ip netns exec` fail there).
mountpoint -q /dev/shm ||
  { echo "netns_test.sh: /dev/shm must be a mount point (each host mounts its own over it)" >&2; exit 2; }

ip netns add "$machine"
in_ns "$machine" ip link set lo up
ip netns add "$switch"
in_ns "$switch" ip link add br0 type bridge
in_ns "$switch" ip link set br0 up
in_ns "$switch" ip link set lo up
for h in "${hosts[@]}"; do
  ip netns add "$h"
  ip link add "v-$h" netns "$switch" type veth peer name eth0 netns "$h"
  in_ns "$switch" ip link set "v-$h" master br0 up
  in_ns "$h" ip addr add "${addr[$h]}/24" dev eth0
  in_ns "$h" ip link set eth0 up
  in_ns "$h" ip link set lo up
  # The holder: the host's name and its own /dev/shm, kept alive for nsenter.
  nsenter --net="/run/netns/$h" -- unshare --uts --mount --propagation unchanged -- sh -c "
    hostname $h && mount --make-private /dev/shm &&
    mount -t tmpfs -o size=2g,mode=1777 tmpfs /dev/shm && exec sleep infinity" &
  holder[$h]=$!
  disown "$!"
done
for h in "${hosts[@]}"; do
  for _ in $(seq 100); do
    [ "$(cat "/proc/${holder[$h]}/comm" 2> /dev/null)" = sleep ] && break
    sleep 0.05
  done
  [ "$(cat "/proc/${holder[$h]}/comm" 2> /dev/null)" = sleep ] ||
    { echo "netns_test.sh: host $h did not come up" >&2; exit 1; }
  echo "${holder[$h]}" > "$work/holder.${addr[$h]}"  # for mpirun's rsh agent
done
# A refused connection (nothing listens on port 1) proves the path; a silent one does not.
reachable() { [[ "$(nsenter --net="/run/netns/$1" timeout 2 bash -c "< /dev/tcp/$2/1" 2>&1)" == *refused* ]]; }
for _ in $(seq 20); do reachable cleave-a "${addr[cleave-b]}" && break; sleep 0.25; done
reachable cleave-a "${addr[cleave-b]}" ||
  { echo "netns_test.sh: host cleave-a cannot reach cleave-b over the bridge" >&2; exit 1; }

# Runs a command on host $1 in folder $2 (exec: the command keeps the pid). -r: in the holder's
# root, which is not the mount namespace's own inside a chroot.
on_host() {  # host dir command...
  local h=$1 dir=$2
  shift 2
  exec nsenter -t "${holder[$h]}" -n -m -u -r -- sh -c 'cd "$0" && exec "$@"' "$dir" "$@"
}

# ---- Processes and results --------------------------------------------------------------------

export OMP_NUM_THREADS=1
unset MS_ROLE MS_SCHED_HOST MS_SCHED_PORT MS_WORKER_NUM MS_NODE_ID MS_WORKER_IP RANK_TABLE_FILE \
  RANK_ID CLEAVE_RANK_TABLE_PORT CLEAVE_JOB_TOKEN CLEAVE_HEARTBEAT_TIMEOUT_MS \
  CLEAVE_HEARTBEAT_INTERVAL_MS CLEAVE_COMM_TIMEOUT_MS CLEAVE_STUCK_TIMEOUT_MS OMPI_COMM_WORLD_RANK \
  OMPI_COMM_WORLD_SIZE

# start NAME HOST DIR VAR=VALUE... -- COMMAND...: starts COMMAND on HOST in DIR with the variables,
# output in DIR/NAME.log; its pid (the command's own) goes to `pids` (wait_job bounds it).
pids=()
declare -A pid_name pid_host
start() {
  local name=$1 h=$2 dir=$3
  shift 3
  # The Gloo transport listens on the host's address: its name resolves nowhere (no DNS, and
  # /etc/hosts is shared by the hosts).
  local vars=(MS_WORKER_IP="${addr[$h]}")
  while [ "$1" != -- ]; do vars+=("$1"); shift; done
  shift
  mkdir -p "$dir"
  (on_host "$h" "$dir" env "${vars[@]}" "$@" > "$dir/$name.log" 2>&1) &
  local pid=$!
  pids+=("$pid")
  pid_name[$pid]=$name
  pid_host[$pid]=$h
}

# Whether process $1 still runs (not a zombie).
alive() {
  local stat
  stat=$(cat "/proc/$1/stat" 2> /dev/null) || return 1
  stat=${stat##*) }
  [ "${stat%% *}" != Z ]
}

# Waits until none of the given pids runs, at most $1 seconds; prints the seconds waited.
wait_gone() {  # limit pids...
  local limit=$1 t0 p any
  shift
  t0=$(date +%s.%N)
  while :; do
    any=0
    for p in "$@"; do alive "$p" && any=1; done
    [ $any = 0 ] && break
    if awk -v a="$t0" -v b="$(date +%s.%N)" -v l="$limit" 'BEGIN { exit !(b - a > l) }'; then break; fi
    sleep 0.1
  done
  awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }'
}

# Waits for every pid of `pids` (at most $1 seconds); 0 when all exited 0. Resets `pids`.
wait_job() {  # limit
  local p rc=0
  wait_gone "$1" "${pids[@]}" > /dev/null
  for p in "${pids[@]}"; do
    if alive "$p"; then
      echo "  ${pid_name[$p]} on ${pid_host[$p]} still runs after $1 s: killed"
      kill -KILL "$p" 2> /dev/null
      rc=1
    fi
    wait "$p" || { echo "  ${pid_name[$p]} on ${pid_host[$p]} exited with status $?"; rc=1; }
  done
  pids=()
  return $rc
}

# The next port for a job's scheduler (every job runs in namespaces with ports of their own).
port=21000
next_port() { port=$((port + 1)); }

# Each case runs in a subshell; its output is indented, its verdict PASS/FAIL with its time.
failed=()
run_case() {  # name function
  local name=$1 t0 t1 rc
  if [ -n "${NETNS_CASES:-}" ] && [[ " $NETNS_CASES " != *" $name "* ]]; then return; fi
  echo "--- $name"
  t0=$(date +%s.%N)
  # In the background, so that a signal interrupts the wait at once (bash runs a trap only
  # after the foreground command it waits for has ended).
  ("$2") &
  current_case=$!
  wait "$current_case"
  rc=$?
  current_case=
  t1=$(date +%s.%N)
  local secs
  secs=$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.1f", b - a }')
  if [ $rc = 0 ]; then
    echo "PASS $name (${secs} s)"
  else
    echo "FAIL $name (${secs} s)"
    failed+=("$name")
  fi
}

bad() {
  echo "  $*"
  exit 1
}

# Shows the last lines of each log under $1.
show_logs() {
  local f
  for f in "$1"/*.log; do
    echo "  == $f"
    tail -n 5 "$f" | sed 's/^/    /'
  done
}

# Each rank's loss lines ($2...) against the reference $1: the same steps, losses within relative
# 1e-5, and (seed 002) the same "parameters sum" fingerprint.
check_losses() {  # reference files...
  local ref=$1 f
  shift
  for f in "$@"; do
    awk -v name="$f" '
      function rel(a, b) { d = a - b; if (d < 0) d = -d; m = (a < 0 ? -a : a); return m > 0 ? d / m : d }
      NR == FNR { if ($0 ~ /loss is/) { ref[++nr] = $NF; step[nr] = $2 " " $4 }
                  if ($0 ~ /parameters sum/) { ref_sum = $6; ref_sq = $NF }; next }
      /loss is/ { ++n; if ($2 " " $4 != step[n] || rel(ref[n], $NF) > 1e-5) { print "  " name ": " $0 " where one process has " ref[n]; bad = 1 } }
      /parameters sum/ { seen = 1; if (rel(ref_sum, $6) > 1e-5 || rel(ref_sq, $NF) > 1e-5) { print "  " name ": " $0 " where one process has " ref_sum " " ref_sq; bad = 1 } }
      END { if (n != nr || n == 0) { print "  " name ": " n " loss lines, one process has " nr; bad = 1 }
            if (ref_sum != "" && !seen) { print "  " name ": no parameters line"; bad = 1 }; exit bad }' \
      "$ref" "$f" || return 1
  done
}

# ---- Data and references (one process) ----------------------------------------------------------

"$bin/cleave-datagen" mnist --out "$work/data" --train 320 --test 32 > /dev/null ||
  { echo "netns_test.sh: cleave-datagen failed" >&2; exit 1; }
export DATA_PATH=$work/data/MNIST_Data
seed002_args=(--epochs 1 --per-print-times 2)

# ---- Cases --------------------------------------------------------------------------------------

case_seed002_2x4() {
  local dir=$work/seed002 ref=$work/seed002/single.log
  mkdir -p "$dir/single"
  (cd "$dir/single" && timeout 120 "$bin/manual_parallel" "${seed002_args[@]}") > "$ref" 2>&1 ||
    bad "the single process failed: $(tail -n 3 "$ref")"
  next_port
  local token=netns-$RANDOM$RANDOM node
  for node in 0 1; do
    local h=cleave-a
    [ $node = 1 ] && h=cleave-b
    start "cleave-run_node$node" "$h" "$dir/$h" CLEAVE_JOB_TOKEN="$token" DATA_PATH="$DATA_PATH" -- \
      "$bin/cleave-run" --worker_num 8 --local_worker_num 4 --node_rank "$node" \
      --master_addr "${addr[cleave-a]}" --master_port "$port" --log_dir "$dir/$h/logs" -- \
      "$bin/manual_parallel" "${seed002_args[@]}"
  done
  wait_job 240 || { show_logs "$dir/cleave-a"; show_logs "$dir/cleave-b"; bad "cleave-run failed"; }
  local logs=("$dir"/cleave-a/logs/worker_*.log "$dir"/cleave-b/logs/worker_*.log)
  [ ${#logs[@]} = 8 ] || bad "expected 8 worker logs, got ${#logs[@]}"
  ls "$dir"/cleave-a/logs/worker_{0,1,2,3}.log "$dir"/cleave-b/logs/worker_{4,5,6,7}.log > /dev/null ||
    bad "ranks 0-3 should run on cleave-a and 4-7 on cleave-b"
  check_losses "$ref" "${logs[@]}" || bad "a rank's losses differ from the single process's"
  echo "  8 ranks on 2 hosts (cleave-run --node_rank 0 and 1): the single process's losses and parameters"
}

case_seed003_2x4() {
  local dir=$work/seed003 ref=$work/seed003/single.log
  mkdir -p "$dir/single"
  (cd "$dir/single" && timeout 120 "$bin/sharding_propagation") > "$ref" 2>&1 ||
    bad "the single process failed: $(tail -n 3 "$ref")"
  [ "$(grep -c "loss is" "$ref")" = 20 ] || bad "the single process printed no 20 loss lines"
  next_port
  local env=(MS_WORKER_NUM=8 MS_SCHED_HOST="${addr[cleave-a]}" MS_SCHED_PORT="$port")
  start scheduler cleave-a "$dir/cleave-a" MS_ROLE=MS_SCHED "${env[@]}" -- "$bin/sharding_propagation"
  local i
  for i in 0 1 2 3; do
    start "worker_a$i" cleave-a "$dir/cleave-a" MS_ROLE=MS_WORKER "${env[@]}" -- "$bin/sharding_propagation"
    start "worker_b$i" cleave-b "$dir/cleave-b" MS_ROLE=MS_WORKER "${env[@]}" -- "$bin/sharding_propagation"
  done
  wait_job 240 || { show_logs "$dir/cleave-a"; show_logs "$dir/cleave-b"; bad "the MS_ROLE job failed"; }
  check_losses "$ref" "$dir"/cleave-a/worker_*.log "$dir"/cleave-b/worker_*.log ||
    bad "a rank's losses differ from the single process's"
  # Ranks follow (host name, arrival): A's workers are ranks 0-3 and hold their checkpoints.
  [ -d "$dir/cleave-a/0" ] && [ -d "$dir/cleave-b/7" ] ||
    bad "expected ranks 0-3 on cleave-a, 4-7 on cleave-b (checkpoint folders)"
  echo "  8 ranks on 2 hosts (hand-started MS_ROLE, scheduler on cleave-a): the single process's 20 losses"
}

# The checksum job: 3 ranks on each of two hosts. $1: where (netns, or sim for one host with
# two UTS namespaces, or flat for one host); output in $work/checksum_$1.
checksum_job() {
  local where=$1 dir=$work/checksum_$1 i
  rm -rf "$dir"
  next_port
  local sched=${addr[cleave-a]}
  [ "$where" = netns ] || sched=127.0.0.1
  local env=(MS_WORKER_NUM=6 MS_SCHED_HOST="$sched" MS_SCHED_PORT="$port")
  mkdir -p "$dir"
  if [ "$where" = netns ]; then
    start scheduler cleave-a "$dir" MS_ROLE=MS_SCHED "${env[@]}" -- "$program" checksum
    for i in 0 1 2; do
      start "worker_$i" cleave-a "$dir" MS_ROLE=MS_WORKER MS_NODE_ID=$i "${env[@]}" -- "$program" checksum
      start "worker_$((i + 3))" cleave-b "$dir" MS_ROLE=MS_WORKER MS_NODE_ID=$((i + 3)) "${env[@]}" -- \
        "$program" checksum
    done
  else
    # One machine: namespace cleave-l, on loopback (its ports apart from this machine's). sim:
    # two host names (UTS namespaces), one /dev/shm, so the host keys differ as on two hosts;
    # flat: one host name.
    (cd "$dir" && exec nsenter --net="/run/netns/$machine" -- env MS_ROLE=MS_SCHED "${env[@]}" \
      "$program" checksum > scheduler.log 2>&1) &
    pids+=($!) pid_name[$!]=scheduler pid_host[$!]=$machine
    for i in 0 1 2 3 4 5; do
      local name=cleave-a
      [ $i -ge 3 ] && name=cleave-b
      [ "$where" = flat ] && name=$machine
      (cd "$dir" && exec nsenter --net="/run/netns/$machine" -- unshare --uts -- \
        sh -c 'hostname "$0" && exec "$@"' "$name" \
        env MS_ROLE=MS_WORKER MS_NODE_ID=$i "${env[@]}" "$program" checksum \
        > "worker_$i.log" 2>&1) &
      pids+=($!) pid_name[$!]=worker_$i pid_host[$!]=$name
    done
  fi
  wait_job 120 || { show_logs "$dir"; bad "the $where checksum job failed"; }
  grep -h "^checksum rank" "$dir"/worker_*.log > "$dir/checksums"
  [ "$(wc -l < "$dir/checksums")" = 6 ] || bad "$where: expected 6 checksum lines"
}

case_hierarchical() {
  checksum_job netns
  checksum_job sim
  checksum_job flat
  local n=$work/checksum_netns/checksums s=$work/checksum_sim/checksums f=$work/checksum_flat/checksums
  [ "$(awk '{ print $5 }' "$n" | sort -u)" = "shm+tcp" ] || bad "netns: transport is not shm+tcp: $(cat "$n")"
  [ "$(awk '{ print $5 }' "$s" | sort -u)" = "shm+tcp" ] || bad "sim: transport is not shm+tcp: $(cat "$s")"
  [ "$(awk '{ print $5 }' "$f" | sort -u)" = "shm" ] || bad "flat: transport is not shm: $(cat "$f")"
  [ "$(awk '{ print $7 }' "$n" | sort -u | wc -l)" = 1 ] || bad "netns: the ranks' hashes differ: $(cat "$n")"
  [ "$(awk '{ print $7 }' "$n" | sort -u)" = "$(awk '{ print $7 }' "$s" | sort -u)" ] ||
    bad "2 hosts in namespaces and 2 hosts simulated on one differ: $(cat "$n" "$s")"
  awk 'NR == FNR { ref = $9; next } { d = ref - $9; if (d < 0) d = -d; if (d > 1e-5 * (ref < 0 ? -ref : ref)) { print "  flat sum " $9 " vs " ref; bad = 1 } } END { exit bad }' \
    "$n" "$f" || bad "the flat run's sum is not within 1e-5 of the hierarchical one's"
  awk '{ print $7; exit }' "$n" > "$work/hash.netns"
  echo "  2 hosts x 3 ranks: hash $(awk '{ print $7; exit }' "$n") (shm+tcp) on every rank, the same as simulated on one host;"
  echo "  one host, 6 ranks (shm): hash $(awk '{ print $7; exit }' "$f"), sum $(awk '{ print $9; exit }' "$f") vs $(awk '{ print $9; exit }' "$n")"
}

case_rank_table() {
  local dir=$work/rank_table r
  mkdir -p "$dir"
  cat > "$dir/rank_table.json" << JSON
{"version": "1.0", "server_count": "2", "server_list": [
  {"server_id": "${addr[cleave-a]}", "device": [{"device_id": "0", "rank_id": "0"}, {"device_id": "1", "rank_id": "1"}]},
  {"server_id": "${addr[cleave-b]}", "device": [{"device_id": "0", "rank_id": "2"}, {"device_id": "1", "rank_id": "3"}]}]}
JSON
  next_port
  for r in 0 1 2 3; do
    local h=cleave-a
    [ $r -ge 2 ] && h=cleave-b
    start "rank_$r" "$h" "$dir" RANK_TABLE_FILE="$dir/rank_table.json" RANK_ID=$r \
      CLEAVE_RANK_TABLE_PORT=$port -- "$program" ranktable
  done
  wait_job 60 || { show_logs "$dir"; bad "the rank-table job failed"; }
  for r in 0 1 2 3; do
    grep -q "rank $r of 4 ok (rank table, local rank $((r % 2)))" "$dir/rank_$r.log" || bad "rank $r: $(tail -n 2 "$dir/rank_$r.log")"
  done
  echo "  4 ranks, server_ids ${addr[cleave-a]} (ranks 0, 1) and ${addr[cleave-b]} (ranks 2, 3): all-reduce and barrier ok, local ranks per server_id"
}

case_mpirun() {
  command -v mpirun > /dev/null || { echo "  SKIPPED: mpirun not found"; return 0; }
  local dir=$work/mpirun ref=$work/mpirun/single.log
  mkdir -p "$dir/single"
  (cd "$dir/single" && timeout 120 "$bin/manual_parallel" "${seed002_args[@]}") > "$ref" 2>&1 ||
    bad "the single process failed"
  # The rsh agent: `agent [options] HOST COMMAND...` runs COMMAND on HOST by entering its
  # namespaces (a minimal root has no ssh).
  cat > "$dir/netns_rsh" << AGENT
#!/bin/sh
while [ \$# -gt 0 ]; do case "\$1" in -*) shift ;; *) break ;; esac; done
host=\$1
shift
exec nsenter -t "\$(cat "$work/holder.\$host")" -n -m -u -r -- /bin/sh -c "\$*"
AGENT
  chmod +x "$dir/netns_rsh"
  start mpirun cleave-a "$dir" DATA_PATH="$DATA_PATH" -- mpirun --allow-run-as-root \
    --mca plm_rsh_agent "$dir/netns_rsh" --mca oob_tcp_if_include 10.213.7.0/24 \
    --mca btl_tcp_if_include 10.213.7.0/24 --mca btl self,vader,tcp --bind-to none \
    -H "${addr[cleave-a]}:2,${addr[cleave-b]}:2" -n 4 --display-map --output-filename "$dir/out" \
    "$bin/manual_parallel" "${seed002_args[@]}"
  wait_job 180 || { tail -n 20 "$dir/mpirun.log"; bad "mpirun failed"; }
  local outs=("$dir"/out/1/rank.*/stdout)
  [ ${#outs[@]} = 4 ] || bad "expected 4 rank outputs, got ${#outs[@]}: $(tail -n 5 "$dir/mpirun.log")"
  check_losses "$ref" "${outs[@]}" || bad "a rank's losses differ from the single process's"
  # mpirun's map: 2 processes on each host.
  [ "$(grep -o "Data for node: .*Num procs: 2" "$dir/mpirun.log" | sort -u | wc -l)" = 2 ] ||
    bad "mpirun's map does not put 2 ranks on each host: $(grep "Data for node" "$dir/mpirun.log")"
  echo "  mpirun -H ${addr[cleave-a]}:2,${addr[cleave-b]}:2 (rsh agent: nsenter): 4 ranks print the single process's losses"
}

# A fault job: the scheduler on $1, 2 workers on each of hosts A and B in an AllReduce loop (1 MB,
# for up to 120 s); returns once every worker has printed "ready".
fault_job() {  # sched_host dir
  local sh=$1 dir=$2 i
  next_port
  local env=(MS_WORKER_NUM=4 MS_SCHED_HOST="${addr[$sh]}" MS_SCHED_PORT="$port")
  start scheduler "$sh" "$dir" MS_ROLE=MS_SCHED "${env[@]}" -- "$program" loop 120 1
  sched_pid=${pids[-1]}
  a_pids=() b_pids=()
  for i in 0 1; do
    start "worker_a$i" cleave-a "$dir" MS_ROLE=MS_WORKER "${env[@]}" -- "$program" loop 120 1
    a_pids+=("${pids[-1]}")
    start "worker_b$i" cleave-b "$dir" MS_ROLE=MS_WORKER "${env[@]}" -- "$program" loop 120 1
    b_pids+=("${pids[-1]}")
  done
  # Running: every worker has done its first cross-host AllReduce.
  local p gone
  for _ in $(seq 600); do
    [ "$(cat "$dir"/worker_*.log | grep -c "running (transport")" = 4 ] && break
    gone=0
    for p in "${pids[@]}"; do alive "$p" || gone=1; done
    [ $gone = 0 ] || break
    sleep 0.1
  done
  [ "$(cat "$dir"/worker_*.log | grep -c "running (transport shm+tcp)")" = 4 ] ||
    { show_logs "$dir"; bad "the job did not start its cross-host AllReduce loop"; }
  sleep 1
}

# Checks that each of `pids` ended with a non-zero status within 15 s and that its log matches
# the pattern $1 (the cause named on the terminal). $2: seconds since the fault.
check_ended() {  # pattern secs pids...
  local pattern=$1 secs=$2 p
  shift 2
  for p in "$@"; do
    if alive "$p"; then
      kill -KILL "$p" 2> /dev/null
      bad "${pid_name[$p]} on ${pid_host[$p]} still ran ${secs} s after the fault"
    fi
    wait "$p" && bad "${pid_name[$p]} on ${pid_host[$p]} exited 0 after the fault"
    local log=$dir/${pid_name[$p]}.log
    grep -q -- "$pattern" "$log" ||
      bad "${pid_name[$p]} on ${pid_host[$p]} does not name '$pattern': $(tail -n 2 "$log")"
    echo "  ${pid_name[$p]} on ${pid_host[$p]}: $(grep -o -- "cleave[^:]*: .*" "$log" | grep -- "$pattern" | head -n 1 | cut -c 1-300)"
  done
  awk -v s="$secs" 'BEGIN { exit !(s < 15) }' || bad "the processes took ${secs} s to end (bound: 15 s)"
  echo "  every process ended ${secs} s after the fault"
}

# The scheduler's failure line names both ranks of host B (2 and 3: ranks follow host names).
names_both_b_ranks() {
  grep "job failed" "$dir/scheduler.log" | grep "rank 2 (host cleave-b" | grep -q "rank 3 (host cleave-b" ||
    bad "the scheduler does not name both of host B's ranks: $(grep "job failed" "$dir/scheduler.log")"
}

case_kill_host() {
  dir=$work/kill_host
  fault_job cleave-a "$dir"
  kill -KILL "${b_pids[@]}"
  local secs
  secs=$(wait_gone 30 "$sched_pid" "${a_pids[@]}")
  wait "${b_pids[@]}" 2> /dev/null
  check_ended "failed: rank . (host cleave-b" "$secs" "$sched_pid" "${a_pids[@]}"
  names_both_b_ranks
  pids=()
}

# Under cleave-run: --node_rank 0 on A (the scheduler and ranks 0, 1), --node_rank 1 on B (ranks
# 2, 3), in the AllReduce loop; B's cleave-run and workers killed. A's cleave-run ends within 15 s
# with the failure of one of its ranks, whose line names B's ranks.
case_kill_host_cleave_run() {
  dir=$work/kill_host_cleave_run
  next_port
  local token=netns-$RANDOM$RANDOM node h
  for node in 0 1; do
    h=cleave-a
    [ $node = 1 ] && h=cleave-b
    start "cleave-run_node$node" "$h" "$dir" CLEAVE_JOB_TOKEN="$token" -- \
      "$bin/cleave-run" --worker_num 4 --local_worker_num 2 --node_rank "$node" \
      --master_addr "${addr[cleave-a]}" --master_port "$port" --log_dir "$dir/$h" -- \
      "$program" loop 120 1
  done
  local run_a=${pids[0]} run_b=${pids[1]}
  for _ in $(seq 600); do
    [ "$(cat "$dir"/cleave-*/worker_*.log 2> /dev/null | grep -c "running (transport")" = 4 ] && break
    alive "$run_a" && alive "$run_b" || break
    sleep 0.1
  done
  [ "$(cat "$dir"/cleave-*/worker_*.log | grep -c "running (transport shm+tcp)")" = 4 ] ||
    { show_logs "$dir"; bad "the job did not start its cross-host AllReduce loop"; }
  sleep 1
  # Host B's processes: its cleave-run and the workers it started (in B's namespace).
  local victims secs
  mapfile -t victims < <(netns_pids cleave-b | grep -vx "${holder[cleave-b]}")
  exec 2> /dev/null  # the shell's note on the killed cleave-run (this case reports on stdout)
  kill -KILL "${victims[@]}"
  secs=$(wait_gone 30 "$run_a")
  wait "$run_b"
  check_ended "cleave-run: the job failed: rank . (host cleave-b" "$secs" "$run_a"
  # cleave-run ended after its processes: none is left on A.
  [ -z "$(netns_pids cleave-a | grep -vx "${holder[cleave-a]}")" ] ||
    bad "processes left on cleave-a after its cleave-run ended: pids $(netns_pids cleave-a | grep -vx "${holder[cleave-a]}" | xargs)"
  pids=()
}

case_link_down() {
  dir=$work/link_down
  fault_job cleave-a "$dir"
  in_ns "$switch" ip link set v-cleave-b down
  local secs
  secs=$(wait_gone 30 "$sched_pid" "${a_pids[@]}" "${b_pids[@]}")
  in_ns "$switch" ip link set v-cleave-b up
  check_ended "failed: rank . (host cleave-b" "$secs" "$sched_pid" "${a_pids[@]}"
  names_both_b_ranks
  check_ended "lost the scheduler at ${addr[cleave-a]}" "$secs" "${b_pids[@]}"
  pids=()
}

# Host B's link starved with an htb class of 1 kbit/s each way: its veth's egress in the switch and
# its eth0's egress. The 1 MB AllReduces fill the queues, so B's heartbeats wait behind them: the
# job must end as for a lost host, within 15 s, not wait out the 300 s collective timeout.
htb_limit() {  # namespace device rate
  in_ns "$1" tc qdisc add dev "$2" root handle 1: htb default 1 &&
    in_ns "$1" tc class add dev "$2" parent 1: classid 1:1 htb rate "$3" ceil "$3" quantum 1514
}

case_starved_link() {
  dir=$work/starved_link
  fault_job cleave-a "$dir"
  htb_limit "$switch" v-cleave-b 1kbit || bad "tc htb on the switch's v-cleave-b failed"
  htb_limit cleave-b eth0 1kbit || bad "tc htb on cleave-b's eth0 failed"
  local secs
  secs=$(wait_gone 30 "$sched_pid" "${a_pids[@]}" "${b_pids[@]}")
  in_ns "$switch" tc qdisc del dev v-cleave-b root
  in_ns cleave-b tc qdisc del dev eth0 root
  check_ended "failed: rank . (host cleave-b" "$secs" "$sched_pid" "${a_pids[@]}"
  names_both_b_ranks
  check_ended "lost the scheduler at ${addr[cleave-a]}" "$secs" "${b_pids[@]}"
  pids=()
}

case_sched_link_down() {
  dir=$work/sched_link_down
  fault_job cleave-c "$dir"
  in_ns "$switch" ip link set v-cleave-c down
  local secs
  secs=$(wait_gone 30 "$sched_pid" "${a_pids[@]}" "${b_pids[@]}")
  in_ns "$switch" ip link set v-cleave-c up
  check_ended "lost the scheduler at ${addr[cleave-c]}" "$secs" "${a_pids[@]}" "${b_pids[@]}"
  # The scheduler, cut off from every worker, ends too, naming them.
  check_ended "job failed: rank . (host cleave-[ab]" "$secs" "$sched_pid"
  pids=()
}

# The AllReduce loop of cluster_test_program (MB megabytes, SECONDS) on 4 workers, the scheduler
# on A: 2 on A and 2 on B (split), or all 4 on A (one); prints rank 0's all-reduces per second.
loop_rate() {  # dir [split|one] [MB] [SECONDS]
  local dir=$1 layout=${2:-split} mb=${3:-1} seconds=${4:-4} i h
  next_port
  local env=(MS_WORKER_NUM=4 MS_SCHED_HOST="${addr[cleave-a]}" MS_SCHED_PORT="$port")
  start scheduler cleave-a "$dir" MS_ROLE=MS_SCHED "${env[@]}" -- "$program" loop "$seconds" "$mb"
  for i in 0 1 2 3; do
    h=cleave-a
    [ "$layout" = split ] && [ $i -ge 2 ] && h=cleave-b
    start "worker_$i" "$h" "$dir" MS_ROLE=MS_WORKER MS_NODE_ID=$i "${env[@]}" -- \
      "$program" loop "$seconds" "$mb"
  done
  wait_job 120 > /dev/null || { show_logs "$dir" >&2; return 1; }
  awk '/all-reduces of/ { gsub(/[()]/, "", $10); printf "%.1f", $4 / $10 }' "$dir/worker_0.log"
}

# Not run by default (NETNS_CASES=bench; bench/run.sh comm with CLEAVE_BENCH_NETNS=1): AllReduce
# bandwidth of 4 ranks over 2 hosts (2 each: shared memory inside, TCP between the leaders)
# against 4 ranks on one host (shared memory only), as BENCH rows. The loop also broadcasts 8
# bytes per iteration (its stop flag), which the small sizes feel.
case_bench() {
  local kb mb split one
  for kb in 64 1024 16384; do
    mb=$(awk -v k=$kb 'BEGIN { print k / 1024 }')
    split=$(loop_rate "$work/bench_split_$kb" split "$mb" 3) || bad "the 2-host loop failed"
    one=$(loop_rate "$work/bench_one_$kb" one "$mb" 3) || bad "the 1-host loop failed"
    awk -v kb=$kb -v s="$split" -v o="$one" 'BEGIN {
      b = kb * 1024; printf "BENCH AllReduce_%s_np4_netns two_hosts=%.3f one_host=%.3f ratio=%.2f two_hosts_us=%.0f one_host_us=%.0f\n",
        (kb >= 1024 ? kb / 1024 "MB" : kb "KB"), b * s / 1e9, b * o / 1e9, s / o, 1e6 / s, 1e6 / o }'
  done
}

case_throttle() {
  local plain throttled t0 rate=20mbit
  if [ ! -s "$work/hash.netns" ]; then  # the unthrottled hash, when the hierarchical case did not run
    checksum_job netns
    awk '{ print $7; exit }' "$work/checksum_netns/checksums" > "$work/hash.netns"
  fi
  plain=$(loop_rate "$work/loop_plain") || bad "the unthrottled loop failed"
  # B's link at $rate each way: its veth's egress in the switch, its eth0's egress.
  in_ns "$switch" tc qdisc add dev v-cleave-b root tbf rate $rate burst 32kb latency 200ms
  in_ns cleave-b tc qdisc add dev eth0 root tbf rate $rate burst 32kb latency 200ms
  throttled=$(loop_rate "$work/loop_throttled") || bad "the throttled loop failed"
  t0=$(date +%s.%N)
  checksum_job netns
  local secs
  secs=$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }')
  in_ns "$switch" tc qdisc del dev v-cleave-b root
  in_ns cleave-b tc qdisc del dev eth0 root
  local reference_hash
  reference_hash=$(cat "$work/hash.netns" 2> /dev/null)
  local hash
  hash=$(awk '{ print $7 }' "$work/checksum_netns/checksums" | sort -u)
  [ "$(wc -w <<< "$hash")" = 1 ] || bad "the throttled job's ranks' hashes differ: $hash"
  [ "$hash" = "$reference_hash" ] || bad "the throttled job's hash $hash differs from the unthrottled $reference_hash"
  echo "  1 MB AllReduce over 2 hosts x 2 ranks: $plain per second unthrottled, $throttled with B's link at $rate (tbf)"
  echo "  checksum job 2 x 3 ranks through the throttled link: ${secs} s, hash $hash (the unthrottled one)"
}

run_case seed002_2x4 case_seed002_2x4
run_case seed003_2x4 case_seed003_2x4
run_case hierarchical case_hierarchical
run_case rank_table case_rank_table
run_case mpirun case_mpirun
run_case kill_host case_kill_host
run_case kill_host_cleave_run case_kill_host_cleave_run
run_case link_down case_link_down
run_case sched_link_down case_sched_link_down
run_case starved_link case_starved_link
run_case throttle case_throttle
[[ " ${NETNS_CASES:-} " == *" bench "* ]] && run_case bench case_bench

if [ ${#failed[@]} -gt 0 ]; then
  echo "netns_test.sh: FAILED: ${failed[*]}"
  exit 1
fi
echo "netns_test.sh: every case passed"

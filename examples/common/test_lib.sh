# Helpers of the example tests (sourced): fail MESSAGE..., free_port, compare_to_single.

# Prints "FAIL: MESSAGE" (and runs fail_hook, when defined, to show logs) and exits 1.
fail() {
  echo "FAIL: $*" >&2
  if declare -F fail_hook > /dev/null; then fail_hook; fi
  exit 1
}

# A TCP port free on 127.0.0.1 now (a random one in 20000-39999 without python3).
free_port() {
  if command -v python3 > /dev/null; then
    python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
  else
    echo $((20000 + RANDOM % 20000))
  fi
}

# Compares one rank's output FILE with a single process's REFERENCE output (LossMonitor lines
# "epoch: E step: S, loss is L" and a "parameters sum A sum of squares B" line, as the
# manual_parallel programs print): the same steps, losses and fingerprint within 1e-5 relative.
compare_to_single() {  # reference name file
  awk -v name="$2" '
    function rel(a, b) { d = a - b; if (d < 0) d = -d; m = (a < 0 ? -a : a); return m > 0 ? d / m : d }
    NR == FNR { if ($0 ~ /loss is/) { ref_step[++nr] = $4; ref_loss[nr] = $NF }
                if ($0 ~ /parameters sum/) { ref_sum = $6; ref_sq = $NF }; next }
    /loss is/ { ++n; if ($4 != ref_step[n]) { print name ": step " $4 " where the reference has " ref_step[n]; bad = 1 }
                if (rel(ref_loss[n], $NF) > 1e-5) { print name ": " $0 " differs from the reference loss " ref_loss[n]; bad = 1 } }
    /parameters sum/ { seen = 1
                if (rel(ref_sum, $6) > 1e-5 || rel(ref_sq, $NF) > 1e-5) { print name ": " $0 " differs from the reference sum " ref_sum " sum of squares " ref_sq; bad = 1 } }
    END { if (n != nr) { print name ": " n " loss lines, the reference has " nr; bad = 1 }
          if (!seen) { print name ": no parameters line"; bad = 1 }
          exit bad }' "$1" "$3" || fail "$2 does not match the single process"
}

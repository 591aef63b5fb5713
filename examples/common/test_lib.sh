# Helpers of the example tests (sourced): fail MESSAGE..., free_port.

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

#!/usr/bin/env bash
# cleave-calibrate's usage errors (exit status 2, checked before anything is measured) and a quick
# run that writes a profile. Usage: calibrate_cli_test.sh PATH_TO_cleave-calibrate
set -uo pipefail
tool=$1
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail() {
  echo "FAIL: $*" >&2
  exit 1
}
# expect STATUS FRAGMENT ARGS...: the tool exits with STATUS and its output holds FRAGMENT.
expect() {
  local want=$1 fragment=$2
  shift 2
  local out rc
  out=$(timeout 60 "$tool" "$@" 2>&1)
  rc=$?
  [ "$rc" -eq "$want" ] || fail "$*: status $rc, expected $want; output: $out"
  grep -qF -- "$fragment" <<<"$out" || fail "$*: the output lacks '$fragment': $out"
}

expect 2 "cleave-calibrate: --output is required but was not given"
expect 2 "cleave-calibrate: unknown flag --quik; did you mean --quick?" -o "$work/p.json" --quik
expect 2 "cleave-calibrate: --max-ranks 1 is invalid; expected an integer from 2 to 16" \
  -o "$work/p.json" --max-ranks 1
expect 2 "cleave-calibrate: -o '' cannot be written: it is empty" -o ""
expect 2 "cleave-calibrate: -o '$work' cannot be written: it is a folder" -o "$work"
expect 2 "cleave-calibrate: -o '$work/none/p.json' cannot be written: its folder '$work/none' does not exist" \
  -o "$work/none/p.json"
if [ "$(id -u)" != 0 ]; then
  mkdir "$work/ro" && chmod 500 "$work/ro"
  expect 2 "its folder '$work/ro' is not writable" -o "$work/ro/p.json"
fi
expect 0 "--max-ranks INT:2..16=4" --help
expect 0 "cleave-calibrate: wrote $work/p.json" --quick -o "$work/p.json"
grep -q '"format": "cleave-machine-profile"' "$work/p.json" || fail "no profile in $work/p.json"
echo "calibrate_cli: ok"

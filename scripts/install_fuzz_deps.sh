#!/usr/bin/env bash
# Installs what scripts/fuzz.sh needs beyond scripts/install_deps.sh: clang 14 and libFuzzer
# (Debian 12's clang-14, libfuzzer-14-dev). Not part of ./test.sh: only fuzzing needs them.
#
# Idempotent: when every package is installed it touches no network. Otherwise, as root, it runs
# apt-get update and installs the missing ones; as another user it prints the command and exits 1.
set -euo pipefail

packages=(clang-14 libfuzzer-14-dev libclang-rt-14-dev)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && exit 0
if [ "$(id -u)" != 0 ]; then
  echo "install_fuzz_deps: missing ${missing[*]}; run as root:" >&2
  echo "  apt-get update && apt-get install -y ${missing[*]}" >&2
  exit 1
fi
apt-get update
DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends "${missing[@]}"

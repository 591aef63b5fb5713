#!/usr/bin/env bash
# Writes PyTorch references and runs the parity test against them. Exits 77 (CTest: skipped)
# with a clear message when PyTorch cannot be imported.
set -u
binary=$1
work=${2:-$(mktemp -d)}
here=$(cd "$(dirname "$0")" && pwd)
# Debian's python3-torch lives in the system Python, which may not be the first python3 on PATH.
python=""
for candidate in /usr/bin/python3 python3; do
  if "$candidate" -c "import torch" >/dev/null 2>&1; then
    python=$candidate
    break
  fi
done
if [ -z "$python" ]; then
  echo "SKIPPED: PyTorch parity: 'import torch' fails in /usr/bin/python3 and python3; install Debian's python3-torch (scripts/install_deps.sh does)"
  exit 77
fi
rm -rf "$work" && mkdir -p "$work"
for model in lenet mlp; do
  "$python" "$here/torch_reference.py" "$work" "$model" || { echo "torch_reference.py failed for $model"; exit 1; }
done
CLEAVE_PARITY_DIR=$work exec "$binary"

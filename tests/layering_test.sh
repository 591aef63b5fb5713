#!/usr/bin/env bash
# Checks the dependency direction of DESIGN.md on #include lines: a file of layer L may include
# headers of L and of the layers below it only. (CMake linking enforces the same for symbols.)
set -u
root=${1:-$(dirname "$0")/..}
cd "$root" || exit 2

# layer -> the layers it may include: itself and those it links (CMakeLists.txt). The public
# cleave/ops/*.h headers belong to ir.
ir_up="core kernels ir ops"
declare -A allowed=(
  [core]="core"
  [kernels]="core kernels"
  [ir]="$ir_up"
  [autodiff]="$ir_up autodiff"
  [comm]="core comm"
  [cluster]="core comm cluster"
  [parallel]="$ir_up parallel"
  [runtime]="$ir_up autodiff comm cluster parallel runtime"
  [nn]="$ir_up autodiff comm cluster parallel runtime nn"
  [optim]="$ir_up autodiff comm cluster parallel runtime nn optim"
  [data]="$ir_up data"
  [train]="$ir_up autodiff comm cluster parallel runtime nn optim data train"
)
status=0
for layer in "${!allowed[@]}"; do
  for dir in "src/$layer" "include/cleave/$layer"; do
    [ -d "$dir" ] || continue
    while IFS= read -r line; do
      file=${line%%:*}
      inc=$(sed -E 's/.*#include "([^"]+)".*/\1/' <<<"$line")
      case "$inc" in
        cleave/*/*) dep=$(cut -d/ -f2 <<<"$inc") ;;
        */*) dep=$(cut -d/ -f1 <<<"$inc") ;;
        *) continue ;;
      esac
      if ! grep -qw "$dep" <<<"${allowed[$layer]}"; then
        echo "layering: $file (layer $layer) includes \"$inc\" from layer '$dep'; $layer may include only: ${allowed[$layer]}"
        status=1
      fi
    done < <(grep -rn '#include "' "$dir" --include='*.h' --include='*.cc' --include='*.cu' || true)
  done
done
[ $status -eq 0 ] && echo "layering: every include follows the layer order"
exit $status

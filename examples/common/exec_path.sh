# Sourced by the examples' run scripts (with $root and $example set): sets execute_path, the
# folder that everything a run writes goes under, made absolute and created: $EXEC_PATH, by
# default out/<example> at the repository root (ignored by git), so that a run leaves the
# checkout clean. The scripts start their programs from there, as the tutorials start theirs from
# the folder they run in: relative paths in the programs' arguments are taken from there too.
# Also defines `absolute_path PATH`: PATH made absolute against the current folder (the caller's,
# before the script changes into execute_path).
execute_path=${EXEC_PATH:-$root/out/$example}
mkdir -p "$execute_path" || exit 1
execute_path=$(cd "$execute_path" && pwd) || exit 1
absolute_path() {
  case "$1" in
    /*) printf '%s\n' "$1" ;;
    *) printf '%s\n' "$PWD/$1" ;;
  esac
}

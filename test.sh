#!/usr/bin/env bash
# Sets everything up and runs every test: installs missing Debian packages
# (scripts/install_deps.sh), builds build/Release (scripts/build.sh), then runs CTest.
#
# Environment:
#   CLEAVE_TEST_LABEL          run only tests with this label (a regex: core, ops, kernels, slow...)
#   CLEAVE_TEST_EXCLUDE_LABEL  skip tests with this label (e.g. slow)
#   CLEAVE_TEST_JOBS           tests run in parallel (default 2)
#   CLEAVE_JOBS                compile jobs (default: the number of CPUs)
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")"

scripts/install_deps.sh
scripts/build.sh Release

args=(--test-dir build/Release --output-on-failure -j "${CLEAVE_TEST_JOBS:-2}")
[ -n "${CLEAVE_TEST_LABEL:-}" ] && args+=(-L "$CLEAVE_TEST_LABEL")
[ -n "${CLEAVE_TEST_EXCLUDE_LABEL:-}" ] && args+=(-LE "$CLEAVE_TEST_EXCLUDE_LABEL")
exec ctest "${args[@]}"

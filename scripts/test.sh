#!/usr/bin/env bash
# Sets up and runs loom's whole test suite: installs dependencies, configures into build/,
# builds everything and runs every CTest test (labels cpu, cuda, dist). Exits non-zero on any
# failure. LOOM_CUDA / LOOM_MPI (AUTO, ON, OFF) and LOOM_BUILD_DIR select the configuration;
# LOOM_CTEST_EXCLUDE (a CTest regex, empty by default) leaves out the tests it matches.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build_dir=${LOOM_BUILD_DIR:-$root/build}
jobs=$(nproc)

"$root/scripts/install-deps.sh"
"$root/scripts/configure.sh"
cmake --build "$build_dir" --parallel "$jobs"

echo "== loom tests: $(grep -E '^LOOM_(CUDA|MPI):' "$build_dir/CMakeCache.txt" | tr '\n' ' ')in $build_dir"
exclude=()
if [[ -n ${LOOM_CTEST_EXCLUDE:-} ]]; then
  echo "== leaving out the tests that match: $LOOM_CTEST_EXCLUDE"
  exclude=(--exclude-regex "$LOOM_CTEST_EXCLUDE")
fi
ctest --test-dir "$build_dir" --output-on-failure --parallel "$jobs" "${exclude[@]}"

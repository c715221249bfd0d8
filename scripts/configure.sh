#!/usr/bin/env bash
# Configures loom into ${LOOM_BUILD_DIR:-build}. Shared by test.sh and quickstart.sh.
# Honours LOOM_CUDA and LOOM_MPI (AUTO, ON, OFF), LOOM_BUILD_TESTS and LOOM_BUILD_BENCHMARKS (ON,
# OFF; default ON) and LOOM_FUZZ_SECONDS (per fuzz target in the test suite; 0: none); warnings are
# errors when CI=true.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build_dir=${LOOM_BUILD_DIR:-$root/build}
werror=OFF
if [ "${CI:-}" = "true" ]; then werror=ON; fi
generator=()
if command -v ninja >/dev/null; then generator=(-G Ninja); fi
if [ -f "$build_dir/CMakeCache.txt" ]; then generator=(); fi  # keep the generator it was made with
cmake -S "$root" -B "$build_dir" "${generator[@]}" \
  -DCMAKE_BUILD_TYPE=Release \
  -DLOOM_CUDA="${LOOM_CUDA:-AUTO}" \
  -DLOOM_MPI="${LOOM_MPI:-AUTO}" \
  -DLOOM_BUILD_TESTS="${LOOM_BUILD_TESTS:-ON}" \
  -DLOOM_BUILD_BENCHMARKS="${LOOM_BUILD_BENCHMARKS:-ON}" \
  -DLOOM_FUZZ_SECONDS="${LOOM_FUZZ_SECONDS:-15}" \
  -DLOOM_WERROR="$werror"

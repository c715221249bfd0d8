#!/usr/bin/env bash
# Configures loom into ${LOOM_BUILD_DIR:-build}. Shared by test.sh and quickstart.sh.
# Honours LOOM_CUDA and LOOM_MPI (AUTO, ON, OFF), LOOM_BUILD_TESTS and LOOM_BUILD_BENCHMARKS (ON,
# OFF; default ON) and LOOM_FUZZ_SECONDS (per fuzz target in the test suite; 0: none); warnings are
# errors when CI=true. Compiles C++ through ccache where it is installed (LOOM_CCACHE=OFF: not), so
# another build of this checkout (CI's CPU-only build, the add_subdirectory consumer test) takes
# every object whose preprocessed source and flags are the same from the one before.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build_dir=${LOOM_BUILD_DIR:-$root/build}
werror=OFF
if [ "${CI:-}" = "true" ]; then werror=ON; fi
generator=()
if command -v ninja >/dev/null; then generator=(-G Ninja); fi
if [ -f "$build_dir/CMakeCache.txt" ]; then generator=(); fi  # keep the generator it was made with
# A launcher the build directory already has (ccache, or one the user chose) is kept.
launcher=()
existing=$(sed -n 's/^CMAKE_CXX_COMPILER_LAUNCHER:[A-Z]*=//p' "$build_dir/CMakeCache.txt" 2>/dev/null || true)
case "${LOOM_CCACHE:-ON}" in
  [Oo][Ff][Ff] | 0 | [Nn][Oo] | [Ff][Aa][Ll][Ss][Ee]) launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=) ;;
  *) if [ -z "$existing" ] && command -v ccache >/dev/null; then launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache); fi ;;
esac
cmake -S "$root" -B "$build_dir" "${generator[@]}" "${launcher[@]}" \
  -DCMAKE_BUILD_TYPE=Release \
  -DLOOM_CUDA="${LOOM_CUDA:-AUTO}" \
  -DLOOM_MPI="${LOOM_MPI:-AUTO}" \
  -DLOOM_BUILD_TESTS="${LOOM_BUILD_TESTS:-ON}" \
  -DLOOM_BUILD_BENCHMARKS="${LOOM_BUILD_BENCHMARKS:-ON}" \
  -DLOOM_FUZZ_SECONDS="${LOOM_FUZZ_SECONDS:-15}" \
  -DLOOM_WERROR="$werror"

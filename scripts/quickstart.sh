#!/usr/bin/env bash
# Sets up loom and runs its main program: installs dependencies, builds into build/ and runs the
# end-to-end smoke check (loom_smoke) on the best device here. Extra arguments go to loom_smoke.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build_dir=${LOOM_BUILD_DIR:-$root/build}

"$root/scripts/install-deps.sh"
"$root/scripts/configure.sh"
cmake --build "$build_dir" --parallel "$(nproc)" --target loom_smoke
"$build_dir/examples/smoke/loom_smoke" "$@"

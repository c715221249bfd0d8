#!/usr/bin/env bash
# Sets up loom and runs its main program: installs dependencies, builds into build/ and trains a
# small GPT with examples/train_gpt on the built-in 2-digit addition task, on the CPU (about a
# minute and a half on 2 cores once built). Extra arguments go to train_gpt (see its --help).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build_dir=${LOOM_BUILD_DIR:-$root/build}

"$root/scripts/install-deps.sh"
"$root/scripts/configure.sh"
cmake --build "$build_dir" --parallel "$(nproc)" --target train_gpt
"$build_dir/examples/train_gpt/train_gpt" --log-every 100 "$@"

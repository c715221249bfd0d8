#!/usr/bin/env bash
# Sets up and runs loom's benchmark suite (benchmarks/suite/bench.py): installs dependencies,
# builds the benchmarks if needed, runs every benchmark with its same-run peers, and writes
# results.json, report.md and plots/ into --out (default bench-results/DATE-MODE).
#
#   scripts/bench.sh [--smoke|--quick|--full] [--gpu] [--out DIR] [--compare BASELINE|auto]
#                    [--fail-on-regression] [--save-baseline] [--jobs gemm,allreduce,...]
#
# --quick (the default) takes under 5 minutes on 2 cores once built, --full under 30, --smoke
# under a minute (one repeat of the smallest sizes: CI's check that everything runs). Where it
# builds: LOOM_BUILD_DIR if set, else build/ if it is configured (the test command's build), else,
# without an NVIDIA GPU, a CPU-only build of the library and benchmarks in build-bench/.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
if [ -z "${LOOM_BUILD_DIR:-}" ]; then
  if [ -f "$root/build/CMakeCache.txt" ]; then
    export LOOM_BUILD_DIR=$root/build
  elif ! { command -v nvidia-smi >/dev/null && nvidia-smi -L >/dev/null 2>&1; }; then
    export LOOM_BUILD_DIR=$root/build-bench LOOM_CUDA=${LOOM_CUDA:-OFF} LOOM_BUILD_TESTS=${LOOM_BUILD_TESTS:-OFF}
    echo "bench: no NVIDIA GPU here: building the CPU benchmarks into build-bench/"
  else
    export LOOM_BUILD_DIR=$root/build
  fi
fi

"$root/scripts/install-deps.sh"
if [ ! -f "$LOOM_BUILD_DIR/CMakeCache.txt" ]; then "$root/scripts/configure.sh"; fi
targets=(gemm_bench kernel_bench alloc_bench attention_bench allreduce_bench ddp_bench zero_bench train_bench
         ckpt_bench data_bench crypt_bench loom-topo)
cmake --build "$LOOM_BUILD_DIR" --parallel "$(nproc)" --target "${targets[@]}"
exec /usr/bin/python3 "$root/benchmarks/suite/bench.py" --build "$LOOM_BUILD_DIR" "$@"

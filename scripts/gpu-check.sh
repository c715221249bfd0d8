#!/usr/bin/env bash
# The GPU check: configures and builds loom for this machine's GPU (MPI off), runs the
# cuda-labelled tests, the smoke program and the GPU benchmarks, writes results into OUTDIR
# and prints a short table last. Uses .carry/ (from scripts/gpu-carry.sh) for header-only
# dependencies the machine may lack. Meant to finish in a few minutes.
set -uo pipefail
out=${1:?usage: scripts/gpu-check.sh OUTDIR}
root=$(cd "$(dirname "$0")/.." && pwd)
build=${LOOM_GPU_BUILD_DIR:-/tmp/loom-gpu-build}
mkdir -p "$out"

commit=$(git -C "$root" rev-parse HEAD 2>/dev/null || head -n1 "$root/.carry/COMMIT" 2>/dev/null || echo unknown)
export LOOM_COMMIT=$commit
arch=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | head -n1 | tr -d ' .')
arch=${LOOM_CUDA_ARCH:-${arch:-native}}
nvcc_path=$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)
generator=(); command -v ninja >/dev/null && generator=(-G Ninja)

{
  echo "commit $commit, CUDA arch $arch, nvcc $nvcc_path"
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>&1
} | tee "$out/machine.txt"

status=0
cmake -S "$root" -B "$build" "${generator[@]}" -DCMAKE_BUILD_TYPE=Release -DLOOM_MPI=OFF \
  -DCMAKE_CUDA_COMPILER="$nvcc_path" -DCMAKE_CUDA_ARCHITECTURES="$arch" \
  -DCMAKE_PREFIX_PATH="$root/.carry/usr" > "$out/configure.log" 2>&1 || { tail -30 "$out/configure.log"; exit 1; }
grep -q "define LOOM_WITH_CUDA 1" "$build/include/loom/config.hpp" || { echo "CUDA was not enabled"; tail -30 "$out/configure.log"; exit 1; }
cmake --build "$build" --parallel "$(nproc)" > "$out/build.log" 2>&1 || { tail -40 "$out/build.log"; exit 1; }

ctest --test-dir "$build" -L cuda --output-on-failure --timeout 300 > "$out/cuda-tests.log" 2>&1 || status=1
if grep -q "(Skipped)" "$out/cuda-tests.log"; then echo "cuda tests were skipped: no usable GPU here"; status=1; fi
"$build/examples/smoke/loom_smoke" > "$out/smoke.txt" 2>&1 || status=1
"$build/benchmarks/alloc_bench" --json "$out/alloc_bench.json" > "$out/alloc_bench.txt" 2>&1 || status=1

echo "== cuda tests";  grep -E "tests passed|tests failed|Failed|Skipped" "$out/cuda-tests.log" | tail -15
echo "== smoke";       tail -8 "$out/smoke.txt"
echo "== alloc_bench"; tail -6 "$out/alloc_bench.txt"
exit $status

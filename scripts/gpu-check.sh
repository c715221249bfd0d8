#!/usr/bin/env bash
# The GPU check: configures and builds loom for this machine's GPU (MPI off), runs the
# cuda-labelled tests, the smoke program and the GPU benchmarks, writes results into OUTDIR
# (build.log, cuda-tests.log, summary.txt, topology.json and one JSON per benchmark) and prints
# a short table last. Uses .carry/ (from scripts/gpu-carry.sh) for header-only dependencies the
# machine may lack. Meant to finish in a few minutes on an H200.
set -uo pipefail
out=${1:?usage: scripts/gpu-check.sh OUTDIR}
root=$(cd "$(dirname "$0")/.." && pwd)
build=${LOOM_GPU_BUILD_DIR:-/tmp/loom-gpu-build}
mkdir -p "$out"
summary="$out/summary.txt"

commit=$(git -C "$root" rev-parse HEAD 2>/dev/null || head -n1 "$root/.carry/COMMIT" 2>/dev/null || echo unknown)
export LOOM_COMMIT=$commit
arch=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | head -n1 | tr -d ' .')
arch=${LOOM_CUDA_ARCH:-${arch:-native}}
nvcc_path=$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)
generator=(); command -v ninja >/dev/null && generator=(-G Ninja)

{
  echo "commit $commit, CUDA arch $arch, nvcc $nvcc_path"
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>&1
} | tee "$summary"

status=0
{
  cmake -S "$root" -B "$build" "${generator[@]}" -DCMAKE_BUILD_TYPE=Release -DLOOM_MPI=OFF \
    -DCMAKE_CUDA_COMPILER="$nvcc_path" -DCMAKE_CUDA_ARCHITECTURES="$arch" -DCMAKE_PREFIX_PATH="$root/.carry/usr" &&
  grep -q "define LOOM_WITH_CUDA 1" "$build/include/loom/config.hpp" &&
  cmake --build "$build" --parallel "$(nproc)"
} > "$out/build.log" 2>&1 || { echo "build failed (or CUDA was not enabled):"; tail -40 "$out/build.log"; exit 1; }

ctest --test-dir "$build" -L cuda --output-on-failure --timeout 300 > "$out/cuda-tests.log" 2>&1 || status=1
if grep -q "(Skipped)" "$out/cuda-tests.log"; then echo "cuda tests were skipped: no usable GPU here"; status=1; fi

bench() {  # name, args...: runs a benchmark, its table into the summary, its JSON into OUTDIR
  local name=$1; shift
  echo "== $name" >> "$summary"
  "$build/benchmarks/$name" "$@" --json "$out/$name.json" >> "$summary" 2>&1 || { echo "$name failed" >> "$summary"; status=1; }
}
echo "== check-sass" >> "$summary"
"$root/scripts/check-sass.sh" "$build" >> "$summary" 2>&1 || status=1
echo "== smoke" >> "$summary"
"$build/examples/smoke/loom_smoke" >> "$summary" 2>&1 || status=1
bench gemm_bench --device cuda:0 --repeats 20 --precisions tf32,bf16,fp16 \
  --shapes 1024,2048,4096,8192,16384x2304x768,16384x3072x768,16384x768x3072
bench kernel_bench --device cuda:0 --repeats 20 --rows 16384 --channels 768
bench alloc_bench --device cuda:0
# GPT-2 124M shape in bf16: tokens/s and MFU against the same-run GEMM peak.
bench train_bench --device cuda:0 --precision bf16 --layers 12 --heads 12 --channels 768 --context 1024 \
  --vocab 50257 --batch 8 --steps 10 --warmup 2 --peak-shape 4096
# One-GPU NCCL through loom::init, against ncclAllReduce on the same buffers.
bench allreduce_bench -b 1K -e 1G -f 4 -n 20 --rounds 5
# The GradientReducer on the NCCL path (one rank: a one-GPU communicator), GPT-2 124M in bf16.
bench ddp_bench --device cuda --precision bf16 --workloads gpt2-124m --ranks 1 --steps 10 --warmup 2
echo "== loom-topo (detected)" >> "$summary"
"$build/examples/loom_topo/loom-topo" -b 1K -e 1G -f 16 --dump "$out/topology.json" >> "$summary" 2>&1 || status=1
echo "== train_gpt (addition, bf16, cuda:0)" >> "$summary"
"$build/examples/train_gpt/train_gpt" --device cuda:0 --precision bf16 --steps 600 --log-every 100 \
  >> "$summary" 2>&1 || status=1

grep "check-sass" "$summary"
echo "== cuda tests"; grep -E "tests passed|tests failed|\*\*\*Failed|Skipped" "$out/cuda-tests.log" | tail -15
sed -n '/== gemm_bench/,$p' "$summary" | grep -E "^==|^ *[0-9]|^copy|^[a-z_]+ |^MFU|^eval|^GPU|^host|^NIC" | head -140
exit $status

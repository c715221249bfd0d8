#!/usr/bin/env bash
# The GPU check: everything a rare GPU session should learn, in one run of at most 9 minutes on
# an H200 (16 cores). Steps, in order, each under its own `timeout`, none stopping the rest:
#   1 preflight     GPU, driver, nvcc, NCCL and cuDNN headers, compute-sanitizer
#   2 build         only the targets below, for this GPU's architecture, MPI off
#   3 cuda-tests    the cuda test binary as one process (each case timed), NCCL timeout 60 s
#   4 gemm          gemm_bench (loom vs cuBLASLt, time and result) in NN/TN/NT at the GPT-2 and square shapes
#   5 train         train_bench GPT-2 124M bf16 at B = 8, MFU; the telemetry's overhead on that step
#   6 train_gpt     a short run of the example
#   7 kernels/comm  attention_bench (composed, head-major, fused at GPT-2's shape), kernel_bench, train_bench
#                   with fused attention (B = 8 picks stored) and at B = 16, one-GPU ddp_bench and allreduce_bench, alloc_bench, topology,
#                   then the benchmark suite's GPU section (report.md with plots, OUTDIR/suite)
#   8 memcheck      compute-sanitizer memcheck on the kernel tests
# OUTDIR gets one log per step, a JSON per benchmark and summary.txt; the summary (a table of the
# steps with their status and seconds, then the key lines) is printed on exit whatever happened.
# Header-only dependencies the GPU machine may lack come from .carry/ (scripts/gpu-carry.sh).
# Without a GPU it rehearses: preflight and build run, the GPU steps report "no GPU" and skip
# (LOOM_GPU_CHECK_REHEARSE=1 runs them anyway, to exercise the script: they fail fast).
set -uo pipefail
out=${1:?usage: scripts/gpu-check.sh OUTDIR}
root=$(cd "$(dirname "$0")/.." && pwd)
build=${LOOM_GPU_BUILD_DIR:-/tmp/loom-gpu-build}
mkdir -p "$out"
out=$(cd "$out" && pwd)
summary="$out/summary.txt"
steps="$out/steps.txt"
: > "$summary"
: > "$steps"
# .carry/COMMIT first: the device tool's copy of the tree can carry a .git older than the tree.
export LOOM_COMMIT=$(head -n1 "$root/.carry/COMMIT" 2>/dev/null || git -C "$root" rev-parse HEAD 2>/dev/null || echo unknown)

finish() {
  {
    echo "== gpu-check at $LOOM_COMMIT"
    column -t -s $'\t' "$steps" 2>/dev/null || cat "$steps"
    echo
    cat "$summary"
  } | tee "$out/report.txt"
}
trap finish EXIT

status=0
# The whole check ends within LOOM_GPU_CHECK_SECONDS (default 540): a step gets the smaller of its
# own limit and what is left, and is skipped when under 20 s is left, so the report always comes
# back inside a device lease; the steps run in order of what they teach.
deadline=$((SECONDS + ${LOOM_GPU_CHECK_SECONDS:-540}))
# step NAME SECONDS COMMAND...: runs COMMAND under a timeout into OUTDIR/NAME.log; records the outcome.
step() {
  local name=$1 limit=$2; shift 2
  local start=$SECONDS rc left=$((deadline - SECONDS - 5))
  if [ $left -lt 20 ]; then skip "$name" "out of time"; status=1; return 1; fi
  [ $limit -gt $left ] && limit=$left
  # Line-buffered, so that a step stopped at its limit still leaves the lines it printed.
  timeout --kill-after=10 "$limit" stdbuf -oL -eL "$@" > "$out/$name.log" 2>&1
  rc=$?
  local outcome=ok
  [ $rc -eq 124 ] || [ $rc -eq 137 ] && outcome="timeout (${limit}s)"
  [ $rc -ne 0 ] && [ "$outcome" = ok ] && outcome="failed ($rc)"
  [ $rc -ne 0 ] && status=1
  printf '%s\t%s\t%ss\n' "$name" "$outcome" "$((SECONDS - start))" >> "$steps"
  return $rc
}
skip() { printf '%s\t%s\t-\n' "$1" "skipped: $2" >> "$steps"; }

# 1. Preflight.
gpu=$(nvidia-smi --query-gpu=name,driver_version,memory.total,compute_cap --format=csv,noheader 2>/dev/null | head -n1)
arch=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | head -n1 | tr -d ' .')
arch=${LOOM_CUDA_ARCH:-${arch:-90}}
nvcc_path=$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)
sanitizer=$(command -v compute-sanitizer || ls /usr/local/cuda/bin/compute-sanitizer 2>/dev/null || true)
have_header() { for d in /usr/include /usr/local/cuda/include /usr/local/include; do [ -f "$d/$1" ] && return 0; done; return 1; }
# GPU images often carry NCCL and cuDNN only as PyTorch's pip wheels (nvidia/nccl, nvidia/cudnn in
# site-packages, with libnccl.so.2 but no libnccl.so): give CMake a prefix with the unversioned name.
wheel_prefix() {  # wheel_prefix nccl|cudnn HEADER LIBRARY: prints a prefix FindNCCL/FindCUDNN accept
  local pkg py dir
  py=$(command -v python3) || return 1
  dir=$("$py" -c "import nvidia, os; print(next(os.path.join(p, '$1') for p in nvidia.__path__ if os.path.isdir(os.path.join(p, '$1'))))" 2>/dev/null) || return 1
  [ -f "$dir/include/$2" ] || return 1
  pkg=/tmp/loom-gpu-deps/$1
  mkdir -p "$pkg/lib"
  ln -sfn "$dir/include" "$pkg/include"
  for lib in "$dir"/lib/*.so*; do ln -sf "$lib" "$pkg/lib/"; done
  [ -e "$pkg/lib/lib$3.so" ] || ln -sf "$(ls "$dir"/lib/lib$3.so.* | head -n1)" "$pkg/lib/lib$3.so"
  echo "$pkg"
}
if ! have_header nccl.h && [ -z "${NCCL_HOME:-}" ]; then NCCL_HOME=$(wheel_prefix nccl nccl.h nccl) && export NCCL_HOME; fi
if ! have_header cudnn.h && [ -z "${CUDNN_HOME:-}" ]; then CUDNN_HOME=$(wheel_prefix cudnn cudnn.h cudnn) && export CUDNN_HOME; fi
for prefix in ${NCCL_HOME:-} ${CUDNN_HOME:-}; do export LD_LIBRARY_PATH="$prefix/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"; done
{
  echo "GPU: ${gpu:-none (nvidia-smi found no GPU)}"
  echo "CUDA architecture: $arch; nvcc: $nvcc_path ($("$nvcc_path" --version 2>/dev/null | tail -n1))"
  have_header nccl.h && echo "NCCL: nccl.h found" || echo "NCCL: ${NCCL_HOME:+from $NCCL_HOME}${NCCL_HOME:-nccl.h missing}"
  have_header cudnn.h && echo "cuDNN: cudnn.h found" || echo "cuDNN: ${CUDNN_HOME:+from $CUDNN_HOME}${CUDNN_HOME:-cudnn.h missing}"
  echo "compute-sanitizer: ${sanitizer:-missing}"
  echo "cores: $(nproc)"
} | tee -a "$summary" > "$out/preflight.log"
printf '%s\t%s\t-\n' preflight "${gpu:+GPU found}${gpu:-no GPU: rehearsal}" >> "$steps"

# 2. Build only what the steps run.
generator=(); command -v ninja >/dev/null && generator=(-G Ninja)
targets=(loom_cuda_tests loom_smoke train_gpt loom-topo gemm_bench kernel_bench attention_bench alloc_bench train_bench
         allreduce_bench ddp_bench)
build_script="cmake -S '$root' -B '$build' ${generator[*]} -DCMAKE_BUILD_TYPE=Release -DLOOM_MPI=OFF \
  -DCMAKE_CUDA_COMPILER='$nvcc_path' -DCMAKE_CUDA_ARCHITECTURES='$arch' -DCMAKE_PREFIX_PATH='$root/.carry/usr' &&
  grep -q 'define LOOM_WITH_CUDA 1' '$build/include/loom/config.hpp' &&
  cmake --build '$build' --parallel $(nproc) --target ${targets[*]}"
if ! step build "${LOOM_GPU_BUILD_SECONDS:-420}" bash -c "$build_script"; then
  echo "build failed (or CUDA was not enabled):" >> "$summary"
  tail -30 "$out/build.log" >> "$summary"
  exit 1
fi
if [ -z "$gpu" ] && [ "${LOOM_GPU_CHECK_REHEARSE:-0}" != 1 ]; then
  for name in cuda-tests smoke gemm train-b8 telemetry train_gpt attention kernels train-b8-fused train-b16 ddp allreduce alloc \
      topology memcheck; do
    skip "$name" "no GPU"
  done
  echo "no GPU here: the build is rehearsed, nothing ran on a GPU (LOOM_GPU_CHECK_REHEARSE=1 runs every step anyway)" >> "$summary"
  exit 0
fi

# 3. The cuda tests in one process (one CUDA start-up instead of one per case), each case timed;
# a stuck NCCL call fails in 60 s rather than the default 5 minutes.
export LOOM_COMM_TIMEOUT_MS=${LOOM_COMM_TIMEOUT_MS:-60000}
step cuda-tests 150 "$build/tests/cuda/loom_cuda_tests" --durations yes
grep -E "passed|failed|FAILED|^[0-9.]+ s: " "$out/cuda-tests.log" | tail -60 >> "$summary"

step smoke 30 "$build/examples/smoke/loom_smoke"
grep -E "FAILED|smoke test" "$out/smoke.log" >> "$summary"

# 4-5. Benchmarks, the matrix products and a GPT-2 step first: tables into the summary, JSON into OUTDIR.
bench() {  # step-name seconds benchmark args...
  local name=$1 limit=$2 program=$3; shift 3
  step "$name" "$limit" "$build/benchmarks/$program" "$@" --json "$out/$name.json"
  echo "== $name" >> "$summary"
  grep -vE "^ *$" "$out/$name.log" 2>/dev/null | tail -40 >> "$summary"
}
gpt2=(--device cuda:0 --precision bf16 --layers 12 --heads 12 --channels 768 --context 1024 --vocab 50257 --steps 10
      --warmup 2 --peak-shape 4096)
bench gemm 170 gemm_bench --device cuda:0 --repeats 20 --precisions tf32,bf16,fp16 --layouts NN,TN,NT \
  --shapes 4096,8192,8192x2304x768,8192x768x3072,8192x3072x768,768x768x8192
bench train-b8 75 train_bench "${gpt2[@]}" --batch 8
# The telemetry's cost on the step (issue 30: timers <= 1%, trace <= 2%), NVML the real one here.
bench telemetry 90 train_bench --device cuda:0 --precision bf16 --layers 12 --heads 12 --channels 768 --context 1024 \
  --vocab 50257 --batch 8 --steps 40 --warmup 3 --peak-shape 4096 --telemetry off,phases,trace,nvml

# 6. The example, briefly.
step train_gpt 60 "$build/examples/train_gpt/train_gpt" --device cuda:0 --precision bf16 --steps 300 --log-every 100
echo "== train_gpt" >> "$summary"
grep -E "^step|^eval|model state" "$out/train_gpt.log" >> "$summary"

# 7. The kernels one by one, the other attention and batch, one-GPU communication.
bench attention 45 attention_bench --device cuda:0 --dtype bf16 --batch 8 --context 1024 --heads 12 --head-size 64 \
  --repeats 10
bench kernels 45 kernel_bench --device cuda:0 --repeats 20 --rows 16384 --channels 768
bench train-b8-fused 60 train_bench "${gpt2[@]}" --batch 8 --attention fused
bench train-b16 75 train_bench "${gpt2[@]}" --batch 16
bench ddp 60 ddp_bench --device cuda --precision bf16 --workloads gpt2-124m --ranks 1 --steps 10 --warmup 2
bench allreduce 45 allreduce_bench -b 1K -e 256M -f 4 -n 20 --rounds 5
bench alloc 20 alloc_bench --device cuda:0
step topology 20 "$build/examples/loom_topo/loom-topo" -b 1K -e 1G -f 16 --dump "$out/topology.json"
# The benchmark suite's GPU section (benchmarks/suite, as scripts/bench.sh --gpu runs it): OUTDIR/suite/
# gets results.json and report.md with its plots from the first GPU run.
step suite 100 /usr/bin/python3 "$root/benchmarks/suite/bench.py" --smoke --gpu --build "$build" --out "$out/suite" \
  --jobs gpu-gemm,gpu-attention,gpu-kernels,gpu-allreduce,gpu-train
echo "== suite (report: suite/report.md)" >> "$summary"
grep -E "^\| (GPU|GEMM|attention|all_reduce|GPT)" "$out/suite/report.md" 2>/dev/null | head -24 >> "$summary"

# 8. Memory errors in the kernels, last: the slowest step, and the one a short lease can spare.
if [ -n "$sanitizer" ]; then
  step memcheck 150 "$sanitizer" --tool memcheck --error-exitcode 3 "$build/tests/cuda/loom_cuda_tests" "[kernels]"
  grep -E "ERROR SUMMARY|passed|failed" "$out/memcheck.log" | tail -5 >> "$summary"
else
  skip memcheck "no compute-sanitizer"
fi
exit $status

#!/usr/bin/env bash
# Sets up loom and runs its main program: installs dependencies, builds examples/train_gpt and
# trains a small GPT on the built-in 2-digit addition task, data-parallel on the CPU: `mpirun -np
# 2`, two processes of one thread each, gradients averaged by loom's GradientReducer over MPI
# (about a minute on 2 cores once built). Without MPI (LOOM_MPI=OFF, or no mpirun) it trains in
# one process. Extra arguments go to train_gpt (see its --help).
# Where it builds: on a machine without an NVIDIA GPU, only what the CPU run needs (LOOM_CUDA=OFF:
# no CUDA kernels to compile; no tests or benchmarks, so only the packages that needs: install-deps.sh
# --run) into build-quickstart/, so that the test command's full build in build/ is left as it is;
# with a GPU, the CUDA path and everything else too, into build/. LOOM_CUDA and LOOM_BUILD_DIR
# override both choices.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
deps=()  # install-deps.sh's argument: everything, or --run
if [ -z "${LOOM_CUDA:-}" ] && ! { command -v nvidia-smi >/dev/null && nvidia-smi -L >/dev/null 2>&1; }; then
  export LOOM_CUDA=OFF
  export LOOM_BUILD_DIR=${LOOM_BUILD_DIR:-$root/build-quickstart}
  export LOOM_BUILD_TESTS=${LOOM_BUILD_TESTS:-OFF} LOOM_BUILD_BENCHMARKS=${LOOM_BUILD_BENCHMARKS:-OFF}
  deps=(--run)
  echo "quickstart: no NVIDIA GPU here: building the CPU path only, into ${LOOM_BUILD_DIR#"$root"/}"
fi
export LOOM_BUILD_DIR=${LOOM_BUILD_DIR:-$root/build}
build_dir=$LOOM_BUILD_DIR

"$root/scripts/install-deps.sh" "${deps[@]}"
"$root/scripts/configure.sh"
cmake --build "$build_dir" --parallel "$(nproc)" --target train_gpt
train_gpt=("$build_dir/examples/train_gpt/train_gpt" "$@")
case " $* " in *" --log-every"*) ;; *) train_gpt+=(--log-every 100) ;; esac  # unless the caller chose

if [ "${LOOM_MPI:-AUTO}" != OFF ] && command -v mpirun >/dev/null; then
  if [ "$(id -u)" -eq 0 ]; then  # Open MPI refuses root unless told it is intended (containers)
    export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
  fi
  # Containers often forbid the cross-process memory attach Open MPI's shared-memory transport tries.
  export OMPI_MCA_btl_vader_single_copy_mechanism=${OMPI_MCA_btl_vader_single_copy_mechanism:-none}
  echo "quickstart: mpirun -np 2 ${train_gpt[*]}"
  export OMP_NUM_THREADS=1  # one thread per rank: 2 ranks on 2 cores
  exec mpirun -np 2 --oversubscribe -x OMP_NUM_THREADS "${train_gpt[@]}"
fi
echo "quickstart: no MPI in this build: training in one process"
exec "${train_gpt[@]}"

#!/usr/bin/env bash
# Installs every Debian package loom needs to build, test and run its examples and benchmarks;
# with --run, only what building the library and running its examples needs (the quickstart's
# CPU build: no test framework, benchmark baselines, emulator or fuzzing compiler).
# Idempotent: installs only what is missing. Works as root or through sudo.
# The CUDA toolkit (nvcc, cuBLAS, NCCL, cuDNN) is not a Debian package: loom uses it when present.
set -euo pipefail

packages=(
  build-essential cmake ninja-build git pkg-config
  libcli11-dev nlohmann-json3-dev zlib1g-dev libsodium-dev
  libopenmpi-dev openmpi-bin libgloo-dev
)
case "${1:-}" in
  --run) ;;
  "") packages+=(ccache libeigen3-dev catch2 libopenblas-dev qemu-user python3 python3-pip python3-prometheus-client python3-matplotlib python3-jsonschema python3-torch clang libclang-rt-14-dev) ;;
  *) echo "install-deps: unknown argument '$1' (usage: install-deps.sh [--run])" >&2; exit 2 ;;
esac

missing=()
for package in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$package")
  fi
done
# The tests' Python references that Debian does not package: Hugging Face tokenizers (the BPE
# tokenizer's reference), from PyPI into Debian's interpreter, which the tests run.
python_packages=()
if [ "${1:-}" != "--run" ]; then
  for module in tokenizers; do
    /usr/bin/python3 -c "import $module" 2>/dev/null || python_packages+=("$module")
  done
fi
# Hugging Face transformers (the model import's reference, GPT2LMHeadModel) in a directory of its
# own, tests/examples put it first on PYTHONPATH: the last release that runs on Debian's PyTorch
# 1.13 (4.46) wants older tokenizers and huggingface_hub than the ones above, and pip must not
# replace Debian's numpy under torch, so exactly these versions go there, without dependencies.
reference_dir="${LOOM_PYTHON_REFERENCE_DIR:-/opt/loom/python-reference}"
reference_packages=(transformers==4.46.3 tokenizers==0.20.3 huggingface_hub==0.26.5 safetensors==0.4.5 regex==2024.11.6
  requests==2.32.3 urllib3==2.2.3 idna==3.10 certifi==2024.8.30 charset-normalizer==3.4.0 pyyaml==6.0.2
  packaging==24.2 filelock==3.16.1 tqdm==4.67.1 fsspec==2024.10.0 typing_extensions==4.12.2)
install_python() {
  if [ ${#python_packages[@]} -gt 0 ]; then
    echo "install-deps: pip installing ${python_packages[*]}"
    $sudo /usr/bin/python3 -m pip install -q --break-system-packages --root-user-action=ignore "${python_packages[@]}"
  fi
  [ "${1:-}" = "--run" ] && return 0
  if ! PYTHONPATH="$reference_dir" /usr/bin/python3 -c "import transformers, safetensors; assert transformers.__version__ == '4.46.3'" 2>/dev/null; then
    echo "install-deps: pip installing transformers 4.46.3 into $reference_dir"
    $sudo /usr/bin/python3 -m pip install -q --root-user-action=ignore --no-deps --upgrade --target "$reference_dir" \
      "${reference_packages[@]}"
  fi
}
if [ ${#missing[@]} -eq 0 ]; then
  echo "install-deps: all ${#packages[@]} packages are installed"
  sudo=""
  [ "$(id -u)" -ne 0 ] && sudo="sudo"
  install_python "${1:-}"
  exit 0
fi

sudo=""
if [ "$(id -u)" -ne 0 ]; then
  if ! command -v sudo >/dev/null; then
    echo "install-deps: need root or sudo to install: ${missing[*]}" >&2
    exit 1
  fi
  sudo="sudo"
fi
echo "install-deps: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -q
$sudo apt-get install -y -q "${missing[@]}"
install_python "${1:-}"

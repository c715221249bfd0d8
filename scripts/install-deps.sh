#!/usr/bin/env bash
# Installs every Debian package loom needs to build, test and run its examples and benchmarks;
# with --run, only what building the library and running its examples needs (the quickstart's
# CPU build: no test framework, benchmark baselines, emulator or fuzzing compiler).
# Idempotent: installs only what is missing. Works as root or through sudo.
# The CUDA toolkit (nvcc, cuBLAS, NCCL, cuDNN) is not a Debian package: loom uses it when present.
set -euo pipefail

packages=(
  build-essential cmake ninja-build git pkg-config
  libcli11-dev nlohmann-json3-dev zlib1g-dev
  libopenmpi-dev openmpi-bin
)
case "${1:-}" in
  --run) ;;
  "") packages+=(libeigen3-dev catch2 libopenblas-dev qemu-user python3 python3-pip python3-prometheus-client python3-matplotlib clang libclang-rt-14-dev) ;;
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
install_python() {
  [ ${#python_packages[@]} -eq 0 ] && return 0
  echo "install-deps: pip installing ${python_packages[*]}"
  $sudo /usr/bin/python3 -m pip install -q --break-system-packages --root-user-action=ignore "${python_packages[@]}"
}
if [ ${#missing[@]} -eq 0 ]; then
  echo "install-deps: all ${#packages[@]} packages are installed"
  sudo=""
  [ "$(id -u)" -ne 0 ] && sudo="sudo"
  install_python
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
install_python

#!/usr/bin/env bash
# Proves, without a GPU, that loom's tensor-core GEMM kernels really use tensor-core instructions.
# With cuobjdump it disassembles the built object and requires HMMA instructions in
# the WMMA GEMM kernels for every SASS architecture in it. Toolkits without a disassembler (such
# as this project's development machines) fall back to the PTX the build emits for the same
# source, which must contain mma.sync inside those kernels; the output says which check ran.
# usage: scripts/check-sass.sh BUILD_DIR
set -euo pipefail
build=${1:?usage: scripts/check-sass.sh BUILD_DIR}
kernel_pattern='wmma_gemm_kernel'

cuobjdump=$(command -v cuobjdump || true)
[ -n "$cuobjdump" ] || [ ! -x /usr/local/cuda/bin/cuobjdump ] || cuobjdump=/usr/local/cuda/bin/cuobjdump
object=$(find "$build" -name 'gemm_wmma.cu.o' | head -n1)
[ -n "$object" ] || { echo "check-sass: no gemm_wmma.cu.o under $build (built without CUDA?)"; exit 1; }

if [ -n "$cuobjdump" ]; then
  sass=$("$cuobjdump" -sass "$object")
  archs=$(printf '%s\n' "$sass" | grep -oE 'arch = sm_[0-9]+a?' | sort -u | awk '{print $3}' || true)
  [ -n "$archs" ] || { echo "check-sass: no SASS in $object"; exit 1; }
  status=0
  for arch in $archs; do
    # HMMA lines inside the WMMA GEMM kernel functions of this architecture's cubin.
    count=$(printf '%s\n' "$sass" | awk -v arch="$arch" -v pat="$kernel_pattern" '
      /arch = sm_/ { in_arch = ($3 == arch) }
      /Function :/ { in_kernel = in_arch && index($0, pat) > 0 }
      in_kernel && /HMMA/ { n++ }
      END { print n + 0 }')
    echo "check-sass: $arch: $count HMMA instructions in $kernel_pattern"
    [ "$count" -gt 0 ] || status=1
  done
  exit $status
fi

ptx=$(find "$build" -name 'gemm_wmma.ptx' | head -n1)
[ -n "$ptx" ] || { echo "check-sass: no disassembler and no gemm_wmma.ptx under $build"; exit 1; }
count=$(awk -v pat="$kernel_pattern" '
  /\.entry/ { in_kernel = index($0, pat) > 0 }
  in_kernel && /mma\.sync/ { n++ }
  END { print n + 0 }' "$ptx")
echo "check-sass: no cuobjdump in this toolkit; checked PTX instead: $count mma.sync in $kernel_pattern ($ptx)"
[ "$count" -gt 0 ]

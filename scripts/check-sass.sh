#!/usr/bin/env bash
# Proves, without a GPU, that loom's tensor-core GEMM kernels really use tensor-core instructions.
# With cuobjdump it disassembles the built objects and requires HMMA instructions in every
# instantiation of each GEMM kernel, for every SASS architecture in the object. Toolkits without a
# disassembler (such as this project's development machines) fall back to the PTX the build emits
# for the same sources, in which every instantiation must contain mma.sync; the output says which
# check ran.
# usage: scripts/check-sass.sh BUILD_DIR
set -euo pipefail
build=${1:?usage: scripts/check-sass.sh BUILD_DIR}
# source file stem : kernel name
kernels="gemm_wmma:wmma_gemm_kernel gemm_mma:mma_pipeline_gemm_kernel"

cuobjdump=$(command -v cuobjdump || true)
[ -n "$cuobjdump" ] || [ ! -x /usr/local/cuda/bin/cuobjdump ] || cuobjdump=/usr/local/cuda/bin/cuobjdump

# Reads a listing on stdin; prints "entries without_mma" for the functions matching $1, where a
# function starts at a line matching $2 and an mma is a line matching $3.
count_entries() {
  awk -v pat="$1" -v start="$2" -v mma="$3" '
    $0 ~ start { if (in_kernel && !found) missing++; in_kernel = index($0, pat) > 0; if (in_kernel) entries++; found = 0 }
    in_kernel && $0 ~ mma { found = 1 }
    END { if (in_kernel && !found) missing++; print entries + 0, missing + 0 }'
}

status=0
for entry in $kernels; do
  stem=${entry%%:*} kernel=${entry#*:}
  if [ -n "$cuobjdump" ]; then
    object=$(find "$build" -name "$stem.cu.o" -path '*loom_cuda_kernels*' | head -n1)
    [ -n "$object" ] || { echo "check-sass: no $stem.cu.o under $build (built without CUDA?)"; exit 1; }
    sass=$("$cuobjdump" -sass "$object")
    archs=$(printf '%s\n' "$sass" | grep -oE 'arch = sm_[0-9]+a?' | sort -u | awk '{print $3}' || true)
    [ -n "$archs" ] || { echo "check-sass: no SASS in $object"; exit 1; }
    for arch in $archs; do
      read -r entries missing < <(printf '%s\n' "$sass" | awk -v arch="$arch" '
          /arch = sm_/ { keep = ($3 == arch) } keep' | count_entries "$kernel" 'Function :' 'HMMA')
      echo "check-sass: $arch: $kernel: $entries instantiations, $missing without HMMA"
      if [ "$entries" -eq 0 ] || [ "$missing" -ne 0 ]; then status=1; fi
    done
  else
    ptx=$(find "$build" -name "$stem.ptx" | head -n1)
    [ -n "$ptx" ] || { echo "check-sass: no disassembler and no $stem.ptx under $build"; exit 1; }
    read -r entries missing < <(count_entries "$kernel" '\\.entry' 'mma\\.sync' < "$ptx")
    echo "check-sass: no cuobjdump in this toolkit; checked PTX instead: $kernel: $entries instantiations," \
         "$missing without mma.sync ($ptx)"
    if [ "$entries" -eq 0 ] || [ "$missing" -ne 0 ]; then status=1; fi
  fi
done
exit $status

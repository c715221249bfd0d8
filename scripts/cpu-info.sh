#!/usr/bin/env bash
# Prints the CPU this machine has and its x86-64 level (v2: SSE4.2/POPCNT; v3: AVX2/FMA/BMI2;
# v4: AVX-512 F/BW/CD/DQ/VL), which decides the CPU kernel variant loom runs (portable, avx2,
# avx512; LOOM_CPU_ISA overrides). CI prints it first, so a failure can be traced to the machine.
set -euo pipefail
field() { grep -m1 "^$1[[:space:]]*:" /proc/cpuinfo 2>/dev/null | cut -d: -f2- | sed 's/^ *//' || true; }
model="$(field 'model name') (vendor $(field vendor_id), family $(field 'cpu family'), model $(field model))"
flags=" $(grep -m1 '^flags' /proc/cpuinfo 2>/dev/null | cut -d: -f2-) "
has() { for f in "$@"; do [[ "$flags" == *" $f "* ]] || return 1; done; }
level="x86-64"
variant="portable"
if has sse4_2 popcnt ssse3; then level="x86-64-v2"; fi
if [ "$level" = "x86-64-v2" ] && has avx avx2 fma bmi1 bmi2 f16c movbe abm; then level="x86-64-v3"; variant="avx2"; fi
if [ "$level" = "x86-64-v3" ] && has avx512f avx512bw avx512cd avx512dq avx512vl; then level="x86-64-v4"; variant="avx512"; fi
echo "cpu: ${model} $(uname -m), $(nproc) cores, ${level}: loom's CPU kernels run ${LOOM_CPU_ISA:-$variant}"

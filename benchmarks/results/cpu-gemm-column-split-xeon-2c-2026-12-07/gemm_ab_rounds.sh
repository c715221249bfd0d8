#!/bin/bash
# usage: gemm_ab_rounds.sh ROUNDS THREADS OUTDIR
# The issue's NN table with the library before (/tmp/ab/base) and after (/tmp/ab/new) alternating in
# each round, AVX2 and AVX-512 (ISAS="avx2" runs one), against OpenBLAS (Haswell and SkylakeX kernels)
# in the same run.
rounds=$1; T=$2; out=$3; mkdir -p $out
for r in $(seq $rounds); do for isa in ${ISAS:-avx2 avx512}; do for lib in base new; do
  core=Haswell; [ $isa = avx512 ] && core=SkylakeX
  LD_LIBRARY_PATH=/tmp/ab/$lib LOOM_CPU_ISA=$isa OMP_NUM_THREADS=$T OPENBLAS_NUM_THREADS=$T OPENBLAS_CORETYPE=$core \
    /work/main/build/benchmarks/gemm_bench --device cpu --precisions fp32 --isas $isa --repeats 7 \
    --shapes 1024 2048 1024x2304x768 1024x768x768 1024x3072x768 1024x768x3072 \
    --json $out/r${r}_${isa}_t${T}_$lib.json > $out/r${r}_${isa}_t${T}_$lib.txt 2>&1
  echo "r$r $isa t$T $lib: $(grep ' loom ' $out/r${r}_${isa}_t${T}_$lib.txt | awk '{printf "%s %s  ", $1, $8}')"
done; done; done

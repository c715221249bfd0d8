#!/bin/bash
# Rounds of the NN table: loom's AVX2 and AVX-512 variants against OpenBLAS (Haswell and
# SkylakeX kernels), 1 and 2 threads, all in each round. OUT: the raw folder.
cd /work/main
OUT=${OUT:-/tmp/rnn}; mkdir -p $OUT
for r in $(seq 1 ${1:-3}); do for isa in avx2 avx512; do for T in 1 2; do
  core=Haswell; [ $isa = avx512 ] && core=SkylakeX
  LOOM_CPU_ISA=$isa OMP_NUM_THREADS=$T OPENBLAS_NUM_THREADS=$T OPENBLAS_CORETYPE=$core build/benchmarks/gemm_bench --device cpu --precisions fp32 --isas $isa --repeats 7 --shapes 1024 2048 1024x2304x768 1024x768x768 1024x3072x768 1024x768x3072 --json $OUT/r${r}_${isa}_t$T.json > $OUT/r${r}_${isa}_t$T.txt 2>&1
done; done; done
echo done

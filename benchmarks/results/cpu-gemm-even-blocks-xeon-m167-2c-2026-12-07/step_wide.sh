#!/bin/bash
# usage: step_wide.sh THREADS ROUNDS OUTDIR LIB... : train_bench at GPT-2 small's width (1 layer, 12 heads, 768 channels), libraries alternating
T=$1; n=$2; out=$3; shift 3; mkdir -p $out
for r in $(seq $n); do for lib in "$@"; do
  f=$out/${lib}_avx2_t${T}_r$r
  LD_LIBRARY_PATH=/tmp/ab/$lib LOOM_CPU_ISA=avx2 OMP_NUM_THREADS=$T /work/main/build/benchmarks/train_bench --layers 1 --heads 12 --channels 768 --steps 5 --rounds 2 --peer none --json $f.json > $f.txt 2>&1
done; done

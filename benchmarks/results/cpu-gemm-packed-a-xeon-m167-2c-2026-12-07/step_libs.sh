#!/bin/bash
# usage: step_libs.sh ISA THREADS ROUNDS OUTDIR LIB... : train_bench (3 rounds, no peer) with /tmp/ab/LIB, libraries alternating
isa=$1; T=$2; n=$3; out=$4; shift 4; mkdir -p $out
for r in $(seq $n); do for lib in "$@"; do
  f=$out/${lib}_${isa}_t${T}_r$r
  LD_LIBRARY_PATH=/tmp/ab/$lib LOOM_CPU_ISA=$isa OMP_NUM_THREADS=$T /work/main/build/benchmarks/train_bench --rounds 3 --peer none --json $f.json > $f.txt 2>&1
done; done

#!/bin/bash
# usage: step_ab.sh ISA THREADS PAIRS OUTDIR : train_bench (3 rounds, no peer) with the library before
# (/tmp/ab/base) and after (/tmp/ab/new) alternating in pairs.
isa=$1; T=$2; pairs=$3; out=$4; mkdir -p $out
for r in $(seq $pairs); do for lib in base new; do
  f=$out/${lib}_${isa}_t${T}_r$r
  LD_LIBRARY_PATH=/tmp/ab/$lib LOOM_CPU_ISA=$isa OMP_NUM_THREADS=$T /work/main/build/benchmarks/train_bench --rounds 3 --peer none --json $f.json > $f.txt 2>&1
  echo "$isa t$T r$r $lib $(grep -E 'step ms|MFU' $f.txt | tr -s ' ' | tr '\n' ' ')"
done; done

#!/bin/bash
# usage: ab_mfu.sh ISA ROUNDS OUTDIR : train_bench (1 thread, 3 rounds) with /tmp/ab/base and /tmp/ab/new alternating
isa=$1; rounds=$2; out=$3; mkdir -p $out
for r in $(seq $rounds); do
  for lib in base new; do
    LD_LIBRARY_PATH=/tmp/ab/$lib LOOM_CPU_ISA=$isa OMP_NUM_THREADS=1 /work/main/build/benchmarks/train_bench --rounds 3 --peer none --json $out/${lib}_${isa}_r$r.json > $out/${lib}_${isa}_r$r.txt 2>&1
    echo "$isa r$r $lib $(grep -E 'step ms|MFU' $out/${lib}_${isa}_r$r.txt | awk '{printf "%s ", $NF=="" ? $0 : $0}' | tr -s ' ')"
  done
done

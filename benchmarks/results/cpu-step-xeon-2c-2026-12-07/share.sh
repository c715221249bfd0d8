#!/bin/bash
# usage: ISA=.. share.sh ROUNDS SYMBOL_REGEX...: per-symbol perf sample shares, /tmp/ab/old and /tmp/ab/new alternating
R=$1; shift
for r in $(seq $R); do
  for v in old new; do
    LOOM_CPU_ISA=${ISA:-avx512} OMP_NUM_THREADS=1 LD_LIBRARY_PATH=/tmp/ab/$v perf record -q -e cpu-clock -F 2000 -o /tmp/share_$v.data /work/main/build/benchmarks/train_bench --rounds 1 --steps 16 --warmup 1 --peer none > /dev/null 2>&1
    perf report -i /tmp/share_$v.data --no-children --sort symbol --stdio 2>/dev/null | grep -v "^#" > /tmp/share_$v.txt
    line="$v"
    for s in "$@"; do
      line="$line $s=$(grep -E "$s" /tmp/share_$v.txt | awk '{gsub("%","",$1); t+=$1} END {printf "%.2f", t}')"
    done
    echo "$line"
  done
done

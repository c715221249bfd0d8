#!/bin/bash
# usage: ISA=.. T=.. ab_lib.sh ROUNDS [train_bench args]; alternates /tmp/ab/old and /tmp/ab/new
R=$1; shift
for r in $(seq $R); do
  for v in old new; do
    LOOM_CPU_ISA=${ISA:-avx512} OMP_NUM_THREADS=${T:-1} LD_LIBRARY_PATH=/tmp/ab/$v /work/main/build/benchmarks/train_bench --rounds 1 --steps 10 --peer none "$@" --json /tmp/ab_$v.json > /tmp/ab_$v.txt 2>&1
    eval "$v=$(awk '/step ms/{print $4}' /tmp/ab_$v.txt)"; eval "${v}m=$(awk '/MFU vs/{print $6}' /tmp/ab_$v.txt | tr -d %)"
  done
  echo "$old $new $(python3 -c "print(round($new/$old,3))") mfu $oldm $newm"
done | tee /tmp/ab_lib_last.txt
python3 -c "
import statistics
L=[l.split() for l in open('/tmp/ab_lib_last.txt')]
print('median old ms', statistics.median(float(l[0]) for l in L), 'new ms', statistics.median(float(l[1]) for l in L), 'new/old', statistics.median(float(l[2]) for l in L), 'range', min(float(l[2]) for l in L), max(float(l[2]) for l in L), 'MFU old', statistics.median(float(l[4]) for l in L), 'new', statistics.median(float(l[5]) for l in L))"

#!/bin/bash
# usage: bits.sh OUT : 200 train_gpt steps per variant, thread count and blocking; checkpoint MD5
out=$1; : > $out
echo "# 200 train_gpt steps; checkpoint MD5, expected cd90d69eeeb3cbd2bc6808970132d8d0 (c5f7b99 and before)" >> $out
for caches in "" "l1d=32K/8,l2=512K/8"; do for isa in avx2 avx512; do for T in 1 2; do
  d=$(mktemp -d)
  LOOM_CPU_CACHES=$caches LOOM_CPU_ISA=$isa OMP_NUM_THREADS=$T /work/main/build/examples/train_gpt/train_gpt --steps 200 --eval-every 0 --log-every 1000 --checkpoint-dir $d > $d.log 2>&1; rc=$?
  echo "$isa threads $T${caches:+ caches $caches} (rc $rc): $(md5sum $d/step_00000200/rank_00000.safetensors | cut -d' ' -f1)" >> $out
  rm -rf $d $d.log
done; done; done

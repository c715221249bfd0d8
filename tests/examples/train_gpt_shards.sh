#!/usr/bin/env bash
# train_gpt --data shards:GLOB as an operator runs it: three llm.c shards of unequal length (byte
# tokens of this repository's docs, made here) streamed by 2 ranks with a checkpoint, and resumed
# at 1 rank (ranks x micro-batches x batch kept at 16), which continues the job's data stream: its
# losses are the uninterrupted run's (bit for bit at 1 rank; within 1e-3 after 2 ranks, see below); the
# loss falls; a glob that matches nothing, a damaged shard and tokens outside the vocabulary each
# end the run with an error naming them.
# usage: train_gpt_shards.sh TRAIN_GPT WORK_DIR [MPIEXEC]
set -uo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
usage="usage: train_gpt_shards.sh TRAIN_GPT WORK_DIR [MPIEXEC]"
train_gpt=$(realpath "${1:?$usage}")
work=${2:?$usage}
mpiexec=${3:-}
rm -rf "$work" && mkdir -p "$work/shards" && cd "$work" || exit 1
# shellcheck source=tests/examples/train_gpt_runs.sh
source "$here/train_gpt_runs.sh"
export OMP_NUM_THREADS=1
python=/usr/bin/python3
[ -x "$python" ] || python=python3
"$python" - "$here/../../README.md" "$here/../../docs/ARCHITECTURE.md" <<'PY' || { echo "FAIL: making the shards"; exit 1; }
import struct, sys
text = b"".join(open(p, "rb").read() for p in sys.argv[1:])
cuts = [0, len(text) // 2, len(text) * 5 // 6, len(text)]
for i in range(3):
    tokens = text[cuts[i]:cuts[i + 1]]
    with open(f"shards/train_{i:03d}.bin", "wb") as f:
        f.write(struct.pack("<256i", 20240520, 1, len(tokens), *([0] * 253)))
        f.write(struct.pack(f"<{len(tokens)}H", *tokens))
PY
launch=() ranks=1 batch=(--batch 8 --grad-accum 2)
if [ -n "$mpiexec" ]; then
  launch=("$mpiexec" -x OMP_NUM_THREADS -np 2) ranks=2 batch=(--batch 8)
fi
loss_at() { sed -nE "s/^step +$1\/[0-9]+ \| loss ([0-9.]+) .*/\1/p" "$2"; }
common=(--data "shards:shards/train_*.bin" --steps 60 --log-every 10 --eval-every 0 --checkpoint-dir run
        --checkpoint-every 30 --prefetch 3)
if "${launch[@]}" "$train_gpt" "${common[@]}" "${batch[@]}" > run.log 2>&1; then
  first=$(loss_at 10 run.log) last=$(loss_at 60 run.log)
  if grep -qE "^data: 3 llm.c shards \([0-9]+ tokens, mapped\), [0-9]+ windows of 65 tokens to train on, shuffled per epoch, [0-9]+ held out; 3 batches prefetched$" run.log &&
     grep -qE "^step +60/60 .*\| data [0-9.]+ ms$" run.log &&
     awk -v a="$first" -v b="$last" 'BEGIN { exit !(b < a - 0.5) }'; then
    pass "$ranks rank(s) stream the shards and learn: loss $first at step 10, $last at step 60"
  else
    fail "the streamed run: loss $first -> $last; $(grep -E '^(data|step +60)' run.log)"
  fi
else
  fail "the streamed run exited $?: $(tail -5 run.log)"
fi
# Resumed at one rank from step 30: 2 micro-batches of 8 keep the 16 sequences per step.
rm -rf run/step_00000060
losses() { for s in 40 50 60; do loss_at $s "$1"; done | tr '\n' ' '; }
# One rank's two micro-batches are the 1-rank job's own configuration: the same bits. Against 2 ranks
# they are the same data but not the same sums: the ranks' gradients are averaged after each one's
# GEMM passes (dW = dY^T X runs over the 512 tokens in passes of 384), while one rank adds the second
# micro-batch's passes into the first's gradient, so the runs agree to ~1e-7 of each update
# (docs/ARCHITECTURE.md, DDP against one process) and drift apart in the last printed digit within
# 30 steps on some data (1e-4 at step 60 on this repository's docs of 2026-12-06). 1e-3 is allowed:
# the losses here fall by 0.1-0.4 every 10 steps, and a resume elsewhere in the stream trains on other
# batches.
tolerance=0; [ "$ranks" -gt 1 ] && tolerance=0.001
same_losses() {  # A_LOG B_LOG: the losses at 40, 50 and 60, each within $tolerance
  awk -v t="$tolerance" -v a="$(losses "$1")" -v b="$(losses "$2")" 'BEGIN {
    if (split(a, x, " ") != 3 || split(b, y, " ") != 3) exit 1
    for (i = 1; i <= 3; ++i) if (x[i] - y[i] > t + 1e-9 || y[i] - x[i] > t + 1e-9) exit 1
  }'
}
if "$train_gpt" "${common[@]}" --batch 8 --grad-accum 2 > resumed.log 2>&1 &&
   grep -qE "resum.*step 30|step 30.*resum" resumed.log && ! grep -qE "^step +(10|20|30)/" resumed.log &&
   [ -n "$(loss_at 60 resumed.log)" ] && same_losses resumed.log run.log; then
  pass "one rank resumes the $ranks-rank job at step 30 on the same data: losses $(losses resumed.log)at steps 40-60, against $(losses run.log)uninterrupted (within $tolerance)"
else
  fail "the resume at 1 rank: losses $(losses resumed.log)against $(losses run.log); $(grep -vE '^ ' resumed.log | tail -4)"
fi
expect_error() {  # NAME PATTERN ARGS...: the run fails before a step, with PATTERN in its error
  local name=$1 pattern=$2; shift 2
  if "$train_gpt" --steps 5 --eval-every 0 "$@" > "$name.log" 2>&1; then
    fail "$name: the run was accepted"
  elif grep -qE "$pattern" "$name.log" && ! grep -qE "^step " "$name.log"; then
    pass "$name: $(grep -E "$pattern" "$name.log" | head -1)"
  else
    fail "$name: $(tail -3 "$name.log")"
  fi
}
expect_error "a glob that matches nothing" "'shards/valid_\*.bin' matches no file" --data 'shards:shards/valid_*.bin'
head -c 3000 shards/train_002.bin > shards/train_003.bin
expect_error "a truncated shard" "token shard 'shards/train_003.bin' declares [0-9]+ tokens .* \(truncated\)" \
  --data 'shards:shards/train_*.bin'
rm shards/train_003.bin
expect_error "tokens outside the vocabulary" "token [0-9]+ at position [0-9]+ is outside the vocabulary \[0, 64\)" \
  --data 'shards:shards/train_*.bin' --vocab 64
[ "$failures" -eq 0 ] && echo "all shard streaming checks passed"
exit "$failures"

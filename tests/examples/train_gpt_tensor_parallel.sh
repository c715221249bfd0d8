#!/usr/bin/env bash
# train_gpt --tp 2 --zero 1 in a 4-rank job (2 data x 2 tensor), as an operator meets it:
#  1. it prints the mesh (which ranks form each tensor and data group, and on which host) and the
#     per-rank model state by category, and learns the addition task to the accuracy DDP reaches on
#     the same 4 ranks with the same global batch and steps;
#  2. its checkpoint (every rank writes its blocks) resumes in a 2-rank DDP job, which continues
#     from the step it was saved at and keeps the accuracy;
#  3. --tp that does not divide the ranks is refused by name with the usage exit code (2).
# usage: train_gpt_tensor_parallel.sh TRAIN_GPT WORK_DIR MPIEXEC
set -uo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
usage="usage: train_gpt_tensor_parallel.sh TRAIN_GPT WORK_DIR MPIEXEC"
train_gpt=$(realpath "${1:?$usage}")
work=${2:?$usage}
mpiexec=${3:?$usage}
rm -rf "$work" && mkdir -p "$work" && cd "$work" || exit 1
# shellcheck source=tests/examples/train_gpt_runs.sh
source "$here/train_gpt_runs.sh"
export OMP_NUM_THREADS=1  # 4 ranks on 2 cores: one thread each
mpi=("$mpiexec" --oversubscribe -x OMP_NUM_THREADS)
steps=3000
run=(--steps $steps --eval-every 0 --log-every 500)

accuracy() { sed -nE 's/^eval step [0-9]+ \| loss [0-9.]+ \| exact-match accuracy ([0-9.]+)%$/\1/p' "$1" | tail -1; }

# 1. Tensor parallelism against DDP: 16 sequences per step either way.
"${mpi[@]}" -np 4 "$train_gpt" --tp 2 --zero 1 --batch 8 "${run[@]}" --checkpoint-dir tp > tp.log 2>&1 ||
  fail "the --tp 2 --zero 1 run failed: $(tail -3 tp.log)"
"${mpi[@]}" -np 4 "$train_gpt" --batch 4 "${run[@]}" > ddp.log 2>&1 || fail "the DDP run failed: $(tail -3 ddp.log)"
if grep -qE "^mesh: 2 data x 2 tensor; tensor groups \[0 1\] on [^ ]+ \[2 3\] on [^ ]+; data groups \[0 2\] on [^ ]+ \[1 3\]" tp.log &&
   grep -qE "^ZeRO-1, model state [0-9.]+ MiB per rank \(predicted [0-9.]+ MiB\): values [0-9.]+, gradients" tp.log; then
  pass "the start-up lines show the mesh and the per-rank model state"
else
  fail "tp.log lacks the mesh or model-state line: $(head -8 tp.log)"
fi
tp_accuracy=$(accuracy tp.log)
ddp_accuracy=$(accuracy ddp.log)
if [ -n "$tp_accuracy" ] && [ -n "$ddp_accuracy" ] && awk -v t="$tp_accuracy" -v d="$ddp_accuracy" 'BEGIN { exit !(t >= d) }'; then
  pass "--tp 2 --zero 1 reaches ${tp_accuracy}% exact-match accuracy after $steps steps; DDP ${ddp_accuracy}%"
else
  fail "--tp 2 --zero 1 reached '${tp_accuracy}'% against DDP's '${ddp_accuracy}'%"
fi

# 2. Its checkpoint continues in a 2-rank DDP job (the same 16 sequences per step).
"${mpi[@]}" -np 2 "$train_gpt" --batch 8 --steps $((steps + 10)) --eval-every 0 --log-every 5 --checkpoint-dir tp \
  > resumed.log 2>&1 || fail "resuming the tensor-parallel checkpoint with DDP failed: $(tail -3 resumed.log)"
resumed_accuracy=$(accuracy resumed.log)
if grep -qE "^resumed from tp/step_0*$steps at step $steps$" resumed.log && grep -qE "^step +$((steps + 10))/" resumed.log &&
   [ "$resumed_accuracy" = "$tp_accuracy" ]; then
  pass "a 2-rank DDP job resumes the --tp 2 checkpoint at step $steps and keeps ${resumed_accuracy}%"
else
  fail "the DDP job did not resume the tensor-parallel checkpoint as expected: $(grep -E '^resumed|^eval' resumed.log)"
fi

# 3. A tensor group that does not divide the ranks.
"${mpi[@]}" -np 4 "$train_gpt" --tp 3 --steps 2 > bad.log 2>&1
code=$?
if [ $code -eq 2 ] && grep -q "tensor groups of 3" bad.log; then
  pass "--tp 3 at 4 ranks is refused by name (exit 2)"
else
  fail "--tp 3 at 4 ranks: exit $code, $(grep -m1 train_gpt bad.log)"
fi

echo "$failures failure(s)"
[ $failures -eq 0 ]

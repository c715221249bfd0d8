#!/usr/bin/env bash
# train_gpt --activation-checkpointing full (every block, and every second block) and selective train
# the same bits as without it: the same loss at every step and the same final checkpoint file, the
# start-up line says what is recomputed, and an unknown mode is refused by name.
# usage: train_gpt_checkpointing.sh TRAIN_GPT WORK_DIR
set -uo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
usage="usage: train_gpt_checkpointing.sh TRAIN_GPT WORK_DIR"
train_gpt=$(realpath "${1:?$usage}")
work=${2:?$usage}
rm -rf "$work" && mkdir -p "$work" && cd "$work" || exit 1
# shellcheck source=tests/examples/train_gpt_runs.sh
source "$here/train_gpt_runs.sh"
steps=30
run=(--steps $steps --eval-every 0 --eval-batches 1 --log-every 1 --layers 3)

"$train_gpt" "${run[@]}" --checkpoint-dir none > none.log 2>&1 || fail "the run without checkpointing failed: $(tail -3 none.log)"
"$train_gpt" "${run[@]}" --activation-checkpointing full --checkpoint-dir full > full.log 2>&1 ||
  fail "the run with --activation-checkpointing full failed: $(tail -3 full.log)"
"$train_gpt" "${run[@]}" --activation-checkpointing full --activation-checkpointing-every 2 --checkpoint-dir every2 \
  > every2.log 2>&1 || fail "the run checkpointing every second block failed: $(tail -3 every2.log)"
"$train_gpt" "${run[@]}" --activation-checkpointing selective --checkpoint-dir selective > selective.log 2>&1 ||
  fail "the run with --activation-checkpointing selective failed: $(tail -3 selective.log)"
same_run full_vs_none none.log none full $steps full.log
same_run every2_vs_none none.log none every2 $steps every2.log
same_run selective_vs_none none.log none selective $steps selective.log
if grep -qE "^model: .*, activation checkpointing full \(every block\)$" full.log &&
   grep -qE "^model: .*, activation checkpointing full every 2 blocks$" every2.log &&
   grep -qE "^model: .*, activation checkpointing selective \(every block\)$" selective.log; then
  pass "the model line says what is recomputed"
else
  fail "the model line does not name the checkpointing: $(grep '^model:' full.log every2.log)"
fi
"$train_gpt" --activation-checkpointing partial --steps 1 > partial.log 2>&1
code=$?
if [ $code -eq 2 ] && grep -q "partial not in {none,selective,full}" partial.log; then
  pass "--activation-checkpointing partial is refused by name (exit 2)"
else
  fail "partial: exit $code: $(tail -2 partial.log)"
fi

echo "$failures failure(s)"
[ $failures -eq 0 ]

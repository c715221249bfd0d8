#!/usr/bin/env bash
# train_gpt --batch auto under an artificial memory cap (LOOM_MEMORY_LIMIT on the CPU allocator):
# it picks a micro-batch, says why, and trains exactly as the same micro-batch given by hand; the
# next larger micro-batch, given by hand under the same cap, stops with an out-of-memory error
# that names the category that overflowed (so the pick was the largest that fits); a cap too small
# for one sequence, an invalid cap, an invalid --batch and flags that contradict auto are refused
# by name. The start-up plan
# line's prediction is within 10% of the step log's measured peak, and --plan prints the plan and
# exits before training.
# usage: train_gpt_batch_auto.sh TRAIN_GPT WORK_DIR
set -uo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
usage="usage: train_gpt_batch_auto.sh TRAIN_GPT WORK_DIR"
train_gpt=$(realpath "${1:?$usage}")
work=${2:?$usage}
rm -rf "$work" && mkdir -p "$work" && cd "$work" || exit 1
# shellcheck source=tests/examples/train_gpt_runs.sh
source "$here/train_gpt_runs.sh"
steps=6
run=(--steps $steps --eval-every 0 --eval-batches 1 --log-every 1 --layers 3)

LOOM_MEMORY_LIMIT=32M "$train_gpt" "${run[@]}" --batch auto --batch-per-step 32 --checkpoint-dir auto > auto.log 2>&1 ||
  fail "--batch auto under a 32 MiB cap failed: $(tail -3 auto.log)"
line=$(grep -E "^batch auto: " auto.log)
micro=$(sed -nE 's/^batch auto: ([0-9]+) sequences per micro-batch x ([0-9]+) micro-batches = 32 per rank.*/\1/p' <<< "$line")
accum=$(sed -nE 's/^batch auto: ([0-9]+) sequences per micro-batch x ([0-9]+) micro-batches = 32 per rank.*/\2/p' <<< "$line")
if [ -n "$micro" ] && [ $((micro * accum)) -eq 32 ] && grep -q "LOOM_MEMORY_LIMIT 32.0 MiB less 10%" <<< "$line" &&
   grep -q "a probe step passed" <<< "$line"; then
  pass "--batch auto chose $micro x $accum and said why: $line"
else
  fail "the batch auto line is missing or wrong: '$line'"
fi
[ -n "$micro" ] || micro=1 accum=32
LOOM_MEMORY_LIMIT=32M "$train_gpt" "${run[@]}" --batch "$micro" --grad-accum "$accum" --checkpoint-dir manual > manual.log 2>&1 ||
  fail "--batch $micro by hand under the cap failed: $(tail -3 manual.log)"
same_run auto_vs_manual manual.log manual auto $steps auto.log

predicted=$(sed -nE 's/^plan: ([0-9.]+) of .*/\1/p' auto.log)
measured=$(sed -nE "s/^step +$steps\/$steps .*\| mem ([0-9.]+) MiB.*/\1/p" auto.log)
if [ -n "$predicted" ] && [ -n "$measured" ] &&
   awk -v p="$predicted" -v m="$measured" 'BEGIN { r = p / m - 1; exit !(r <= 0.1 && r >= -0.1) }'; then
  pass "the plan line's $predicted MiB is within 10% of the measured $measured MiB"
else
  fail "plan line '$predicted' against the step log's peak '$measured'"
fi
LOOM_MEMORY_LIMIT=32M "$train_gpt" "${run[@]}" --batch 16 --plan > plan.log 2>&1 || fail "--plan failed: $(tail -3 plan.log)"
if grep -qE "^plan: .*LOOM_MEMORY_LIMIT 32.0 MiB less 10%.*DOES NOT FIT" plan.log &&
   grep -qE "^DDP +none .* no  <- this run$" plan.log && grep -qE "^DDP +full .* yes$" plan.log && ! grep -q "^step" plan.log; then
  pass "--plan says --batch 16 does not fit under 32 MiB and full checkpointing would, and exits"
else
  fail "--plan printed: $(cat plan.log)"
fi

larger=$((micro * 2))
LOOM_MEMORY_LIMIT=32M "$train_gpt" "${run[@]}" --batch $larger --grad-accum $((32 / larger)) > larger.log 2>&1
code=$?
if [ $code -ne 0 ] && grep -qE "out of memory: [0-9.]+ MiB more of activations would take the CPU's live memory over its limit of 32.0 MiB \(LOOM_MEMORY_LIMIT\); live now: .*activations" larger.log; then
  pass "--batch $larger under the cap stops with a named out-of-memory error (exit $code)"
else
  fail "--batch $larger under the cap: exit $code: $(tail -2 larger.log)"
fi

LOOM_MEMORY_LIMIT=2M "$train_gpt" "${run[@]}" --batch auto > tiny.log 2>&1
code=$?
if [ $code -ne 0 ] && grep -q -- "--batch auto: not even one sequence of 64 tokens fits" tiny.log; then
  pass "a 2 MiB cap is refused by name (exit $code)"
else
  fail "a 2 MiB cap: exit $code: $(tail -2 tiny.log)"
fi
LOOM_MEMORY_LIMIT=lots "$train_gpt" "${run[@]}" > lots.log 2>&1
code=$?
if [ $code -ne 0 ] && grep -q "LOOM_MEMORY_LIMIT: 'lots' is not a size such as 512M, 2G or a byte count" lots.log; then
  pass "LOOM_MEMORY_LIMIT=lots is refused by name (exit $code)"
else
  fail "LOOM_MEMORY_LIMIT=lots: exit $code: $(tail -2 lots.log)"
fi
"$train_gpt" --batch some --steps 1 > some.log 2>&1
code=$?
if [ $code -eq 2 ] && grep -q -- "must be a positive number or auto, got 'some'" some.log; then pass "--batch some is refused by name (exit 2)"; else fail "--batch some: exit $code"; fi

"$train_gpt" --batch auto --grad-accum 2 --steps 1 > both.log 2>&1
code=$?
if [ $code -eq 2 ] && grep -q -- "--grad-accum with --batch auto: auto chooses the accumulation" both.log; then
  pass "--grad-accum with --batch auto is refused by name (exit 2)"
else
  fail "--grad-accum with --batch auto: exit $code: $(cat both.log)"
fi
"$train_gpt" --batch 4 --batch-per-step 8 --steps 1 > per_step.log 2>&1
code=$?
if [ $code -eq 2 ] && grep -q -- "--batch-per-step goes with --batch auto" per_step.log; then
  pass "--batch-per-step without --batch auto is refused by name (exit 2)"
else
  fail "--batch-per-step without auto: exit $code: $(cat per_step.log)"
fi

echo "$failures failure(s)"
[ $failures -eq 0 ]

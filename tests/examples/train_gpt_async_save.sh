#!/usr/bin/env bash
# train_gpt --async-save in a 2-rank ZeRO-2 job (and ZeRO-3 in 1), as an operator meets it:
#  1. saves every 10 steps in the background train exactly as synchronous saves do, under ZeRO-2
#     and ZeRO-3: the same loss curve, and the same bytes in every rank's file of the final
#     checkpoint; the log gives each save's blocked and write times, and the closing line their
#     totals;
#  2. kill -9 during a background write (slowed by --checkpoint-write-mb) leaves the previous
#     checkpoint as `latest`, and one process resumes from it, removes the interrupted temporary,
#     and continues from step 10's weights;
#  3. SIGTERM during a background write: the job waits for it, saves the step it stopped at, exits
#     4, both checkpoints verify (loom-ckpt verify), and the resumed 2-rank job ends bit for bit
#     where the uninterrupted one does.
# usage: train_gpt_async_save.sh TRAIN_GPT LOOM_CKPT WORK_DIR MPIEXEC
set -uo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
usage="usage: train_gpt_async_save.sh TRAIN_GPT LOOM_CKPT WORK_DIR MPIEXEC"
train_gpt=$(realpath "${1:?$usage}")
loom_ckpt=$(realpath "${2:?$usage}")
work=${3:?$usage}
mpiexec=${4:?$usage}
rm -rf "$work" && mkdir -p "$work" && cd "$work" || exit 1
# shellcheck source=tests/examples/train_gpt_runs.sh
source "$here/train_gpt_runs.sh"
steps=60
run=(--steps $steps --checkpoint-every 10 --eval-every 0 --eval-batches 1 --log-every 1)
job=(--zero 2 --batch 4 "${run[@]}")
# About 0.7 MB per rank at 0.3 MB/s: a background write lasts over 2 s, while a step takes ms.
slow=(--async-save --checkpoint-write-mb 0.3)

# 1. Background saves change nothing in training.
"$mpiexec" -np 2 "$train_gpt" "${job[@]}" --checkpoint-dir sync > sync.log 2>&1 || fail "the synchronous-save run failed"
"$mpiexec" -np 2 "$train_gpt" "${job[@]}" --checkpoint-dir async --async-save > async.log 2>&1 ||
  fail "the asynchronous-save run failed: $(tail -3 async.log)"
same_run async_vs_sync sync.log sync async $steps async.log
"$mpiexec" -np 2 "$train_gpt" --zero 3 --batch 4 "${run[@]}" --checkpoint-dir sync3 > sync3.log 2>&1 || fail "the ZeRO-3 run failed"
"$mpiexec" -np 2 "$train_gpt" --zero 3 --batch 4 "${run[@]}" --checkpoint-dir async3 --async-save > async3.log 2>&1 ||
  fail "the ZeRO-3 asynchronous-save run failed: $(tail -3 async3.log)"
same_run async_vs_sync_zero3 sync3.log sync3 async3 $steps async3.log
if grep -qE "^saved checkpoint async/step_00000010 \(in the background: training blocked [0-9.]+ s, writing took [0-9.]+ s" async.log &&
   grep -qE "^checkpoints: 6 saved \(5 in the background\); training blocked [0-9.]+ s in all" async.log; then
  pass "the log gives each background save's blocked and write times, and the totals"
else
  fail "the save lines: $(grep -E '^(saved|checkpoints)' async.log | head -3)"
fi

# 2. kill -9 while step 20 is being written: step 10 stays `latest`; one process resumes from it.
if start_until_line kill.log "^checkpoint of step 20: copied to host memory" \
     "$mpiexec" -np 2 "$train_gpt" "${job[@]}" "${slow[@]}" --checkpoint-dir killed; then
  for rank in $(children_of "$pid"); do kill -KILL "$rank"; done
  kill -KILL "$pid" 2>/dev/null
  wait "$pid" 2>/dev/null
  if [ -d killed/.step_00000020.tmp ] && [ ! -e killed/step_00000020 ] && [ "$(cat killed/latest)" = step_00000010 ]; then
    pass "kill -9 during the write of step 20: its temporary is left, latest names step 10"
  else
    fail "after kill -9: $(ls -a killed) latest=$(cat killed/latest 2>/dev/null)"
  fi
  "$train_gpt" --batch 8 "${run[@]}" --checkpoint-dir killed > resumed1.log 2>&1 ||
    fail "the 1-process resume failed: $(tail -3 resumed1.log)"
  if grep -q "^removed killed/.step_00000020.tmp, left by an interrupted save" resumed1.log &&
     grep -q "^resumed from killed/step_00000010 at step 10" resumed1.log; then
    pass "one process resumed from step 10 and removed the interrupted save"
  else
    fail "the 1-process resume: $(grep -vE '^step' resumed1.log | head -5)"
  fi
  # The first resumed step continues from step 10's weights: its loss is the 2-rank job's step 11
  # up to the data (train_gpt gives each rank its own part of the stream, so one process sees other
  # sequences), far from a fresh start's. The loss curve is checked bit for bit in 1 and 3.
  first=$(grep -m1 -E '^step +11/' resumed1.log | awk '{print $5}')
  reference=$(grep -m1 -E '^step +11/' sync.log | awk '{print $5}')
  fresh=$(grep -m1 -E '^step +1/' sync.log | awk '{print $5}')
  if awk -v a="$first" -v b="$reference" -v f="$fresh" 'BEGIN {d = a - b; if (d < 0) d = -d; exit !(a != "" && d < 0.02 && f - a > 0.3)}'; then
    pass "the resumed step 11 at one process: loss $first, the 2-rank job's $reference (a fresh start: $fresh)"
  else
    fail "the resumed step 11: loss '$first' against the 2-rank job's $reference (a fresh start: $fresh)"
  fi
fi

# 3. SIGTERM while step 20 is being written: the write finishes, the stop saves its own step, exit 4.
if start_until_line term.log "^checkpoint of step 20: copied to host memory" \
     "$mpiexec" -np 2 "$train_gpt" "${job[@]}" "${slow[@]}" --checkpoint-dir term; then
  for rank in $(children_of "$pid"); do kill -TERM "$rank"; done
  wait "$pid"
  code=$?
  stopped=$(grep -oE "^stopped by SIGTERM after step [0-9]+" term.log | grep -oE "[0-9]+$")
  if [ $code -eq 4 ] && [ -n "$stopped" ] && [ "$stopped" -gt 20 ] && [ "$stopped" -lt $steps ] &&
     "$loom_ckpt" verify term/step_00000020 > verify20.log 2>&1 &&
     "$loom_ckpt" verify "term/$(printf "step_%08d" "$stopped")" > verify_stop.log 2>&1; then
    pass "SIGTERM during the write of step 20: exit 4, step 20 and step $stopped both committed and verified"
  else
    fail "SIGTERM during a write: exit $code, stopped at '$stopped': $(grep -vE '^step' term.log | tail -4) $(cat verify*.log)"
  fi
  "$mpiexec" -np 2 "$train_gpt" "${job[@]}" --async-save --checkpoint-dir term > term2.log 2>&1 ||
    fail "the resumed 2-rank job failed: $(tail -3 term2.log)"
  same_run sigterm_async sync.log sync term $steps term.log term2.log
fi

echo "$failures failure(s)"
[ $failures -eq 0 ]

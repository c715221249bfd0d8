#!/usr/bin/env bash
# train_gpt under faults, as an operator meets them: exit codes, SIGTERM/SIGUSR1 preemption with a
# bit-exact continuation, honest resume, checkpoint retention, stale temporaries, divergence and a
# second signal; with MPI, a stopped and a killed rank. usage: train_gpt_faults.sh TRAIN_GPT WORK_DIR [MPIEXEC]
# With MPIEXEC it checks preemption of a 2-rank job through mpirun (Open MPI forwards SIGUSR1 to
# the ranks; a SIGTERM to mpirun itself makes it kill the job).
set -uo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
train_gpt=${1:?usage: train_gpt_faults.sh TRAIN_GPT WORK_DIR [MPIEXEC]}
work=${2:?usage: train_gpt_faults.sh TRAIN_GPT WORK_DIR [MPIEXEC]}
mpiexec=${3:-}
train_gpt=$(realpath "$train_gpt")
rm -rf "$work" && mkdir -p "$work" && cd "$work" || exit 1
quick=(--eval-every 0 --eval-batches 1 --log-every 1)
# shellcheck source=tests/examples/train_gpt_runs.sh
source "$here/train_gpt_runs.sh"

# 1. Usage errors exit 2 and name the rule.
"$train_gpt" --batch 0 > usage.log 2>&1
code=$?
if [ $code -eq 2 ] && grep -q "must be a positive number or auto, got '0'" usage.log; then pass "--batch 0: exit 2, named"
else fail "--batch 0: exit $code: $(cat usage.log)"; fi

printf '0123456789' > ten.txt
"$train_gpt" --data text:ten.txt > short.log 2>&1
code=$?
if [ $code -eq 2 ] && grep -q "holds 10 tokens; sequences of 64 need at least 130" short.log; then
  pass "a 10-byte text file: exit 2, its size named"
else
  fail "a 10-byte text file: exit $code: $(tail -1 short.log)"
fi

# 2. SIGTERM: the step finishes, a checkpoint is committed, exit 4; the resumed run continues bit-exactly.
steps=1500
"$train_gpt" --checkpoint-dir ref --steps $steps "${quick[@]}" > ref.log 2>&1 || fail "the uninterrupted run failed"
start_until_step term1.log 20 "$train_gpt" --checkpoint-dir term --steps $steps "${quick[@]}" && kill -TERM "$pid"
wait "$pid"
code=$?
if [ $code -eq 4 ] && grep -qE "^stopped by SIGTERM after step [0-9]+: checkpoint .* committed" term1.log; then
  pass "SIGTERM: exit 4, $(grep -oE "committed [0-9.]+ s after the signal" term1.log)"
else
  fail "SIGTERM: exit $code: $(tail -3 term1.log)"
fi
"$train_gpt" --checkpoint-dir term --steps $steps "${quick[@]}" > term2.log 2>&1 || fail "the resumed run failed"
grep -q "^resumed from term/step_" term2.log || fail "the resumed run did not say where it resumed"
same_run sigterm ref.log ref term $steps term1.log term2.log

# 2b. --time-limit: the same path as a signal.
"$train_gpt" --checkpoint-dir limit --steps 100000 --time-limit 1 "${quick[@]}" > limit.log 2>&1
code=$?
if [ $code -eq 4 ] && grep -qE "^stopped by the time limit after step [0-9]+: checkpoint limit/step_" limit.log; then
  pass "--time-limit 1: exit 4, stopped $(grep -oE 'after step [0-9]+' limit.log | tail -1)"
else
  fail "--time-limit: exit $code: $(tail -2 limit.log)"
fi

# 3. --steps at or below the checkpoint's step: exit 2, naming both.
"$train_gpt" --checkpoint-dir term --steps 10 "${quick[@]}" > below.log 2>&1
code=$?
if [ $code -eq 2 ] && grep -q -- "--steps 10 is not beyond step $steps" below.log; then pass "--steps below the checkpoint: exit 2"
else fail "--steps below the checkpoint: exit $code: $(tail -2 below.log)"; fi

# 4. Honest resume: no `latest`, a damaged newest checkpoint, then nothing that verifies.
"$train_gpt" --checkpoint-dir honest --steps 30 --checkpoint-every 10 "${quick[@]}" > honest1.log 2>&1
rm honest/latest
echo damaged > honest/step_00000030/state.json
"$train_gpt" --checkpoint-dir honest --steps 40 "${quick[@]}" > honest2.log 2>&1
code=$?
if [ $code -eq 0 ] && grep -q "'latest' is missing" honest2.log && grep -q "passed over: step_00000030" honest2.log &&
   grep -q "^resumed from honest/step_00000020 at step 20" honest2.log; then
  pass "resume without latest and past a damaged checkpoint: from step 20, reasons given"
else
  fail "honest resume: exit $code: $(grep -vE '^step' honest2.log | head -8)"
fi
for state in honest/step_*/state.json; do echo damaged > "$state"; done
"$train_gpt" --checkpoint-dir honest --steps 50 "${quick[@]}" > honest3.log 2>&1
code=$?
if [ $code -eq 1 ] && grep -q "holds checkpoints but none verifies" honest3.log; then pass "no checkpoint verifies: exit 1"
else fail "no checkpoint verifies: exit $code: $(tail -3 honest3.log)"; fi
"$train_gpt" --checkpoint-dir fresh --steps 3 "${quick[@]}" > fresh.log 2>&1 || fail "a fresh directory failed"
grep -q "no checkpoint in fresh yet: starting from scratch" fresh.log || fail "a fresh directory: not said"
"$train_gpt" --checkpoint-dir fresh --steps 5 --resume never "${quick[@]}" > never.log 2>&1
code=$?
if [ $code -eq 2 ] && grep -q "already holds checkpoints" never.log; then pass "--resume never on checkpoints: exit 2"
else fail "--resume never: exit $code"; fi

# 5. Retention: the newest 3, plus every 5th with --keep-every 5; stale temporaries removed and reported.
mkdir -p keep/.step_00000099.tmp
"$train_gpt" --checkpoint-dir keep --steps 17 --checkpoint-every 1 --keep-checkpoints 3 --keep-every 5 "${quick[@]}" \
  > keep.log 2>&1 || fail "the retention run failed"
kept=$(cd keep && ls -d step_* | tr '\n' ' ')
if [ "$kept" = "step_00000005 step_00000010 step_00000015 step_00000016 step_00000017 " ] &&
   grep -q "removed keep/.step_00000099.tmp, left by an interrupted save" keep.log && [ ! -e keep/.step_00000099.tmp ]; then
  pass "retention: kept $kept; the stale temporary removed"
else
  fail "retention: kept '$kept'; $(grep -c removed keep.log) removal lines"
fi

# 6. Divergence: exit 3 after saving the last good state.
"$train_gpt" --checkpoint-dir diverged --steps 40 --lr 1e6 "${quick[@]}" > diverged.log 2>&1
code=$?
if [ $code -eq 3 ] && grep -qE "^diverged at step [0-9]+: .*last good state in diverged/step_" diverged.log; then
  pass "divergence: exit 3, $(grep -oE '^diverged at step [0-9]+' diverged.log)"
else
  fail "divergence: exit $code: $(grep -vE '^step' diverged.log | tail -3)"
fi

# 7. A second signal (more than a second after the first: one within a second is the same notice
# delivered twice) ends the process at once (slow steps, so it lands within one).
start_until_step twice.log 1 "$train_gpt" --checkpoint-dir twice --steps 100000 --layers 8 --channels 384 --batch 128 \
  "${quick[@]}" && { kill -TERM "$pid"; sleep 0.2; kill -TERM "$pid"; sleep 1.2; kill -TERM "$pid"; }
wait "$pid"
code=$?
if [ $code -eq 143 ]; then pass "a second SIGTERM: killed at once (exit 143)"; else fail "a second SIGTERM: exit $code"; fi

# 8. A 2-rank job: SIGUSR1 to mpirun reaches both ranks; they stop after the same step, save, exit
# 4; the resumed job continues bit-exactly.
if [ -n "$mpiexec" ]; then
  mpi_steps=1200
  "$mpiexec" -np 2 "$train_gpt" --checkpoint-dir mpi_ref --steps $mpi_steps --batch 4 "${quick[@]}" > mpi_ref.log 2>&1 ||
    fail "the uninterrupted 2-rank run failed"
  start_until_step mpi1.log 20 "$mpiexec" -np 2 "$train_gpt" --checkpoint-dir mpi --steps $mpi_steps --batch 4 \
    "${quick[@]}" && kill -USR1 "$pid"
  wait "$pid"
  code=$?
  if [ $code -eq 4 ] && grep -qE "^stopped by SIGUSR1 after step [0-9]+" mpi1.log; then pass "2 ranks, SIGUSR1: exit 4"
  else fail "2 ranks, SIGUSR1: exit $code: $(grep -vE '^step' mpi1.log | tail -4)"; fi
  "$mpiexec" -np 2 "$train_gpt" --checkpoint-dir mpi --steps $mpi_steps --batch 4 "${quick[@]}" > mpi2.log 2>&1 ||
    fail "the resumed 2-rank run failed"
  same_run mpi_sigusr1 mpi_ref.log mpi_ref mpi $mpi_steps mpi1.log mpi2.log
fi

# 9. A stuck rank (SIGSTOP) and a dead one (SIGKILL) in a 2-rank job with a 2 s timeout: the job
# fails promptly, and for the stuck one the others name it.
if [ -n "$mpiexec" ]; then
  for signal in STOP KILL; do
    start_until_step "stuck_$signal.log" 20 "$mpiexec" -np 2 "$train_gpt" --steps 100000 --batch 4 --loom-timeout-ms 2000 \
      "${quick[@]}" || continue
    victim=$(children_of "$pid" | tail -1)
    begin=$(date +%s%N)
    kill -"$signal" "$victim"
    wait "$pid"
    code=$?
    took_ms=$((($(date +%s%N) - begin) / 1000000))
    kill -KILL "$victim" 2>/dev/null
    if [ $code -ne 0 ] && [ $took_ms -lt 6000 ]; then
      pass "2 ranks, one rank $signal: the job failed (exit $code) after $took_ms ms"
    else
      fail "2 ranks, one rank $signal: exit $code after $took_ms ms"
    fi
    if [ "$signal" = STOP ] && ! grep -q "not completed within 2000 ms.*did not answer" "stuck_$signal.log"; then
      fail "the stuck rank was not named: $(grep -m1 timeout "stuck_$signal.log")"
    fi
  done
fi

echo "$failures failure(s)"
[ $failures -eq 0 ]

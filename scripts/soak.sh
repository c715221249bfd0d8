#!/usr/bin/env bash
# Soak test of the fault path (not part of CI): CYCLES times, a 2-rank train_gpt job trains from its
# checkpoint directory until a random rank gets a random SIGKILL, SIGTERM or SIGSTOP after a random
# time; the next cycle resumes. Every resume must continue from a checkpoint that verifies, at a
# step no earlier than the last one committed; at the end the job runs to completion and its final
# weights must equal those of an uninterrupted run, bit for bit.
#   scripts/soak.sh [CYCLES] [WORK_DIR]      (default 20 cycles in /tmp/loom-soak)
# Needs a build with MPI (build/examples/train_gpt/train_gpt, or $TRAIN_GPT) and mpirun.
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cycles=${1:-20}
work=${2:-/tmp/loom-soak}
train_gpt=$(realpath "${TRAIN_GPT:-$root/build/examples/train_gpt/train_gpt}")
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_btl_vader_single_copy_mechanism=none
steps=${SOAK_STEPS:-50000}  # more than the cycles get through (at ~3 ms a step), so every cycle is interrupted
run=(mpirun -np 2 "$train_gpt" --steps $steps --batch 4 --eval-every 0 --log-every 50 --checkpoint-every 100
     --keep-checkpoints 2 --loom-timeout-ms 2000)
rm -rf "$work" && mkdir -p "$work" && cd "$work" || exit 1

children_of() {
  grep -l "^PPid:[[:space:]]*$1\$" /proc/[0-9]*/status 2>/dev/null | sed 's|/proc/\([0-9]*\)/status|\1|' | sort -n
}

echo "soak: the uninterrupted reference run"
"${run[@]}" --checkpoint-dir reference > reference.log 2>&1 || { echo "soak: the reference run failed"; exit 1; }

failures=0
last_committed=0
for cycle in $(seq 1 "$cycles"); do
  log="cycle_$cycle.log"
  "${run[@]}" --checkpoint-dir run > "$log" 2>&1 &
  pid=$!
  sleep "$(awk -v seed="$RANDOM" 'BEGIN { srand(seed); printf "%.2f", 1.5 + 3 * rand() }')"
  ranks=($(children_of "$pid"))
  signals=(KILL TERM STOP)
  signal=${signals[$((RANDOM % 3))]}
  victim=""
  [ ${#ranks[@]} -gt 0 ] && victim=${ranks[$((RANDOM % ${#ranks[@]}))]}
  if [ -z "$victim" ] || ! kill -0 "$pid" 2>/dev/null; then
    echo "cycle $cycle: the job ended before the signal"; wait "$pid"; failures=$((failures + 1)); continue
  fi
  kill -"$signal" "$victim"
  wait "$pid"
  code=$?
  kill -KILL "$victim" 2>/dev/null  # a stopped rank the job left behind
  resumed=$(grep -oE "^resumed from run/step_[0-9]+ at step [0-9]+" "$log" | grep -oE "[0-9]+$")
  fresh=$(grep -c "starting from scratch" "$log")
  committed=$(grep -oE "^saved checkpoint run/step_[0-9]+" "$log" | tail -1 | grep -oE "[0-9]+$" | sed 's/^0*//')
  ok=1
  if [ "$cycle" -eq 1 ]; then
    [ "$fresh" -eq 1 ] || ok=0
  elif [ -z "$resumed" ] || [ "$resumed" -lt "$last_committed" ]; then
    ok=0
  fi
  if [ $ok -eq 1 ]; then
    echo "cycle $cycle: SIG$signal to rank pid $victim: exit $code; resumed at ${resumed:-0} (last committed ${last_committed}); saved up to ${committed:-none}"
  else
    echo "cycle $cycle: FAILED: $signal: resumed at '${resumed}' but the last committed checkpoint was $last_committed"
    grep -vE "^step" "$log" | tail -5
    failures=$((failures + 1))
  fi
  [ -n "$committed" ] && last_committed=$committed
done

echo "soak: the final run to step $steps"
"${run[@]}" --checkpoint-dir run > final.log 2>&1 || { echo "soak: the final run failed"; grep -v "^step" final.log | tail -5; exit 1; }
final=$(printf "step_%08d" $steps)
same=yes
for file in reference/"$final"/rank_*.safetensors; do  # each rank's pieces, the same ranks on both sides
  cmp -s "$file" "run/$final/$(basename "$file")" || same=no
done
if [ -f "reference/$final/rank_00000.safetensors" ] && [ $same = yes ]; then
  echo "soak: the final weights equal the uninterrupted run's"
else
  echo "soak: FAILED: the final weights differ from the uninterrupted run's"
  failures=$((failures + 1))
fi
echo "soak: $((cycles - $(( failures > cycles ? cycles : failures )))) of $cycles cycles passed; $failures failure(s)"
[ $failures -eq 0 ]

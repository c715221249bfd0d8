#!/usr/bin/env bash
# The guide's example (examples/custom_model, docs/guide.md) as its reader runs it:
#   - one process learns the task: held-out error under 15% of the targets' variance;
#   - with MPIEXEC: 2 and 3 ranks under DDP, ZeRO-1, -2 and -3 print exactly what one process with
#     the same global batch prints (every loss line and the held-out error: N ranks x G/N rows are
#     one process's G rows), and end with the same weights on every rank (the example calls
#     verify_same_values, which fails the run otherwise);
#   - a 2-rank ZeRO-2 checkpoint resumes at 3 ranks under ZeRO-1 into the uninterrupted run's output.
# usage: custom_model.sh CUSTOM_MODEL WORK_DIR [MPIEXEC]
set -uo pipefail
bin=$(realpath "${1:?usage: custom_model.sh CUSTOM_MODEL WORK_DIR [MPIEXEC]}")
work=${2:?usage: custom_model.sh CUSTOM_MODEL WORK_DIR [MPIEXEC]}
mpiexec=${3:-}
rm -rf "$work" && mkdir -p "$work" && cd "$work" || exit 1
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }
pass() { echo "ok: $*"; }

# What a run prints from its first loss line on (the settings line names the ZeRO stage).
results() { grep -E '^(step|held-out)' "$1"; }

"$bin" --batch 66 > one.log 2>&1 || fail "one process exited $?: $(tail -3 one.log)"
unexplained=$(sed -n 's/.*unexplained \([0-9.]*\)%.*/\1/p' one.log)
if [[ -n $unexplained ]] && awk -v u="$unexplained" 'BEGIN { exit !(u < 15) }'; then
  pass "one process learns the task: ${unexplained}% of the variance unexplained (threshold 15%)"
else
  fail "one process did not learn the task: unexplained '${unexplained}' (threshold 15%)"; cat one.log
fi

if [[ -n $mpiexec ]]; then
  for zero in 0 1 2 3; do
    for ranks in 2 3; do
      log=np${ranks}_zero${zero}.log
      if ! "$mpiexec" -np "$ranks" --oversubscribe "$bin" --batch 66 --zero "$zero" > "$log" 2>&1; then
        fail "$ranks ranks, ZeRO-$zero exited non-zero: $(tail -3 "$log")"
      elif ! diff <(results one.log) <(results "$log") > /dev/null; then
        fail "$ranks ranks, ZeRO-$zero differ from one process:"; diff <(results one.log) <(results "$log")
      else
        pass "$ranks ranks, ZeRO-$zero print what one process prints, $(results "$log" | wc -l) lines"
      fi
    done
  done
  "$mpiexec" -np 2 "$bin" --batch 66 --zero 2 --save-every 200 --checkpoint-dir run > saved.log 2>&1 ||
    fail "the saving run exited non-zero: $(tail -3 saved.log)"
  rm -rf run/step_00000400  # as if the job had stopped after step 200
  "$mpiexec" -np 3 --oversubscribe "$bin" --batch 66 --zero 1 --checkpoint-dir run > resumed.log 2>&1 ||
    fail "the resumed run exited non-zero: $(tail -3 resumed.log)"
  if grep -q "resumed at step 200" resumed.log &&
     diff <(results one.log | sed -n '/^step  250/,$p') <(results resumed.log) > /dev/null; then
    pass "a 2-rank ZeRO-2 checkpoint resumed at 3 ranks under ZeRO-1 continues the uninterrupted run exactly"
  else
    fail "the resumed run differs:"; cat resumed.log
  fi
fi
echo "$failures failure(s)"
exit $((failures > 0))

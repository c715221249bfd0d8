#!/usr/bin/env bash
# One rank of a data-parallel job fails (in its forward, in its optimizer step, or outside loom while
# its World unwinds); every rank must
# stop within 5 s, with a 300 s communicator timeout, and report the failed rank and its message.
# usage: fail_fast.sh LOOM_FAIL_FAST MPIEXEC RANKS MODE STAGE
set -uo pipefail
program=$1 mpiexec=$2 ranks=$3 mode=$4 stage=$5
log=$(mktemp)
trap 'rm -f "$log"' EXIT
start=$(date +%s%N)
LOOM_COMM_TIMEOUT_MS=300000 timeout 120 "$mpiexec" -np "$ranks" --oversubscribe "$program" "$mode" "$stage" >"$log" 2>&1
rc=$?
elapsed_ms=$(( ($(date +%s%N) - start) / 1000000 ))
cat "$log"
last=$((ranks - 1))
case "$mode" in
  forward) message="token 99 at position (0, 1)" ;;
  optimizer) message="not inside rank $((ranks - 1))'s slices" ;;
  unwind) message="unwinding from an error" ;;  # the failed rank's own line shows its exception
esac
failed=0
[ "$rc" -ne 0 ] || { echo "FAIL: the job exited 0"; failed=1; }
# 5 s for the failure to reach every rank, plus mpirun's own start and the first steps.
if (( elapsed_ms > 8000 )); then echo "FAIL: the job took ${elapsed_ms} ms"; failed=1; fi
for r in $(seq 0 "$last"); do
  line=$(grep "^rank $r: " "$log" | head -1)
  if [ -z "$line" ]; then echo "FAIL: rank $r printed no error"; failed=1; continue; fi
  expected=$message
  if [ "$mode" = unwind ] && [ "$r" -eq "$last" ]; then expected="a failure outside loom"; fi
  case "$line" in
    *"$expected"*) ;;
    *) echo "FAIL: rank $r does not show the message '$expected': $line"; failed=1 ;;
  esac
  if [ "$r" -ne "$last" ]; then
    case "$line" in
      *"rank $last"*) ;;
      *) echo "FAIL: rank $r does not name rank $last: $line"; failed=1 ;;
    esac
  fi
done
echo "job: exit $rc after ${elapsed_ms} ms (mpirun's start included)"
exit $failed

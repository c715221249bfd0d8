#!/usr/bin/env bash
# train_gpt on 2 CPU processes started as torchrun (or a PyTorchJob) starts them, no mpirun:
#  1. loom chooses Gloo and says why; the job learns the addition task (>= 90% exact-match), and
#     where mpirun is there, its loss and accuracy are the same 2-rank job's under MPI (two ranks
#     add in either order to the same bits);
#  2. a rank killed with -9 ends the other promptly, naming the call and the rank;
#  3. a stopped rank (SIGSTOP) fails the other within the timeout plus 10% naming the call and the
#     rank it waited for; resumed (SIGCONT), the stopped rank fails at once with the other's reason;
#  4. a contradictory environment (WORLD_SIZE=2, one process) and LOOM_CPU_BACKEND=mpi without
#     mpirun are errors that say what to set.
# usage: train_gpt_gloo.sh TRAIN_GPT WORK_DIR [MPIEXEC]
set -uo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
usage="usage: train_gpt_gloo.sh TRAIN_GPT WORK_DIR [MPIEXEC]"
train_gpt=$(realpath "${1:?$usage}")
work=${2:?$usage}
mpiexec=${3:-}
rm -rf "$work" && mkdir -p "$work" && cd "$work" || exit 1
# shellcheck source=tests/examples/train_gpt_runs.sh
source "$here/train_gpt_runs.sh"
export OMP_NUM_THREADS=1
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
# Rank $1 of $2 at port $3, the rest are train_gpt's arguments; logs to rank$1.log, pid in pids[$1].
pids=()
start_rank() {
  local rank=$1 size=$2 port=$3; shift 3
  RANK=$rank WORLD_SIZE=$size LOCAL_RANK=$rank LOCAL_WORLD_SIZE=$size MASTER_ADDR=127.0.0.1 MASTER_PORT=$port \
    "$train_gpt" "$@" > "rank$rank.log" 2>&1 &
  pids[rank]=$!
}
# Waits for pid $1 at most $2 seconds; its exit status in $status (124 when it had to be killed).
wait_for() {
  local pid=$1 limit=$2
  for _ in $(seq 1 $((limit * 20))); do
    kill -0 "$pid" 2>/dev/null || { wait "$pid"; status=$?; return; }
    sleep 0.05
  done
  kill -9 "$pid" 2>/dev/null; wait "$pid"; status=124
}
accuracy() { sed -nE 's/^eval step [0-9]+ \| loss [0-9.]+ \| exact-match accuracy ([0-9.]+)%$/\1/p' "$1" | tail -1; }
steps=4000
run=(--steps $steps --eval-every 0 --log-every 500)
final() { grep -E '^eval step' "$1" | tail -1; }

# 1. Two Gloo ranks with 4 sequences each.
port=$(free_port)
start_rank 0 2 "$port" --batch 4 "${run[@]}"
start_rank 1 2 "$port" --batch 4 "${run[@]}"
wait_for "${pids[0]}" 280; s0=$status
wait_for "${pids[1]}" 10; s1=$status
cp rank0.log gloo.log
if [ "$s0" -ne 0 ] || [ "$s1" -ne 0 ]; then fail "the Gloo job failed ($s0, $s1): $(tail -3 rank0.log) $(tail -3 rank1.log)"; fi
if grep -qE "^data-parallel: 2 ranks \(gloo: started by torchrun's environment .*no MPI launcher\)" gloo.log; then
  pass "the start-up line says Gloo and why"
else
  fail "gloo.log lacks the backend line: $(grep -m1 '^data-parallel' gloo.log)"
fi
gloo=$(accuracy gloo.log)
if [ -n "$gloo" ] && awk -v g="$gloo" 'BEGIN { exit !(g >= 90) }'; then
  pass "2 Gloo ranks learn the addition task: ${gloo}% exact-match accuracy after $steps steps"
else
  fail "2 Gloo ranks reached '${gloo}'% exact-match accuracy after $steps steps (90% expected)"
fi
if [ -n "$mpiexec" ]; then
  "$mpiexec" -np 2 --oversubscribe -x OMP_NUM_THREADS "$train_gpt" --batch 4 "${run[@]}" > mpi_run.log 2>&1 ||
    fail "the MPI job failed: $(tail -3 mpi_run.log)"
  if [ -n "$(final gloo.log)" ] && [ "$(final gloo.log)" = "$(final mpi_run.log)" ] &&
     diff <(grep -E '^step' gloo.log | cut -d'|' -f1-2) <(grep -E '^step' mpi_run.log | cut -d'|' -f1-2) > /dev/null; then
    pass "the Gloo job's losses and accuracy are the MPI job's: $(final gloo.log)"
  else
    fail "Gloo ($(final gloo.log)) and MPI ($(final mpi_run.log)) differ"
  fi
fi

# 2. kill -9 of rank 1 in the middle of training.
port=$(free_port)
start_rank 0 2 "$port" --steps 100000 --eval-every 0 --log-every 10
start_rank 1 2 "$port" --steps 100000 --eval-every 0 --log-every 10
for _ in $(seq 1 600); do grep -qE '^step +20/' rank0.log && break; sleep 0.05; done
kill -9 "${pids[1]}"
start=$(date +%s.%N)
wait_for "${pids[0]}" 30
took=$(awk -v s="$start" -v e="$(date +%s.%N)" 'BEGIN { printf "%.1f", e - s }')
if [ "$status" -ne 0 ] && [ "$status" -ne 124 ] && awk -v t="$took" 'BEGIN { exit !(t < 10) }' &&
   grep -qE "Gloo [a-z_]+ #[0-9]+ .*the connection to rank 1 failed" rank0.log; then
  pass "rank 0 ends ${took}s after rank 1 is killed, naming the call and rank 1"
else
  fail "after kill -9 of rank 1, rank 0 ended with $status after ${took}s: $(tail -3 rank0.log)"
fi

# 3. SIGSTOP of rank 1 with a 3 s timeout; then SIGCONT.
port=$(free_port)
export LOOM_COMM_TIMEOUT_MS=3000
start_rank 0 2 "$port" --steps 100000 --eval-every 0 --log-every 10
start_rank 1 2 "$port" --steps 100000 --eval-every 0 --log-every 10
for _ in $(seq 1 600); do grep -qE '^step +20/' rank0.log && break; sleep 0.05; done
kill -STOP "${pids[1]}"
start=$(date +%s.%N)
for _ in $(seq 1 600); do grep -q "not completed within" rank0.log && break; sleep 0.01; done
took=$(awk -v s="$start" -v e="$(date +%s.%N)" 'BEGIN { printf "%.2f", e - s }')
wait_for "${pids[0]}" 30
# The stop lands anywhere in a step: the call that waits began at most a step (~15 ms) before it.
if [ "$status" -ne 0 ] && [ "$status" -ne 124 ] && awk -v t="$took" 'BEGIN { exit !(t <= 3.3) }' &&
   grep -qE "Gloo [a-z_]+ #[0-9]+ .*not completed within 3000 ms.*rank 1" rank0.log; then
  pass "rank 0 fails ${took}s after rank 1 stops (timeout 3 s), naming the call and rank 1"
else
  fail "after SIGSTOP of rank 1, rank 0 ended with $status, its error after ${took}s: $(tail -3 rank0.log)"
fi
kill -CONT "${pids[1]}"
start=$(date +%s.%N)
wait_for "${pids[1]}" 30
took=$(awk -v s="$start" -v e="$(date +%s.%N)" 'BEGIN { printf "%.2f", e - s }')
if [ "$status" -ne 0 ] && [ "$status" -ne 124 ] && awk -v t="$took" 'BEGIN { exit !(t < 2) }' &&
   grep -qE "rank 0 aborted the Gloo communicator" rank1.log; then
  pass "rank 1, resumed, fails ${took}s later with rank 0's reason"
else
  fail "rank 1, resumed, ended with $status after ${took}s: $(tail -3 rank1.log)"
fi
unset LOOM_COMM_TIMEOUT_MS

# 4. Environments that cannot work.
port=$(free_port)
start_rank 0 2 "$port" --steps 10 --loom-timeout-ms 1500
wait_for "${pids[0]}" 30
if [ "$status" -ne 0 ] && grep -q "only 0 of the 1 other ranks connected" rank0.log &&
   grep -q "every rank must be started with the same WORLD_SIZE, 2" rank0.log; then
  pass "WORLD_SIZE=2 with one process fails in 1.5 s saying what to check"
else
  fail "WORLD_SIZE=2 with one process: $status, $(tail -2 rank0.log)"
fi
LOOM_CPU_BACKEND=mpi RANK=0 WORLD_SIZE=2 LOCAL_RANK=0 MASTER_ADDR=127.0.0.1 MASTER_PORT=$port \
  "$train_gpt" --steps 10 > mpi.log 2>&1
status=$?
if [ "$status" -ne 0 ] && grep -qE "MPI says rank 0 of 1|built without MPI" mpi.log && grep -q "gloo" mpi.log; then
  pass "LOOM_CPU_BACKEND=mpi without mpirun is an error that points to gloo"
else
  fail "LOOM_CPU_BACKEND=mpi without mpirun: $status, $(tail -2 mpi.log)"
fi

echo "train_gpt_gloo: $failures failure(s)"
[ "$failures" -eq 0 ]

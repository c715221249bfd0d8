#!/usr/bin/env bash
# Starts N copies of a command as torchrun, or a Kubernetes PyTorchJob, starts a job's workers:
# each with RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR and MASTER_PORT, and no
# mpirun (Debian's torchrun does not run on its Python, so the tests set the variables themselves).
# Usage: torchrun_env.sh [--slurm] N COMMAND [ARGS...]. With --slurm the ranks get srun's variables
# instead (SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID; no PMIx: srun without MPI support), with
# MASTER_ADDR and MASTER_PORT as a user sets them for such a job. MASTER_PORT defaults to a free
# port. Exits with the first failing rank's status (0 when all succeed); once one rank fails, the
# others have LOOM_TEST_GRACE seconds (default 30) to end before they are killed.
set -uo pipefail
slurm=0
if [ "${1:-}" = "--slurm" ]; then slurm=1; shift; fi
n=$1
shift
port=${MASTER_PORT:-$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')}
grace=${LOOM_TEST_GRACE:-30}
pids=()
for ((rank = 0; rank < n; rank++)); do
  if ((slurm)); then
    SLURM_PROCID=$rank SLURM_NTASKS=$n SLURM_LOCALID=$rank MASTER_ADDR=${MASTER_ADDR:-127.0.0.1} MASTER_PORT=$port "$@" &
  else
    RANK=$rank WORLD_SIZE=$n LOCAL_RANK=$rank LOCAL_WORLD_SIZE=$n MASTER_ADDR=${MASTER_ADDR:-127.0.0.1} \
      MASTER_PORT=$port "$@" &
  fi
  pids+=($!)
done
status=0
running=("${pids[@]}")
while ((${#running[@]} > 0)); do
  wait -n -p finished "${running[@]}"
  code=$?
  left=()
  for pid in "${running[@]}"; do [ "$pid" != "$finished" ] && left+=("$pid"); done
  running=("${left[@]}")
  if ((code != 0 && status == 0)); then
    status=$code
    echo "torchrun_env: a rank (pid $finished) exited with $code; the others have ${grace}s" >&2
    (sleep "$grace" && kill -9 "${pids[@]}") >/dev/null 2>&1 &
    reaper=$!
  fi
done
[ -n "${reaper:-}" ] && kill "$reaper" 2>/dev/null
exit $status

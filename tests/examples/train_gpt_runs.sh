# Helpers for the scripts that run train_gpt as an operator does (sourced, not run): pass/fail
# counting, starting a run in the background until its log shows a step or a line, the ranks of
# an mpirun, and comparing a run with an uninterrupted one, loss by loss and file by file.
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }
pass() { echo "ok: $*"; }

# Runs a command in the background, logging to $1, and waits until the log has a line matching
# the extended regex $2; the process id is left in $pid. Fails if the run ends first.
start_until_line() {
  local log=$1 pattern=$2; shift 2
  "$@" > "$log" 2>&1 &
  pid=$!
  for _ in $(seq 1 600); do
    if grep -qE "$pattern" "$log"; then return 0; fi
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.05
  done
  fail "$log: the run ended or stalled before a line like '$pattern'"
  return 1
}

# The same, until the log shows step $2.
start_until_step() {
  local log=$1 step=$2; shift 2
  start_until_line "$log" "^step +$step/" "$@"
}

# The process ids whose parent is $1 (from /proc: no procps needed).
children_of() {
  grep -l "^PPid:[[:space:]]*$1\$" /proc/[0-9]*/status 2>/dev/null | sed 's|/proc/\([0-9]*\)/status|\1|' | sort -n
}

# The per-step losses of logs, in order, and the final weights of two run directories, compared.
same_run() {  # name reference_log reference_dir step logs... : the logs' steps equal the reference's
  local name=$1 reference=$2 reference_dir=$3 dir=$4 step=$5; shift 5
  local step_dir; step_dir=$(printf "step_%08d" "$step")
  grep -E "^step" "$reference" | cut -d'|' -f1-2 > "$name.expected"
  cat "$@" | grep -E "^step" | cut -d'|' -f1-2 > "$name.got"
  if ! cmp -s "$name.expected" "$name.got"; then fail "$name: the loss curve differs from the uninterrupted run's"; return; fi
  # The same number of ranks on both sides: each rank's file (its pieces of the weights and the
  # optimizer state) must be the same bytes.
  local files=("$reference_dir/$step_dir"/rank_*.safetensors)
  if [ ! -f "${files[0]}" ]; then fail "$name: no checkpoint files in $reference_dir/$step_dir"; return; fi
  for file in "${files[@]}"; do
    if ! cmp -s "$file" "$dir/$step_dir/$(basename "$file")"; then fail "$name: the final weights differ"; return; fi
  done
  pass "$name: $(wc -l < "$name.got") steps and the final weights equal the uninterrupted run's"
}


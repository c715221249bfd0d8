#!/usr/bin/env bash
# train_gpt --metrics --prometheus --trace in a 2-rank job (one process without MPI), saving every
# 10 steps, comparing the ranks every 20 and tracing steps 6-12:
# the files read back by Python's json and prometheus_client (check_telemetry.py), the traces and
# their merge and picture (scripts/merge-traces.py, check_trace.py); a metrics path
# that cannot be written ends the run at start-up naming it.
# GPU sampling reads the tests' fake NVML (loaded through the same dlopen path as the real one).
# usage: train_gpt_telemetry.sh TRAIN_GPT WORK_DIR FAKE_NVML [MPIEXEC]
set -uo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
usage="usage: train_gpt_telemetry.sh TRAIN_GPT WORK_DIR FAKE_NVML [MPIEXEC]"
train_gpt=$(realpath "${1:?$usage}")
work=${2:?$usage}
fake_nvml=$(realpath "${3:?$usage}")
mpiexec=${4:-}
rm -rf "$work" && mkdir -p "$work" && cd "$work" || exit 1
# shellcheck source=tests/examples/train_gpt_runs.sh
source "$here/train_gpt_runs.sh"
launch=()
[ -n "$mpiexec" ] && launch=("$mpiexec" --oversubscribe -x OMP_NUM_THREADS -x LOOM_NVML_LIBRARY -np 2)
export OMP_NUM_THREADS=1
# Debian's interpreter, which sees python3-prometheus-client (scripts/install-deps.sh), even where
# another python3 comes first on the PATH.
python=/usr/bin/python3
[ -x "$python" ] || python=python3
steps=40 log_every=5 every=10 window=20 ranks=1
[ -n "$mpiexec" ] && ranks=2
if LOOM_NVML_LIBRARY=$fake_nvml "${launch[@]}" "$train_gpt" --gpu-sample-ms 5 --steps $steps --log-every $log_every --eval-every 0 --checkpoint-dir run \
     --checkpoint-every $every --straggler-every $window --metrics metrics.jsonl --prometheus loom.prom \
     --trace trace --trace-steps 6-12 --report report.md > run.log 2>&1; then
  if out=$("$python" "$here/check_telemetry.py" metrics.jsonl loom.prom $steps $log_every $every $window $ranks \
                 report.md 2>&1); then
    pass "$out"
  else
    fail "the telemetry files: $out"
  fi
  if grep -qE "^GPU sampling: NVML device 0 \(Fake H100 80GB HBM3\) every 5 ms$" run.log &&
     grep -qE "^GPU \(NVML device 0, Fake H100 80GB HBM3\): utilisation mean [0-9]+% \(p95 90%\), memory up to 40.0 of 80.0 GiB, power mean 350 W" run.log; then
    pass "the log names the sampled GPU and summarises its samples"
  else
    fail "the GPU sampling lines: $(grep GPU run.log)"
  fi
  if ! out=$("$python" "$here/../../scripts/merge-traces.py" trace -o merged.json --png timeline.png 2>&1); then
    fail "merge-traces.py: $out"
  elif out=$("$python" "$here/check_trace.py" trace $ranks 6 12 $every merged.json timeline.png 2>&1); then
    pass "$out"
  else
    fail "the trace files: $out"
  fi
else
  fail "the run failed: $(tail -5 run.log)"
fi
"$train_gpt" --steps 2 --log-every 1 > plain.log 2>&1 || fail "a run without NVML failed: $(tail -3 plain.log)"
LOOM_NVML_LIBRARY=/nonexistent/libnvidia-ml.so.1 "$train_gpt" --steps 2 > missing.log 2>&1 ||
  fail "a run with NVML missing failed: $(tail -3 missing.log)"
if grep -q "^GPU sampling: none (the model is on the CPU)$" plain.log &&
   grep -q "^GPU sampling: NVML not loaded (/nonexistent/libnvidia-ml.so.1: .*); training goes on without it$" missing.log; then
  pass "without NVML the run says why once and trains"
else
  fail "the runs without NVML: $(grep 'GPU sampling' plain.log missing.log)"
fi
if "$train_gpt" --steps 2 --metrics missing/metrics.jsonl > bad.log 2>&1; then
  fail "a metrics file in a missing directory was accepted"
elif grep -q "cannot open the metrics file 'missing/metrics.jsonl'" bad.log; then
  pass "an unwritable metrics file is named"
else
  fail "an unwritable metrics file: $(tail -3 bad.log)"
fi
[ "$failures" -eq 0 ] && echo "all telemetry checks passed"
exit "$failures"

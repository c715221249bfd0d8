#!/usr/bin/env bash
# loom-ckpt and scripts/loom_ckpt.py on a real sharded checkpoint (the guide's example, 2 ranks
# under ZeRO-3 with MPIEXEC, else one process):
#   - verify and inspect --verify pass, naming the ranks;
#   - consolidate gives a loom-checkpoint-1 checkpoint that verifies, and one process resumed from it
#     holds the same model (the same held-out error as the job that saved it);
#   - export from either layout and the Python script from either layout write the same bytes, and
#     the Python script's optimizer state equals consolidate's, tensor for tensor;
#   - a flipped byte in a rank file is named by loom-ckpt verify and by the Python script.
# usage: loom_ckpt.sh LOOM_CKPT CUSTOM_MODEL SOURCE_DIR WORK_DIR [MPIEXEC]
set -uo pipefail
ckpt=$(realpath "$1"); model=$(realpath "$2"); source=$(realpath "$3"); work=$4; mpiexec=${5:-}
rm -rf "$work" && mkdir -p "$work" && cd "$work" || exit 1
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }
pass() { echo "ok: $*"; }
script="$source/scripts/loom_ckpt.py"
step=step_00000100

if [[ -n $mpiexec ]]; then
  ranks=2; "$mpiexec" -np 2 "$model" --zero 3 --steps 100 --checkpoint-dir run > saved.log 2>&1
else
  ranks=1; "$model" --steps 100 --checkpoint-dir run > saved.log 2>&1
fi || fail "the saving run exited non-zero: $(tail -3 saved.log)"

"$ckpt" verify run/$step > verify.log 2>&1 && pass "verify: $(cat verify.log)" || fail "verify: $(cat verify.log)"
if "$ckpt" inspect run/$step --verify > inspect.log 2>&1 && grep -q "written by $ranks rank(s)" inspect.log &&
   [ "$(grep -c 'every CRC-32 verified' inspect.log)" -eq "$ranks" ]; then
  pass "inspect --verify: $ranks rank file(s), every piece verified"
else
  fail "inspect: $(cat inspect.log)"
fi

"$ckpt" consolidate run/$step whole/$step > consolidate.log 2>&1 || fail "consolidate: $(cat consolidate.log)"
"$ckpt" verify whole/$step > /dev/null 2>&1 || fail "the consolidated checkpoint does not verify"
grep -q '"format": "loom-checkpoint-1"' whole/$step/state.json || fail "the consolidated checkpoint is not loom-checkpoint-1"
"$model" --steps 100 --checkpoint-dir whole > resumed.log 2>&1 || fail "resuming the consolidated checkpoint: $(tail -3 resumed.log)"
if grep -q "resumed at step 100" resumed.log && [ "$(grep held-out saved.log)" = "$(grep held-out resumed.log)" ]; then
  pass "one process resumed from the consolidated checkpoint holds the saved model: $(grep held-out resumed.log)"
else
  fail "the consolidated checkpoint is another model:"; cat saved.log resumed.log
fi

"$ckpt" export run/$step export_sharded.safetensors > /dev/null || fail "export (sharded)"
"$ckpt" export whole/$step export_whole.safetensors > /dev/null || fail "export (consolidated)"
python3 "$script" run/$step py_sharded.safetensors > /dev/null || fail "loom_ckpt.py (sharded)"
python3 "$script" whole/$step py_whole.safetensors > /dev/null || fail "loom_ckpt.py (consolidated)"
if cmp -s export_sharded.safetensors export_whole.safetensors && cmp -s export_sharded.safetensors py_sharded.safetensors &&
   cmp -s export_sharded.safetensors py_whole.safetensors; then
  pass "export and loom_ckpt.py write the same bytes from either layout ($(stat -c %s py_sharded.safetensors) bytes)"
else
  fail "the exported weights differ between export and loom_ckpt.py or between layouts"
fi
python3 "$script" run/$step py_all.safetensors --optimizer > /dev/null || fail "loom_ckpt.py --optimizer"
if python3 - "$source/scripts" <<'PY'
import sys
sys.path.insert(0, sys.argv[1])
import loom_ckpt as lc
def tensors(path):
    header, start = lc.read_header(path)
    return {n: (e["dtype"], e["shape"], lc.read_entry(path, start, e)) for n, e in header.items() if n != "__metadata__"}
every = tensors("py_all.safetensors")
whole = tensors("whole/step_00000100/optimizer.safetensors")
assert whole and all(every[n] == whole[n] for n in whole), "optimizer state differs"
PY
then pass "loom_ckpt.py --optimizer equals consolidate's optimizer state, tensor for tensor"
else fail "loom_ckpt.py --optimizer differs from consolidate's optimizer state"; fi

last=run/$step/rank_$(printf %05d $((ranks - 1))).safetensors
python3 -c "import sys; f=open(sys.argv[1],'r+b'); f.seek(-5, 2); b=f.read(1); f.seek(-5, 2); f.write(bytes([b[0]^0x5a]))" "$last"
if ! "$ckpt" verify run/$step > damaged.log 2>&1 && grep -q "$(basename "$last")' is damaged" damaged.log; then
  pass "a flipped byte: loom-ckpt verify names $(basename "$last")"
else
  fail "loom-ckpt verify missed the flipped byte: $(cat damaged.log)"
fi
if ! python3 "$script" run/$step damaged.safetensors --optimizer > py_damaged.log 2>&1 && grep -q "fails its CRC-32" py_damaged.log; then
  pass "a flipped byte: loom_ckpt.py names the piece"
else
  fail "loom_ckpt.py missed the flipped byte: $(cat py_damaged.log)"
fi
if [ "$ranks" -gt 1 ]; then  # rank 1's file replaced by rank 0's, state.json made to agree: pieces twice
  rm -rf doubled && cp -r run/$step doubled
  cp doubled/rank_00000.safetensors doubled/rank_00001.safetensors
  python3 -c "import json,sys; p='doubled/state.json'; m=json.load(open(p)); m['files']['rank_00001.safetensors']=m['files']['rank_00000.safetensors']; json.dump(m,open(p,'w'))"
  if ! python3 "$script" doubled doubled.safetensors > py_doubled.log 2>&1 && grep -q "twice" py_doubled.log &&
     ! "$ckpt" verify doubled > doubled.log 2>&1 && grep -q "twice" doubled.log; then
    pass "a rank file that repeats another's pieces: both tools name the element covered twice"
  else
    fail "a repeated rank file was not named: $(cat py_doubled.log doubled.log)"
  fi
fi
echo "$failures failure(s)"
exit $((failures > 0))

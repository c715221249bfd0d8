#!/usr/bin/env bash
# Encryption at rest as an operator uses it (issue 32): train_gpt --key-file on shards that
# loom-crypt encrypted trains the same bits as the plain run on plain shards (the same losses,
# and its last checkpoint decrypts to the plain run's rank file byte for byte); every file of its
# checkpoints is encrypted; a resume from step 20 continues bit for bit; without the key, or with
# another one, the resume is refused naming the key id and nothing in the checkpoint folder
# changes; with a key, a plain checkpoint and plain shards are refused by name unless
# --allow-plain-input is given, and then the run resumes from the plain checkpoint bit for bit and
# writes encrypted ones; a key file others may read is refused by name.
# usage: train_gpt_encrypted.sh TRAIN_GPT LOOM_CRYPT WORK_DIR
set -uo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
usage="usage: train_gpt_encrypted.sh TRAIN_GPT LOOM_CRYPT WORK_DIR"
train_gpt=$(realpath "${1:?$usage}")
crypt=$(realpath "${2:?$usage}")
work=${3:?$usage}
rm -rf "$work" && mkdir -p "$work/shards" && cd "$work" || exit 1
# shellcheck source=tests/examples/train_gpt_runs.sh
source "$here/train_gpt_runs.sh"
export OMP_NUM_THREADS=1
unset LOOM_KEY_FILE LOOM_JOB_TOKEN
python=/usr/bin/python3
[ -x "$python" ] || python=python3
"$python" - "$here/../../README.md" "$here/../../docs/ARCHITECTURE.md" <<'PY' || { echo "FAIL: making the shards"; exit 1; }
import struct, sys
text = b"".join(open(p, "rb").read() for p in sys.argv[1:])
cuts = [0, len(text) // 2, len(text)]
for i in range(2):
    tokens = text[cuts[i]:cuts[i + 1]]
    with open(f"shards/train_{i:03d}.bin", "wb") as f:
        f.write(struct.pack("<256i", 20240520, 1, len(tokens), *([0] * 253)))
        f.write(struct.pack(f"<{len(tokens)}H", *tokens))
PY
"$crypt" keygen key > /dev/null && "$crypt" keygen other > /dev/null || { echo "FAIL: keygen"; exit 1; }
"$crypt" encrypt shards sealed --key-file key --chunk-kb 64 > /dev/null || { echo "FAIL: encrypting the shards"; exit 1; }
id=$("$crypt" inspect sealed/train_000.bin | grep -oE 'key id [0-9a-f]{32}' | cut -d' ' -f3)
[ -n "$id" ] || { echo "FAIL: no key id in loom-crypt inspect's line"; exit 1; }

loss_at() { sed -nE "s/^step +$1\/[0-9]+ \| loss ([0-9.]+) .*/\1/p" "$2"; }
losses() { for s in "${@:2}"; do loss_at "$s" "$1"; done | tr '\n' ' '; }
common=(--steps 40 --log-every 10 --eval-every 0 --checkpoint-every 20 --batch 4 --grad-accum 2 --seed 3)
magic_of() { head -c 8 "$1" | tr -d '\0'; }
decrypted() { "$crypt" decrypt "$1" "$2" --key-file key > /dev/null; }

"$train_gpt" "${common[@]}" --data "shards:shards/train_*.bin" --checkpoint-dir plain > plain.log 2>&1 ||
  fail "the plain run exited $?: $(tail -3 plain.log)"
"$train_gpt" "${common[@]}" --data "shards:sealed/train_*.bin" --checkpoint-dir sealed_run --key-file key \
  > sealed.log 2>&1 || fail "the encrypted run exited $?: $(tail -3 sealed.log)"
if [ -n "$(loss_at 40 plain.log)" ] && [ "$(losses sealed.log 10 20 30 40)" = "$(losses plain.log 10 20 30 40)" ] &&
   grep -q "^encryption at rest: key $id" sealed.log &&
   decrypted sealed_run/step_00000040/rank_00000.safetensors last.safetensors &&
   cmp -s last.safetensors plain/step_00000040/rank_00000.safetensors; then
  pass "encrypted shards train the plain run's bits: losses $(losses sealed.log 10 20 30 40)and a checkpoint that decrypts to the plain one's rank file"
else
  fail "encrypted against plain: losses $(losses sealed.log 10 20 30 40)against $(losses plain.log 10 20 30 40)"
fi
plain_files=0
for f in sealed_run/step_*/*; do
  [ "$(magic_of "$f")" = "LOOMCRYP" ] || { plain_files=$((plain_files + 1)); echo "  not encrypted: $f"; }
done
if [ "$plain_files" = 0 ] && ls sealed_run/step_00000020/state.json > /dev/null 2>&1; then
  pass "every file of the encrypted run's checkpoints is encrypted ($(ls sealed_run/step_*/* | wc -l) files)"
else
  fail "$plain_files checkpoint file(s) of the encrypted run are plain"
fi

# Resume from step 20 with the key: the losses at 30 and 40, and the last rank file, as uninterrupted.
rm -rf sealed_run/step_00000040 last.safetensors
if "$train_gpt" "${common[@]}" --data "shards:sealed/train_*.bin" --checkpoint-dir sealed_run --key-file key \
     > resumed.log 2>&1 && grep -qE "resum.*step 20|step 20.*resum" resumed.log &&
   [ "$(losses resumed.log 30 40)" = "$(losses plain.log 30 40)" ] &&
   decrypted sealed_run/step_00000040/rank_00000.safetensors last.safetensors &&
   cmp -s last.safetensors plain/step_00000040/rank_00000.safetensors; then
  pass "the encrypted run resumes from step 20 bit for bit: losses $(losses resumed.log 30 40)"
else
  fail "the encrypted resume: losses $(losses resumed.log 30 40)against $(losses plain.log 30 40); $(tail -3 resumed.log)"
fi

# No key, another key: refused by name, the checkpoint folder untouched.
rm -rf sealed_run/step_00000040
snapshot() { find sealed_run plain -type f -exec sha256sum {} + | sort; }
before=$(snapshot)
refused() {  # NAME PATTERN ARGS...
  local name=$1 pattern=$2; shift 2
  "$train_gpt" "${common[@]}" "$@" > refused.log 2>&1
  local code=$?
  local after
  after=$(snapshot)
  if [ "$code" != 0 ] && grep -qE "$pattern" refused.log && ! grep -qE "^step +[0-9]+/" refused.log &&
     [ "$after" = "$before" ]; then
    pass "$name: refused (exit $code), nothing written: $(grep -m1 -oE "$pattern.{0,60}" refused.log)"
  else
    fail "$name: exit $code, $(tail -2 refused.log)"
  fi
}
refused "no key" "is encrypted \(key id $id\); give its key with --key-file" --data "shards:shards/train_*.bin" \
  --checkpoint-dir sealed_run
refused "another key" "encrypted under key id $id, but the key given .* has id" --data "shards:shards/train_*.bin" \
  --checkpoint-dir sealed_run --key-file other --allow-plain-input
refused "a plain checkpoint with a key" "state.json' is plain, but this run encrypts at rest \(key id $id\)" \
  --data "shards:sealed/train_*.bin" --checkpoint-dir plain --key-file key
refused "plain shards with a key" "token shard '[^']*train_000.bin' is plain.*--allow-plain-input" \
  --data "shards:shards/train_*.bin" --checkpoint-dir sealed_run --key-file key
chmod 0644 key
refused "a key file others may read" "key.*(0644|readable)" --data "shards:sealed/train_*.bin" \
  --checkpoint-dir sealed_run --key-file key
chmod 0600 key
refused "encrypted shards without a key" "train_000.bin' is encrypted \(key id $id\)" --data "shards:sealed/train_*.bin"

# --allow-plain-input: the plain run's step 20 resumed with a key continues bit for bit, and what
# it saves from then on is encrypted.
cp -r plain moving && rm -rf moving/step_00000040
if "$train_gpt" "${common[@]}" --data "shards:shards/train_*.bin" --checkpoint-dir moving --key-file key \
     --allow-plain-input > moving.log 2>&1 && grep -q "plain checkpoints and shards are read too" moving.log &&
   [ "$(losses moving.log 30 40)" = "$(losses plain.log 30 40)" ] &&
   [ "$(magic_of moving/step_00000040/rank_00000.safetensors)" = "LOOMCRYP" ] &&
   [ "$(magic_of moving/step_00000020/rank_00000.safetensors)" != "LOOMCRYP" ]; then
  pass "--allow-plain-input resumes a plain checkpoint with a key: losses $(losses moving.log 30 40)and step 40 encrypted"
else
  fail "--allow-plain-input: losses $(losses moving.log 30 40)against $(losses plain.log 30 40); $(tail -3 moving.log)"
fi
[ "$failures" = 0 ]

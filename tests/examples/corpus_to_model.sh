#!/usr/bin/env bash
# The README's path from a text corpus to a trained model, as a user runs it: loom-tokenize train
# (a 512-token vocabulary from this repository's docs), loom-tokenize encode (the docs as llm.c
# shards, <|endoftext|> between documents), train_gpt --data shards:... --tokenizer (the loss falls
# and the sample is decoded text); and a --tokenizer larger than the model's vocabulary named.
# usage: corpus_to_model.sh LOOM_TOKENIZE TRAIN_GPT SOURCE_DIR WORK_DIR
set -uo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
usage="usage: corpus_to_model.sh LOOM_TOKENIZE TRAIN_GPT SOURCE_DIR WORK_DIR"
tokenize=$(realpath "${1:?$usage}")
train_gpt=$(realpath "${2:?$usage}")
source_dir=$(realpath "${3:?$usage}")
work=${4:?$usage}
rm -rf "$work" && mkdir -p "$work" && cd "$work" || exit 1
# shellcheck source=tests/examples/train_gpt_runs.sh
source "$here/train_gpt_runs.sh"
export OMP_NUM_THREADS=1
corpus=("$source_dir/README.md" "$source_dir"/docs/*.md)
if "$tokenize" train --vocab-size 512 --out vocab "${corpus[@]}" > train.log 2>&1 &&
   grep -qE "^trained 512 tokens \(256 bytes, 255 merges, 1 special\)" train.log &&
   [ -s vocab/vocab.json ] && [ -s vocab/merges.txt ] && [ -s vocab/tokenizer.json ]; then
  pass "loom-tokenize train: $(head -1 train.log)"
else
  fail "loom-tokenize train: $(tail -3 train.log)"
fi
if "$tokenize" encode --vocab vocab --out shards/docs --shard-tokens 20000 --threads 2 "${corpus[@]}" > encode.log 2>&1 &&
   grep -qE "^wrote [0-9]+ shards \(shards/docs_000000.bin \.\.\. shards/docs_[0-9]{6}.bin\), [0-9]+ tokens$" encode.log &&
   grep -qE "[0-9]+/[0-9]+ files, [0-9]+ documents, [0-9]+ tokens, .* tokens/s" encode.log; then
  pass "loom-tokenize encode: $(grep '^wrote' encode.log)"
else
  fail "loom-tokenize encode: $(tail -3 encode.log)"
fi
loss_at() { sed -nE "s/^step +$1\/[0-9]+ \| loss ([0-9.]+) .*/\1/p" "$2"; }
if "$train_gpt" --data 'shards:shards/docs_*.bin' --vocab 512 --tokenizer vocab --steps 150 --log-every 50 \
     --eval-every 0 > run.log 2>&1; then
  first=$(loss_at 50 run.log) last=$(loss_at 150 run.log)
  sample=$(sed -n '/^sample:/{n;p}' run.log)
  if awk -v a="$first" -v b="$last" 'BEGIN { exit !(b < a - 0.5) }' && [ -n "$sample" ] &&
     ! grep -q "token ids" run.log; then
    pass "train_gpt on the shards: loss $first at step 50, $last at step 150; sample: ${sample:0:60}..."
  else
    fail "train_gpt on the shards: loss $first -> $last; sample '${sample:0:60}'"
  fi
else
  fail "train_gpt on the shards exited $?: $(tail -3 run.log)"
fi
if "$train_gpt" --data 'shards:shards/docs_*.bin' --vocab 300 --tokenizer vocab --steps 2 > small.log 2>&1; then
  fail "a tokenizer larger than the model's vocabulary was accepted"
elif grep -q "tokenizer vocab has 512 tokens, more than the model's vocabulary of 300: give --vocab 512" small.log; then
  pass "a tokenizer larger than the model's vocabulary is named"
else
  fail "a tokenizer larger than the vocabulary: $(tail -2 small.log)"
fi
[ "$failures" -eq 0 ] && echo "all corpus-to-model checks passed"
exit "$failures"

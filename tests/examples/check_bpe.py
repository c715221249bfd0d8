#!/usr/bin/env python3
"""loom's byte-level BPE against Hugging Face `tokenizers` (the reference; pip, used only here).

usage: check_bpe.py LOOM_TOKENIZE WORK_DIR CORPUS_FILES...

1. A vocabulary trained by `tokenizers` on the corpus, loaded by loom from tokenizer.json and from
   vocab.json + merges.txt: loom's ids equal tokenizers' on crafted texts (ASCII, contractions,
   digits, white space runs, Unicode of several scripts and classes, <|endoftext|>) and on 300
   random ones, and every text decodes back byte for byte (also text that is not UTF-8).
2. A vocabulary trained by `loom-tokenize train` loads into tokenizers, which gives loom's ids.
3. `loom-tokenize encode` writes llm.c shards holding <|endoftext|> + each document's ids, in order,
   also when it cuts the files into parts of 1 KiB (lines of JSONL, and text files inside documents).
Prints one line per check; exits 1 on the first failure.
"""
import json
import os
import random
import struct
import subprocess
import sys

from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

loom, work, corpus = sys.argv[1], sys.argv[2], sys.argv[3:]
os.makedirs(work, exist_ok=True)


def fail(message):
    print("FAIL: " + message)
    sys.exit(1)


CRAFTED = [
    "Hello world's  end\n\n  x 123 !!  it's  I'll they're WE'VE 'S 'll'd ''s\t\ttabs\r\n",
    "<|endoftext|>Ünïcödé 日本語のテキスト Привет мир ١٢٣ 3.14159 😀😀 café\u00a0naïve   \n",
    "a<|endoftext|><|endoftext|>b  <|endoftext|>  ",
    "   leading and trailing   ",
    "x\u2028y\u2029z\u3000w\u0085v\u000bu\u000cq",
    "e\u0301 (combining)  ² ½ Ⅻ ⅻ 𝟘𝟙 ٣ ๓ ፲",
    "\n\n\n",
    " ",
    "",
    "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa",
    "!!!!!!!!!!!!=============-----------------",
    "printf(\"%d\\n\", x); // a comment\n    return 0;\n}",
]
POOL = ("abcdefghijklmnopqrstuvwxyzABCXYZ0123456789 \t\n\r.,;:!?'\"()[]{}<>-_=+*/\\|@#$%^&~`"
        "éèüößñçÀÉΩαβγδ日本語中文한국어Привет١٢٣٤²½Ⅻ😀🚀\u00a0\u2028\u3000\u0301")


def random_texts(n, seed=7):
    rng = random.Random(seed)
    texts = []
    for _ in range(n):
        parts = []
        for _ in range(rng.randint(1, 40)):
            r = rng.random()
            if r < 0.05:
                parts.append("<|endoftext|>")
            elif r < 0.25:
                parts.append(rng.choice(["'s", "'t", "'re", "'ve", "'m", "'ll", "'d", " the", " and", "  ", "\n\n"]))
            else:
                parts.append("".join(rng.choice(POOL) for _ in range(rng.randint(1, 8))))
        texts.append("".join(parts))
    return texts


def write_texts(texts, directory):
    os.makedirs(directory, exist_ok=True)
    paths = []
    for i, text in enumerate(texts):
        path = os.path.join(directory, f"t{i:04d}.txt")
        with open(path, "wb") as f:
            f.write(text.encode("utf-8") if isinstance(text, str) else text)
        paths.append(path)
    return paths


def loom_ids(vocab, paths):
    out = subprocess.run([loom, "ids", "--vocab", vocab, *paths], capture_output=True, text=True)
    if out.returncode != 0:
        fail(f"loom-tokenize ids --vocab {vocab}: {out.stderr.strip()}")
    return [json.loads(line) for line in out.stdout.splitlines()]


def compare(name, vocab, reference, texts, paths):
    results = loom_ids(vocab, paths)
    for text, result in zip(texts, results):
        expected = reference.encode(text).ids
        if result["ids"] != expected:
            first = next((i for i, (a, b) in enumerate(zip(result["ids"], expected)) if a != b),
                         min(len(result["ids"]), len(expected)))
            fail(f"{name}: {result['file']} ({text[:60]!r}...): loom {result['ids'][max(0, first - 2):first + 4]} "
                 f"against tokenizers {expected[max(0, first - 2):first + 4]} at id {first}")
        if not result["round_trip"]:
            fail(f"{name}: {result['file']} does not decode back to its bytes")
        if reference.decode(expected, skip_special_tokens=False) != text:
            fail(f"{name}: tokenizers' own decode of {result['file']} differs (the reference is off)")
    print(f"ok: {name}: loom's ids equal tokenizers' on {len(texts)} texts, and each decodes back")


texts = CRAFTED + random_texts(300)
paths = write_texts(texts, os.path.join(work, "texts"))

# 1. tokenizers' vocabulary in loom.
hf_dir = os.path.join(work, "hf")
os.makedirs(hf_dir, exist_ok=True)
reference = Tokenizer(models.BPE())
reference.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
reference.decoder = decoders.ByteLevel()
reference.train(corpus, trainers.BpeTrainer(vocab_size=3000, special_tokens=["<|endoftext|>"], show_progress=False,
                                             initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
reference.save(os.path.join(hf_dir, "tokenizer.json"))
files_dir = os.path.join(work, "hf_files")
os.makedirs(files_dir, exist_ok=True)
reference.model.save(files_dir)  # vocab.json + merges.txt
compare("tokenizers' tokenizer.json", os.path.join(hf_dir, "tokenizer.json"), reference, texts, paths)
compare("tokenizers' vocab.json + merges.txt", files_dir, reference, texts, paths)

not_utf8 = write_texts([b"caf\xe9 \xff\xfe ok \xe6\x97\xa5\xe6 end\x80"], os.path.join(work, "bytes"))
if not loom_ids(files_dir, not_utf8)[0]["round_trip"]:
    fail("text that is not UTF-8 does not decode back to its bytes")
print("ok: text that is not UTF-8 encodes and decodes back byte for byte")

# 2. loom's vocabulary in tokenizers.
loom_dir = os.path.join(work, "loom_vocab")
out = subprocess.run([loom, "train", "--vocab-size", "2000", "--out", loom_dir, *corpus], capture_output=True, text=True)
if out.returncode != 0:
    fail(f"loom-tokenize train: {out.stderr.strip()}")
# Counted in parts of 1 KiB, the corpus trains the same vocabulary.
out = subprocess.run([loom, "train", "--vocab-size", "2000", "--part-kb", "1", "--out", loom_dir + "_parts", *corpus],
                     capture_output=True, text=True)
if out.returncode != 0:
    fail(f"loom-tokenize train --part-kb 1: {out.stderr.strip()}")
for name in ("vocab.json", "merges.txt", "tokenizer.json"):
    if open(os.path.join(loom_dir, name), "rb").read() != open(os.path.join(loom_dir + "_parts", name), "rb").read():
        fail(f"loom-tokenize train --part-kb 1 wrote another {name} than whole files give")
print("ok: loom-tokenize train counts the corpus in parts of 1 KiB into the same vocabulary files")
trained = Tokenizer.from_file(os.path.join(loom_dir, "tokenizer.json"))
if trained.get_vocab_size() != 2000:
    fail(f"loom's trained vocabulary has {trained.get_vocab_size()} tokens in tokenizers, not 2000: {out.stdout}")
compare("loom-trained tokenizer.json in tokenizers", loom_dir, trained, texts, paths)
# The same vocabulary as plain files, which tokenizers' BPE model also reads.
from_files = Tokenizer(models.BPE.from_file(os.path.join(loom_dir, "vocab.json"), os.path.join(loom_dir, "merges.txt")))
from_files.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
from_files.decoder = decoders.ByteLevel()
from_files.add_special_tokens(["<|endoftext|>"])
plain = [t.replace("<|endoftext|>", "") for t in texts]
compare("loom-trained vocab.json + merges.txt in tokenizers", os.path.join(loom_dir, "tokenizer.json"), from_files,
        plain, write_texts(plain, os.path.join(work, "plain")))

# 3. Shards.
documents = [t for t in texts[:80] if "<|endoftext|>" not in t]
with open(os.path.join(work, "docs.jsonl"), "w", encoding="utf-8") as f:
    for d in documents:
        f.write(json.dumps({"id": 1, "text": d}) + "\n")
eot = reference.token_to_id("<|endoftext|>")


def encoded_shards(name, args, inputs, shard_tokens):
    """loom-tokenize encode's shards of `inputs`, as one token list."""
    prefix = os.path.join(work, name, "docs")
    os.makedirs(os.path.dirname(prefix), exist_ok=True)
    out = subprocess.run([loom, "encode", "--vocab", hf_dir, "--out", prefix, "--shard-tokens", str(shard_tokens),
                          "--threads", "2", *args, *inputs], capture_output=True, text=True)
    if out.returncode != 0:
        fail(f"loom-tokenize encode {' '.join(args)}: {out.stderr.strip()}")
    shards = sorted(p for p in os.listdir(os.path.dirname(prefix)))
    tokens = []
    for shard in shards:
        with open(os.path.join(os.path.dirname(prefix), shard), "rb") as f:
            header = struct.unpack("<256i", f.read(1024))
            body = f.read()
        if header[:2] != (20240520, 1) or len(body) != 2 * header[2] or header[2] > shard_tokens:
            fail(f"shard {shard}: header {header[:3]} against {len(body)} bytes of tokens")
        tokens += list(struct.unpack(f"<{header[2]}H", body))
    if len(shards) != (len(tokens) + shard_tokens - 1) // shard_tokens:
        fail(f"loom-tokenize encode {' '.join(args)}: {len(tokens)} tokens in {len(shards)} shards of {shard_tokens}")
    return tokens, len(shards)


for part_kb in ("4096", "1"):  # whole files, and parts of 1 KiB cut inside lines and documents
    tokens, count = encoded_shards("shards_" + part_kb, ["--jsonl-field", "text", "--part-kb", part_kb],
                                   [os.path.join(work, "docs.jsonl")], 500)
    expected = []
    for d in documents:
        expected += [eot] + reference.encode(d).ids
    if tokens != expected:
        fail(f"loom-tokenize encode --part-kb {part_kb}: {len(tokens)} tokens, expected {len(expected)}")
print(f"ok: loom-tokenize encode wrote {len(documents)} JSONL documents as <|endoftext|> + their ids in "
      f"{count} shards of at most 500 tokens, whole and in parts of 1 KiB")
# Text files, each one document: cut into parts of 1 KiB, they give the ids of the whole files.
tokens, count = encoded_shards("shards_text", ["--part-kb", "1"], corpus, 100000)
expected = []
for path in corpus:
    expected += [eot] + reference.encode(open(path, encoding="utf-8").read()).ids
if tokens != expected:
    first = next((i for i, (a, b) in enumerate(zip(tokens, expected)) if a != b), min(len(tokens), len(expected)))
    fail(f"loom-tokenize encode of the corpus in 1 KiB parts differs from tokenizers at token {first} "
         f"({len(tokens)} tokens, expected {len(expected)})")
print(f"ok: {len(corpus)} text files encoded in parts of 1 KiB ({sum(os.path.getsize(p) for p in corpus) // 1024} KiB) "
      f"give tokenizers' ids of the whole files ({len(tokens)} tokens)")

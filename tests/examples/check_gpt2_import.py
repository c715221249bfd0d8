#!/usr/bin/env python3
"""GPT-2 weights in and out of loom, against Hugging Face transformers' GPT2LMHeadModel.

usage: check_gpt2_import.py LOOM_CONVERT TRAIN_GPT WORK_DIR

transformers (4.46, the last to run on Debian's PyTorch 1.13) is installed by
scripts/install-deps.sh into a directory of its own, which tests/examples puts on PYTHONPATH.

1. A small random GPT-2 made here (every weight, bias and LayerNorm parameter drawn, vocabulary 97
   so that loom pads it) and saved by save_pretrained: loom's logits on a batch equal
   GPT2LMHeadModel's within 1e-5 (fp32).
2. hf -> loom -> hf: the exported model.safetensors holds the same tensors, bit for bit, and
   transformers loads it; hf -> loom -> hf -> loom gives the same loom weights file contents.
3. An llm.c model file written here as llm.c's train_gpt2.py writes one (fp32, version 3; and
   bf16, version 5): loom's logits equal transformers' (fp32), and llmc -> loom -> llmc gives back
   the file byte for byte.
4. train_gpt --init-from hf:DIR fine-tunes on token shards and its loss falls; the checkpoint
   exported to hf: loads in transformers, whose logits equal loom's from the checkpoint.
5. Bad input is named: a config that disagrees with the tensors, an untied head, a truncated
   llm.c file, an architecture flag that disagrees with --init-from.
Prints one line per check; exits 1 on the first failure, 77 (skipped) when transformers is absent.
"""
import json
import os
import re
import shutil
import struct
import subprocess
import sys

try:
    import numpy as np
    import torch
    from safetensors.numpy import load_file, save_file
    from transformers import GPT2Config, GPT2LMHeadModel
except ImportError as error:
    print(f"SKIP: {error}: the reference needs PyTorch (python3-torch) and transformers 4.46 "
          "(scripts/install-deps.sh installs both)")
    sys.exit(77)

convert, train_gpt, work = (os.path.abspath(a) for a in sys.argv[1:4])
shutil.rmtree(work, ignore_errors=True)
os.makedirs(work)
os.chdir(work)
torch.manual_seed(1234)
VOCAB, CONTEXT, WIDTH, LAYERS, HEADS = 97, 24, 32, 2, 4


def fail(message):
    print("FAIL: " + message)
    sys.exit(1)


def run(*args, ok=True):
    done = subprocess.run(list(args), capture_output=True, text=True)
    if ok and done.returncode != 0:
        fail(f"{' '.join(args)} exited {done.returncode}: {done.stderr.strip()}")
    return done


def make_model():
    config = GPT2Config(vocab_size=VOCAB, n_positions=CONTEXT, n_embd=WIDTH, n_layer=LAYERS, n_head=HEADS)
    model = GPT2LMHeadModel(config).eval()
    with torch.no_grad():  # not GPT-2's init: biases and LayerNorms must be mapped too
        for name, p in model.named_parameters():
            p.copy_(torch.randn_like(p) * (0.3 if "ln" in name or "bias" in name else 0.25) + (1.0 if name.endswith("ln_1.weight") else 0.0))
    return model


tokens = torch.randint(0, VOCAB, (3, CONTEXT))
with open("tokens.txt", "w") as f:
    for row in tokens.tolist():
        f.write(" ".join(map(str, row)) + "\n")


def loom_logits(source):
    run(convert, "logits", source, "tokens.txt", "logits.bin")
    return np.fromfile("logits.bin", dtype="<f4").reshape(3, CONTEXT, VOCAB)


def hf_logits(model):
    with torch.no_grad():
        return model(tokens).logits.numpy()


# 1. transformers' GPT-2 -> loom: the same logits.
model = make_model()
model.save_pretrained("hf", safe_serialization=True)
reference = hf_logits(model)
diff = np.abs(loom_logits("hf:hf") - reference).max()
if not diff <= 1e-5:
    fail(f"loom's logits differ from GPT2LMHeadModel's by {diff:g}")
print(f"ok: loom's logits of the imported GPT-2 equal transformers' (max difference {diff:.2g}, logits up to "
      f"{np.abs(reference).max():.1f})")

# 2. hf -> loom -> hf, and again into loom: bit for bit.
run(convert, "convert", "hf:hf", "loom:model.safetensors")
run(convert, "convert", "loom:model.safetensors", "hf:hf_back")
original, back = load_file("hf/model.safetensors"), load_file("hf_back/model.safetensors")
original.pop("lm_head.weight", None)
if sorted(original) != sorted(back) or any(not np.array_equal(original[k].view(np.uint32), back[k].view(np.uint32)) for k in original):
    fail(f"hf -> loom -> hf changed the tensors: {sorted(set(original) ^ set(back))}")
reloaded = GPT2LMHeadModel.from_pretrained("hf_back").eval()
if not np.array_equal(hf_logits(reloaded), reference):
    fail("transformers' logits of the exported model differ from the original's")
run(convert, "convert", "hf:hf_back", "loom:again.safetensors")
first, again = load_file("model.safetensors"), load_file("again.safetensors")
if sorted(first) != sorted(again) or any(not np.array_equal(first[k].view(np.uint32), again[k].view(np.uint32)) for k in first):
    fail("hf -> loom -> hf -> loom changed loom's weights")
print(f"ok: hf -> loom -> hf gives the same {len(back)} tensors bit for bit, transformers loads them with the same "
      "logits, and reading them back gives the same loom weights")


# 3. llm.c's model file, written as its train_gpt2.py writes one.
def write_llmc(path, model, bf16):
    sd = {k: v.detach() for k, v in model.state_dict().items()}
    padded = (VOCAB + 127) // 128 * 128
    conv = lambda name: sd[name].t().contiguous()  # Conv1D [in, out] -> [out, in]
    parts = [torch.cat([sd["transformer.wte.weight"], torch.zeros(padded - VOCAB, WIDTH)]), sd["transformer.wpe.weight"]]
    per_layer = [("ln_1.weight", False), ("ln_1.bias", False), ("attn.c_attn.weight", True), ("attn.c_attn.bias", False),
                 ("attn.c_proj.weight", True), ("attn.c_proj.bias", False), ("ln_2.weight", False), ("ln_2.bias", False),
                 ("mlp.c_fc.weight", True), ("mlp.c_fc.bias", False), ("mlp.c_proj.weight", True), ("mlp.c_proj.bias", False)]
    for suffix, transpose in per_layer:
        names = [f"transformer.h.{l}.{suffix}" for l in range(LAYERS)]
        parts.append(torch.stack([conv(n) if transpose else sd[n] for n in names]))
    parts += [sd["transformer.ln_f.weight"], sd["transformer.ln_f.bias"]]
    with open(path, "wb") as f:
        f.write(struct.pack("<256i", 20240326, 5 if bf16 else 3, CONTEXT, VOCAB, LAYERS, HEADS, WIDTH, padded, *([0] * 248)))
        for p in parts:
            p = p.contiguous()
            f.write((p.to(torch.bfloat16).view(torch.int16) if bf16 else p).numpy().tobytes())


write_llmc("model.bin", model, bf16=False)
diff = np.abs(loom_logits("llmc:model.bin") - reference).max()
if not diff <= 1e-5:
    fail(f"loom's logits from the llm.c file differ from transformers' by {diff:g}")
for name, bf16 in (("model.bin", False), ("model_bf16.bin", True)):
    if bf16:
        write_llmc(name, model, bf16=True)
    run(convert, "convert", "llmc:" + name, "loom:from_llmc.safetensors")
    run(convert, "convert", "loom:from_llmc.safetensors", "llmc:back_" + name)
    if open(name, "rb").read() != open("back_" + name, "rb").read():
        fail(f"llmc -> loom -> llmc changed {name}")
print(f"ok: an llm.c model file gives transformers' logits (max difference {diff:.2g}); llmc -> loom -> llmc gives "
      "back the fp32 and the bf16 file byte for byte")

# 4. Fine-tuning from the Hugging Face directory, and back to it.
g = torch.Generator().manual_seed(7)
os.makedirs("shards")
stream = []
for _ in range(400):  # a learnable stream: short runs of counting modulo the vocabulary
    start, length = int(torch.randint(0, VOCAB, (1,), generator=g)), int(torch.randint(4, 12, (1,), generator=g))
    stream += [(start + i) % VOCAB for i in range(length)]
with open("shards/train_000.bin", "wb") as f:
    f.write(struct.pack("<256i", 20240520, 1, len(stream), *([0] * 253)))
    f.write(struct.pack(f"<{len(stream)}H", *stream))
log = run(train_gpt, "--init-from", "hf:hf", "--data", "shards:shards/*.bin", "--steps", "60", "--batch", "8",
          "--lr", "1e-2", "--warmup", "5", "--log-every", "1", "--eval-every", "0", "--checkpoint-dir", "run").stdout
losses = [float(x) for x in re.findall(r"^step +\d+/60 \| loss ([0-9.]+)", log, re.M)]
if "initial weights: hf:hf" not in log or len(losses) != 60:
    fail(f"train_gpt --init-from hf:hf: {log[-600:]}")
early, late = sum(losses[:5]) / 5, sum(losses[-5:]) / 5
if not late < early - 0.5:
    fail(f"fine-tuning from hf:hf did not learn: loss {early:.3f} over the first 5 steps, {late:.3f} over the last 5")
run(convert, "convert", "run", "hf:tuned")
tuned = GPT2LMHeadModel.from_pretrained("tuned").eval()
diff = np.abs(loom_logits("loom:run") - hf_logits(tuned)).max()
if not diff <= 1e-5:
    fail(f"the fine-tuned checkpoint's logits in transformers differ from loom's by {diff:g}")
print(f"ok: train_gpt --init-from hf:hf fine-tunes (loss {early:.2f} -> {late:.2f}); its checkpoint exported to hf: "
      f"gives loom's logits in transformers (max difference {diff:.2g})")

# 5. Bad input, each named.
shutil.copytree("hf", "bad_config")
config = json.load(open("bad_config/config.json"))
config["n_embd"] = 48
json.dump(config, open("bad_config/config.json", "w"))
untied = make_model()
untied.config.tie_word_embeddings = False
untied.lm_head.weight = torch.nn.Parameter(untied.transformer.wte.weight.detach().clone() + 1)
untied.save_pretrained("untied_config", safe_serialization=True)
shutil.copytree("hf", "untied_head")  # a config that says tied, and an lm_head that is not
tensors = load_file("hf/model.safetensors")
tensors["lm_head.weight"] = tensors["transformer.wte.weight"] + 1
save_file(tensors, "untied_head/model.safetensors", metadata={"format": "pt"})
open("truncated.bin", "wb").write(open("model.bin", "rb").read()[:-4])
cases = [
    ([convert, "inspect", "hf:bad_config"], r"transformer\.wte\.weight' is \(97, 32\) but config\.json \(n_embd 48"),
    ([convert, "inspect", "hf:untied_config"], r"tie_word_embeddings is false but loom's GPT ties the head"),
    ([convert, "inspect", "hf:untied_head"], r"lm_head\.weight differs from wte"),
    ([convert, "inspect", "llmc:truncated.bin"], r"truncated"),
    ([train_gpt, "--init-from", "hf:hf", "--layers", "3", "--data", "shards:shards/*.bin", "--steps", "1"],
     r"--layers 3 disagrees with hf:hf, whose model has 2"),
]
for args, pattern in cases:
    done = run(*args, ok=False)
    if done.returncode == 0 or not re.search(pattern, done.stderr):
        fail(f"{' '.join(args[1:])}: exit {done.returncode}, expected an error matching {pattern!r}: {done.stderr.strip()}")
print(f"ok: {len(cases)} kinds of bad input are refused by name (config against tensors, an untied head by config "
      "and by tensors, a truncated llm.c file, a flag against --init-from)")

#!/usr/bin/env python3
"""The PyTorch peer of loom's GPT training step, for a same-run comparison on the CPU.

The same model as loom's GPT (GPT-2 style: token + position embeddings, pre-LayerNorm blocks with
causal self-attention and a tanh-GELU MLP, biases on every linear layer, a final LayerNorm, the
head tied to the token embedding, vocabulary padded to a multiple of 64) and the same step as
loom's Trainer: forward, mean cross-entropy, backward, clipping by global norm 1.0, AdamW
(betas 0.9/0.95, eps 1e-8, weight decay 0.1 on matrices only), zero_grad. fp32, eager mode.

With --ranks N > 1 it runs N processes data-parallel with DistributedDataParallel over gloo
(--batch sequences per rank), each process limited to --threads threads (torch's intra-op pool and
the BLAS library's own), and reports the job's tokens/s. Prints one JSON object on stdout (or writes it to --json):
  {"peer": "torch", "torch": version, "ranks", "threads", "step_ms", "tokens_per_s", ...}

Used by train_bench --peer and ddp_bench --peer when python3-torch is installed
(Debian 12: apt-get install python3-torch, PyTorch 1.13 with OpenBLAS).
"""
import argparse
import json
import math
import os
import statistics
import sys
import time


def limit_threads(threads):
    """Every thread pool to `threads` before torch loads: intra-op (OpenMP) and the BLAS's own
    (OpenBLAS starts one thread per core unless told otherwise, whatever torch.set_num_threads says).
    With several threads, OpenMP's workers sleep instead of spinning when idle, or they fight
    OpenBLAS's threads for the cores (measured on 2 cores: 4,750 tokens/s spinning, 13,700 passive,
    13,900 with one intra-op thread)."""
    for name in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ[name] = str(threads)
    if int(threads) > 1:
        os.environ["OMP_WAIT_POLICY"] = "PASSIVE"


if __name__ == "__main__":
    _threads = sys.argv[sys.argv.index("--threads") + 1] if "--threads" in sys.argv[:-1] else "1"
    limit_threads(_threads if _threads.isdigit() else "1")

import torch  # noqa: E402  (after the thread limits)
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402


class Block(nn.Module):
    def __init__(self, channels, heads):
        super().__init__()
        self.heads = heads
        self.ln1 = nn.LayerNorm(channels)
        self.qkv = nn.Linear(channels, 3 * channels)
        self.proj = nn.Linear(channels, channels)
        self.ln2 = nn.LayerNorm(channels)
        self.fc = nn.Linear(channels, 4 * channels)
        self.fc_proj = nn.Linear(4 * channels, channels)

    def attention(self, x):
        b, t, c = x.shape
        q, k, v = self.qkv(x).split(c, dim=2)
        hs = c // self.heads
        q = q.view(b, t, self.heads, hs).transpose(1, 2)
        k = k.view(b, t, self.heads, hs).transpose(1, 2)
        v = v.view(b, t, self.heads, hs).transpose(1, 2)
        scores = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(hs))
        mask = torch.ones(t, t, dtype=torch.bool).triu(1)
        att = scores.masked_fill(mask, float("-inf")).softmax(dim=-1)
        y = (att @ v).transpose(1, 2).contiguous().view(b, t, c)
        return self.proj(y)

    def forward(self, x):
        x = x + self.attention(self.ln1(x))
        return x + self.fc_proj(F.gelu(self.fc(self.ln2(x)), approximate="tanh"))


class GPT(nn.Module):
    def __init__(self, vocab, context, layers, heads, channels):
        super().__init__()
        padded = (vocab + 63) // 64 * 64
        self.vocab = vocab
        self.wte = nn.Embedding(padded, channels)
        self.wpe = nn.Embedding(context, channels)
        self.blocks = nn.ModuleList(Block(channels, heads) for _ in range(layers))
        self.ln_f = nn.LayerNorm(channels)
        for name, p in self.named_parameters():
            if p.dim() == 2:
                std = 0.02 / math.sqrt(2 * layers) if name.endswith("proj.weight") else 0.02
                nn.init.normal_(p, 0.0, 0.01 if name.startswith("wpe") else std)
            elif name.endswith("bias"):
                nn.init.zeros_(p)

    def forward(self, tokens, targets):
        t = tokens.shape[1]
        x = self.wte(tokens) + self.wpe(torch.arange(t))
        for block in self.blocks:
            x = block(x)
        logits = self.ln_f(x) @ self.wte.weight.t()
        logits = logits[..., : self.vocab]
        return F.cross_entropy(logits.reshape(-1, self.vocab), targets.reshape(-1))


def measure(rank, world, args, result_path):
    torch.set_num_threads(args.threads)
    torch.manual_seed(1)
    if world > 1:
        os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
        os.environ.setdefault("MASTER_PORT", str(args.port))
        torch.distributed.init_process_group("gloo", rank=rank, world_size=world)
    model = GPT(args.vocab, args.context, args.layers, args.heads, args.channels)
    trained = nn.parallel.DistributedDataParallel(model) if world > 1 else model
    decay = [p for p in model.parameters() if p.dim() == 2]
    no_decay = [p for p in model.parameters() if p.dim() != 2]
    optimizer = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1},
                                   {"params": no_decay, "weight_decay": 0.0}],
                                  lr=1e-4, betas=(0.9, 0.95), eps=1e-8)
    generator = torch.Generator().manual_seed(100 + rank)
    tokens = torch.randint(0, args.vocab, (args.batch, args.context + 1), generator=generator)
    inputs, targets = tokens[:, :-1].contiguous(), tokens[:, 1:].contiguous()
    seconds = []
    for step in range(args.warmup + args.steps):
        if world > 1:
            torch.distributed.barrier()
        start = time.perf_counter()
        loss = trained(inputs, targets)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        if world > 1:
            torch.distributed.barrier()
        if step >= args.warmup:
            seconds.append(time.perf_counter() - start)
    if rank == 0:
        step_s = statistics.median(seconds)
        record = {
            "peer": "torch", "torch": torch.__version__, "ranks": world, "threads": args.threads,
            "layers": args.layers, "heads": args.heads, "channels": args.channels,
            "context": args.context, "batch": args.batch, "vocab": args.vocab,
            "steps": args.steps, "step_ms": step_s * 1e3,
            "tokens_per_s": world * args.batch * args.context / step_s,
            "final_loss": float(loss.item()),
        }
        with open(result_path, "w") as f:
            json.dump(record, f)
    if world > 1:
        torch.distributed.destroy_process_group()


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--heads", type=int, default=4)
    parser.add_argument("--channels", type=int, default=128)
    parser.add_argument("--context", type=int, default=128)
    parser.add_argument("--vocab", type=int, default=256)
    parser.add_argument("--batch", type=int, default=8, help="sequences per rank per step")
    parser.add_argument("--steps", type=int, default=20, help="timed steps (the median is reported)")
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--ranks", type=int, default=1)
    parser.add_argument("--threads", type=int, default=1, help="intra-op threads per rank")
    parser.add_argument("--port", type=int, default=29517, help="gloo rendezvous port (ranks > 1)")
    parser.add_argument("--json", help="write the result here instead of stdout")
    args = parser.parse_args()
    if min(args.layers, args.heads, args.channels, args.context, args.vocab, args.batch, args.steps,
           args.ranks, args.threads) < 1 or args.channels % args.heads:
        parser.error("sizes must be positive and channels a multiple of heads")

    import tempfile
    with tempfile.TemporaryDirectory() as scratch:
        result_path = os.path.join(scratch, "result.json")
        if args.ranks == 1:
            measure(0, 1, args, result_path)
        else:
            torch.multiprocessing.spawn(measure, args=(args.ranks, args, result_path), nprocs=args.ranks)
        with open(result_path) as f:
            record = json.load(f)
    text = json.dumps(record)
    if args.json:
        with open(args.json, "w") as f:
            f.write(text + "\n")
    else:
        print(text)


if __name__ == "__main__":
    sys.exit(main())

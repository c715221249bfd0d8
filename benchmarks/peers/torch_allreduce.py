#!/usr/bin/env python3
"""PyTorch's all_reduce over its own Gloo backend, the peer of `allreduce_bench --gloo`.

Starts --ranks processes on this host (torch.distributed over gloo, MASTER_ADDR 127.0.0.1), each
with one thread, and times all_reduce (sum, float32) from --min to --max bytes, doubling by
--factor: per size, the median over --rounds rounds of the mean over the calls of a round (20
below 1 MiB, 5 above), after 3 warm-up calls, measured on rank 0 between barriers. Prints a table
and, with --json, writes {"peer": "torch-gloo", "torch": version, "ranks", "rows": [{"size_bytes",
"time_us"}]}. Debian 12: apt-get install python3-torch (PyTorch 1.13).
"""
import argparse
import json
import os
import socket
import sys
import time


def worker(rank, args, port, queue):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank), WORLD_SIZE=str(args.ranks))
    import torch
    import torch.distributed as dist
    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    rows = []
    size = args.min
    while size <= args.max:
        t = torch.ones(size // 4)
        for _ in range(3):
            dist.all_reduce(t)
        calls = 20 if size <= (1 << 20) else 5
        times = []
        for _ in range(args.rounds):
            dist.barrier()
            start = time.perf_counter()
            for _ in range(calls):
                dist.all_reduce(t)
            times.append((time.perf_counter() - start) / calls)
        times.sort()
        rows.append({"size_bytes": size, "time_us": times[len(times) // 2] * 1e6})
        size *= args.factor
    dist.destroy_process_group()
    if rank == 0:
        queue.put({"peer": "torch-gloo", "torch": torch.__version__, "ranks": args.ranks, "rows": rows})


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ranks", type=int, default=2)
    parser.add_argument("--min", type=int, default=1024)
    parser.add_argument("--max", type=int, default=64 << 20)
    parser.add_argument("--factor", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--json")
    args = parser.parse_args()
    import multiprocessing as mp
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    procs = [ctx.Process(target=worker, args=(r, args, port, queue)) for r in range(args.ranks)]
    for p in procs:
        p.start()
    record = queue.get(timeout=600)
    for p in procs:
        p.join()
    if any(p.exitcode != 0 for p in procs):
        sys.exit("torch_allreduce: a rank failed")
    print(f"# PyTorch {record['torch']} all_reduce over gloo, {args.ranks} ranks, float32 sum")
    print(f"# {'size (B)':>11} {'time (us)':>10} {'busbw (GB/s)':>13}")
    for row in record["rows"]:
        busbw = row["size_bytes"] / (row["time_us"] * 1e-6) / 1e9 * 2 * (args.ranks - 1) / args.ranks
        print(f"  {row['size_bytes']:>11} {row['time_us']:>10.1f} {busbw:>13.3f}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(record, f, indent=2)


if __name__ == "__main__":
    main()

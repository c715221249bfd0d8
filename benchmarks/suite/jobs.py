"""The benchmark suite's jobs: which loom benchmark runs with which arguments in each mode, and the
figures each yields from its JSON (one JSON per repeat).

A figure is one number loom reaches, with every repeat's value, which way is better, and where one
exists its same-run reference: a peer (OpenBLAS, raw MPI, PyTorch, tokenizers), a baseline inside
loom's own benchmark (the copy kernel, the system allocator, the disk's plain write) or a
prediction (the cost model, the memory planner). Modes: smoke (one repeat, the smallest sizes: a
check that everything runs), quick (3 repeats, under 5 minutes on 2 cores), full (5 repeats,
larger sizes, under 30 minutes).
"""
from dataclasses import dataclass, field

AREAS = [
    ("kernels", "Kernels"),
    ("attention", "Attention"),
    ("communication", "Communication"),
    ("data_parallel", "Data parallelism"),
    ("sharding", "Sharding (ZeRO)"),
    ("training", "Training"),
    ("checkpoints", "Checkpoints"),
    ("data", "Data"),
    ("telemetry", "Telemetry overhead"),
    ("security", "Encryption at rest"),
    ("gpu", "GPU"),
]

REPEATS = {"smoke": 1, "quick": 3, "full": 5}


@dataclass
class Job:
    name: str
    area: str
    program: str            # a file under the build's benchmarks/ (or examples/)
    args: dict              # mode -> argument list ("{json}" and "{tmp}" are filled in)
    extract: object         # function(list of JSON docs) -> list of figures
    ranks: int = 1          # > 1: started by mpirun (the program launches its own jobs otherwise)
    needs: list = field(default_factory=list)  # "mpi", "gpu"


def figure(fid, name, unit, better, values, peer=None, peer_name=None, kind="peer"):
    out = {"id": fid, "name": name, "unit": unit, "better": better, "values": [float(v) for v in values]}
    if peer is not None and peer_name is not None and len(peer) > 0:
        out["reference"] = {"name": peer_name, "kind": kind, "values": [float(v) for v in peer]}
    return out


def not_measured(fid, name, unit, better, why):
    return {"id": fid, "name": name, "unit": unit, "better": better, "values": [], "not_measured": why}


def rows_of(docs, key=None):
    """Per repeat, the rows (or the record's `key` list)."""
    return [doc[key] if key else doc["rows"] for doc in docs]


def collect(docs, match, value, key=None):
    """The value of the row that `match`es, from every repeat that has one."""
    out = []
    for rows in rows_of(docs, key):
        for row in rows:
            if match(row):
                v = value(row)
                if v is not None:
                    out.append(v)
                break
    return out


# -- kernels -----------------------------------------------------------------------------------

def gemm_figures(docs):
    """loom's rows ("loom" on the CPU, one per kernel variant; "loom-auto" and "loom-own" on a GPU)
    against OpenBLAS (fp32; loom's lower precisions too) or cuBLASLt (the same precision)."""
    figures = []
    peers = {"openblas": "OpenBLAS", "cublaslt": "cuBLASLt"}
    for row in docs[0]["rows"]:
        backend = row["backend"]
        if not backend.startswith("loom") or "blocking" in row:  # gemm_bench --blockings: not a suite figure
            continue
        shape, precision, isa = row["shape"], row["precision"], row.get("isa", "-")
        layout = row.get("layout", "NN")
        base = shape[:-len(layout) - 1] if shape.endswith(" " + layout) else shape  # "128^3 TN": the layout is in the id
        variant = isa if isa != "-" else backend[len("loom-"):]  # avx512 / auto / own; "" for one CPU kernel
        same = lambda r, b=backend, s=shape, p=precision, l=layout, i=isa: (
            r["backend"] == b and r["shape"] == s and r["precision"] == p and r.get("layout", "NN") == l and
            r.get("isa", "-") == i and "blocking" not in r)
        values = collect(docs, same, lambda r: r["tflops"])
        peer, peer_name = [], None
        for name, label in peers.items():
            for p in (precision, "fp32"):
                match = lambda r, b=name, s=shape, p=p, l=layout: (r["backend"] == b and r["shape"] == s and
                                                                   r["precision"] == p and r.get("layout", "NN") == l)
                peer = collect(docs, match, lambda r: r["tflops"])
                if peer:
                    peer_name = f"{label} {p}"
                    break
            if peer:
                break
        figures.append(figure(f"gemm.{base}.{layout}.{precision}" + (f".{variant}" if variant else ""),
                              f"GEMM {base} {layout} {precision}" + (f" ({variant})" if variant else ""), "TFLOP/s",
                              "higher", values, peer, peer_name))
    return figures


def kernel_figures(docs):
    figures = []
    copy = collect(docs, lambda r: r["kernel"].startswith("copy"), lambda r: r["gb_per_s"])
    for row in docs[0]["rows"]:
        if row["kernel"].startswith("copy"):
            continue
        name = row["kernel"]
        values = collect(docs, lambda r, n=name: r["kernel"] == n, lambda r: r["gb_per_s"])
        fid = "kernel." + name.replace(" ", "_").replace(">", "")
        figures.append(figure(fid, f"{name} (memory bound)", "GB/s", "higher", values, copy, "a copy", "baseline"))
    return figures


def alloc_figures(docs):
    figures = []
    for row in docs[0]["rows"]:
        size = row["bytes"]
        match = lambda r, s=size: r["bytes"] == s
        figures.append(figure(f"alloc.{size}", f"allocate + free {size} B (caching)", "us", "lower",
                              collect(docs, match, lambda r: r["caching_us"]),
                              collect(docs, match, lambda r: r["direct_us"]), "the device's own allocator", "baseline"))
    return figures


def attention_figures(docs):
    figures = []
    composed = lambda r: r["path"].startswith("composed")
    for row in docs[0]["rows"]:
        if composed(row):
            continue
        path = row["path"]
        match = lambda r, p=path: r["path"] == p
        for part, key in (("forward", "forward_ms"), ("backward", "backward_ms")):
            figures.append(figure(f"attention.{path.replace(' ', '_')}.{part}", f"attention {path}, {part}", "ms", "lower",
                                  collect(docs, match, lambda r, k=key: r[k]),
                                  collect(docs, composed, lambda r, k=key: r[k]), "composed GEMM + softmax", "baseline"))
    return figures


# -- communication -----------------------------------------------------------------------------

def allreduce_figures(docs):
    """Bus bandwidth per size (algorithm bandwidth on one rank, where the bus carries nothing),
    against the backend's raw call at the same size (MPI's, NCCL's)."""
    figures = []
    config = docs[0]["config"]
    ranks = config.get("ranks", 2)
    measure = "busbw_gbps" if ranks > 1 else "algbw_gbps"
    for row in docs[0]["rows"]:
        size = row["size_bytes"]
        match = lambda r, s=size: r["size_bytes"] == s
        loom = collect(docs, match, lambda r: r["out_of_place"][measure])
        # The raw call's bandwidth at the same size, from its time.
        raw = collect(docs, match, lambda r: (r["out_of_place"][measure] * r["out_of_place"]["time_us"] /
                                              r["raw"]["time_us"]) if "raw" in r else None)
        figures.append(figure(f"allreduce.{config.get('backend', '')}.{size}",
                              f"all_reduce {size} B, {ranks} rank(s), " + ("bus" if ranks > 1 else "algorithm") +
                              " bandwidth", "GB/s", "higher", loom, raw, f"raw {config.get('raw', 'call')}"))
    return figures


# -- data parallelism and sharding --------------------------------------------------------------

def ddp_figures(docs):
    figures = []
    for row in docs[0]["rows"]:
        key = (row["workload"], row.get("backend", "-"), row["ranks"])
        match = lambda r, k=key: (r["workload"], r.get("backend", "-"), r["ranks"]) == k
        values = collect(docs, match, lambda r: r["tokens_per_s"])
        # PyTorch runs once per rank count: every backend's row at that count is set against it.
        same_job = lambda r, k=key: (r["workload"], r["ranks"]) == (k[0], k[2]) and "torch_tokens_per_s" in r
        torch = collect(docs, same_job, lambda r: r["torch_tokens_per_s"])
        f = figure(f"ddp.{key[0]}.{key[1]}.{key[2]}r", f"DDP {key[0]} on {key[1]}, {key[2]} rank(s), "
                   f"{row['threads_per_rank']} thread(s) each", "tokens/s", "higher", values, torch, "PyTorch DDP (gloo)")
        if not torch:
            f["reference_not_measured"] = ("PyTorch DDP: not run (--peer none)" if docs[0]["config"].get("peer") == "none"
                                           else "PyTorch DDP: python3-torch missing, or this workload has no peer")
        figures.append(f)
    return figures


def zero_figures(docs):
    figures = []
    for row in docs[0]["rows"]:
        key = (row["config"], row["ranks"], row.get("tensor_parallel", 1))
        match = lambda r, k=key: (r["config"], r["ranks"], r.get("tensor_parallel", 1)) == k
        ddp = lambda r, k=key: (r["config"], r["ranks"], r.get("tensor_parallel", 1)) == ("ddp", k[1], k[2])
        label = f"{key[0]}, {key[1]} rank(s)" + (f", TP {key[2]}" if key[2] != 1 else "")
        tag = f"{key[0]}.{key[1]}r" + (f".tp{key[2]}" if key[2] != 1 else "")
        figures.append(figure(f"zero.{tag}.tokens_per_s", f"{label}: tokens/s", "tokens/s", "higher",
                              collect(docs, match, lambda r: r["tokens_per_s"]),
                              None if key[0] == "ddp" else collect(docs, ddp, lambda r: r["tokens_per_s"]),
                              "DDP, same ranks", "baseline"))
        figures.append(figure(f"zero.{tag}.state_mib", f"{label}: model state per rank", "MiB", "lower",
                              collect(docs, match, lambda r: r["state_bytes_measured"] / 2**20),
                              collect(docs, match, lambda r: r["state_bytes_predicted"] / 2**20),
                              "the planner's prediction", "prediction"))
    return figures


# -- training, checkpoints, data, telemetry, encryption ----------------------------------------

def train_figures(docs):
    always = lambda r: True
    figures = [figure("train.tokens_per_s", "GPT training step (train_bench default), tokens/s", "tokens/s", "higher",
                      collect(docs, always, lambda r: r["tokens_per_s"]),
                      collect(docs, always, lambda r: r.get("torch_tokens_per_s")), "PyTorch"),
               figure("train.mfu", "model FLOP/s against the measured GEMM peak (MFU)", "fraction", "higher",
                      collect(docs, always, lambda r: r["mfu"]))]
    if not any("torch_tokens_per_s" in r for rows in rows_of(docs) for r in rows):
        figures[0]["reference_not_measured"] = "PyTorch: " + docs[0].get("peer_not_measured", "not run")
    telemetry = [doc.get("telemetry") for doc in docs if doc.get("telemetry")]
    if telemetry:
        for row in telemetry[0]["rows"]:
            if row["mode"] == "off":
                continue
            mode = row["mode"]
            values = [next(r["step_ms"] for r in t["rows"] if r["mode"] == mode) for t in telemetry]
            off = [next(r["step_ms"] for r in t["rows"] if r["mode"] == "off") for t in telemetry]
            figures.append(dict(figure(f"telemetry.{mode}.step_ms", f"training step with telemetry '{mode}'", "ms",
                                       "lower", values, off, "telemetry off", "baseline"), area="telemetry"))
    return figures


def ckpt_figures(docs):
    figures = []
    for row in docs[0]["rows"]:
        ranks = row["ranks"]
        match = lambda r, n=ranks: r["ranks"] == n
        get = lambda key: collect(docs, match, lambda r, k=key: r[k])
        figures += [
            figure(f"ckpt.{ranks}r.sharded_save_s", f"sharded save, {ranks} rank(s)", "s", "lower",
                   get("sharded_save_s"), get("disk_s"), "the same bytes written raw + fsync", "baseline"),
            figure(f"ckpt.{ranks}r.async_blocked_s", f"asynchronous save: training blocked, {ranks} rank(s)", "s",
                   "lower", get("async_blocked_s"), get("sharded_save_s"), "a synchronous save", "baseline"),
            figure(f"ckpt.{ranks}r.sharded_load_s", f"sharded load, {ranks} rank(s)", "s", "lower",
                   get("sharded_load_s")),
            dict(figure(f"ckpt.{ranks}r.encrypted_save_s", f"encrypted save, {ranks} rank(s)", "s", "lower",
                        get("encrypted_save_s"), get("paired_plain_save_s"), "a plain save next to it", "baseline"),
                 area="security"),
        ]
    return figures


def data_figures(docs):
    case = lambda name: (lambda r: r["case"] == name)
    figures = [
        figure("data.streamed_warm.tokens_per_s", "streamed shards (page cache warm), tokens/s", "tokens/s", "higher",
               collect(docs, case("streamed_warm"), lambda r: r["tokens_per_s"])),
        figure("data.wait_share", "share of a CPU training step spent waiting for data", "fraction", "lower",
               collect(docs, case("cpu_step_data_wait"), lambda r: r["share"])),
        figure("data.tokenizer.1_thread", "GPT-2 BPE tokenizer, 1 thread, MB/s", "MB/s", "higher",
               collect(docs, case("tokenize"), lambda r: r["loom_1_thread_bytes_per_s"] / 1e6),
               collect(docs, case("tokenize"), lambda r: r.get("tokenizers_1_thread_bytes_per_s", 0) / 1e6 or None),
               "Hugging Face tokenizers"),
    ]
    if "reference" not in figures[-1]:
        figures[-1]["reference_not_measured"] = "Hugging Face tokenizers: not installed (pip install tokenizers)"
    return figures


def crypt_figures(docs):
    figures = []
    for row in docs[0]["rows"]:
        folder = row["folder"]
        match = lambda r, f=folder: r["folder"] == f
        tag = folder.strip("/").replace("/", "_") or "root"
        figures.append(figure(f"crypt.{tag}.encrypted_write_gbps", f"encrypted write to {folder}", "GB/s", "higher",
                              collect(docs, match, lambda r: r["encrypted_write_gbps"]),
                              collect(docs, match, lambda r: r["plain_write_gbps"]), "a plain write", "baseline"))
    return figures


def cpu_jobs(cores):
    """The CPU jobs; every mode's arguments. Each runs on the CPU even where a GPU is (--device cpu
    for the programs whose default is the GPU when there is one): the GPU jobs are separate."""
    tiny_gpt = ["--layers", "2", "--channels", "96"]
    return [
        Job("gemm", "kernels", "gemm_bench", {
            # TN and NT: the layouts of a linear layer's dW and forward, as training runs them.
            "smoke": ["--shapes", "128", "--repeats", "2", "--isas", "portable", "--layouts", "NN", "TN",
                      "--json", "{json}"],
            "quick": ["--shapes", "256", "512", "1024", "--repeats", "3", "--json", "{json}"],
            "full": ["--shapes", "256", "512", "1024", "2048", "--repeats", "5", "--layouts", "NN", "TN", "NT",
                     "--json", "{json}"]}, gemm_figures),
        Job("kernels", "kernels", "kernel_bench", {
            "smoke": ["--device", "cpu", "--rows", "256", "--repeats", "2", "--json", "{json}"],
            "quick": ["--device", "cpu", "--repeats", "5", "--json", "{json}"],
            "full": ["--device", "cpu", "--repeats", "11", "--json", "{json}"]}, kernel_figures),
        Job("alloc", "kernels", "alloc_bench", {
            "smoke": ["--device", "cpu", "--iterations", "20", "--repeats", "2", "--json", "{json}"],
            "quick": ["--device", "cpu", "--repeats", "5", "--json", "{json}"],
            "full": ["--device", "cpu", "--repeats", "11", "--json", "{json}"]}, alloc_figures),
        Job("attention", "attention", "attention_bench", {
            "smoke": ["--device", "cpu", "--context", "64", "--repeats", "2", "--json", "{json}"],
            "quick": ["--device", "cpu", "--repeats", "5", "--json", "{json}"],
            "full": ["--device", "cpu", "--context", "512", "--repeats", "7", "--json", "{json}"]}, attention_figures),
        Job("allreduce", "communication", "allreduce_bench", {
            "smoke": ["-b", "1K", "-e", "64K", "-f", "8", "--rounds", "2", "-n", "5", "--json", "{json}"],
            "quick": ["-b", "1K", "-e", "16M", "-f", "4", "--rounds", "5", "-n", "10", "--json", "{json}"],
            "full": ["-b", "8", "-e", "64M", "-f", "4", "--rounds", "7", "-n", "20", "--json", "{json}"]},
            allreduce_figures, ranks=2, needs=["mpi"]),
        Job("ddp", "data_parallel", "ddp_bench", {
            "smoke": ["--workloads", "default", "--ranks", "1,2", "--backends", "mpi", "--steps", "2", "--warmup", "1",
                      "--peer", "none", "--json", "{json}"],
            "quick": ["--workloads", "default", "--ranks", "1,2", "--steps", "6", "--warmup", "2", "--json", "{json}"],
            "full": ["--ranks", "1,2,3,4", "--steps", "20", "--warmup", "3", "--json", "{json}"]},
            ddp_figures, needs=["mpi"]),
        Job("zero", "sharding", "zero_bench", {
            "smoke": ["--ranks", "2", "--configs", "ddp,zero1,zero2,zero3", "--steps", "2", "--warmup", "1",
                      *tiny_gpt, "--json", "{json}"],
            "quick": ["--ranks", "1,2", "--configs", "ddp,zero1,zero2,zero3", "--steps", "5", "--warmup", "1",
                      "--json", "{json}"],
            "full": ["--ranks", "1,2,4", "--steps", "10", "--warmup", "2", "--json", "{json}"]},
            zero_figures, needs=["mpi"]),
        Job("train", "training", "train_bench", {
            "smoke": ["--steps", "2", "--warmup", "1", "--rounds", "1", "--peer", "none", "--telemetry", "off,phases",
                      "--json", "{json}"],
            "quick": ["--steps", "8", "--warmup", "2", "--rounds", "3", "--telemetry", "off,phases", "--json", "{json}"],
            "full": ["--steps", "20", "--warmup", "3", "--rounds", "5", "--telemetry", "off,phases,trace",
                     "--json", "{json}"]}, train_figures),
        Job("ckpt", "checkpoints", "ckpt_bench", {
            "smoke": ["--ranks", "1", "--repeats", "1", *tiny_gpt, "--vocab", "1024", "--dir", "{tmp}/ckpt",
                      "--json", "{json}"],
            "quick": ["--ranks", "1,2", "--repeats", "2", "--layers", "2", "--channels", "384", "--vocab", "8192",
                      "--dir", "{tmp}/ckpt", "--json", "{json}"],
            "full": ["--ranks", "1,2", "--repeats", "3", "--dir", "{tmp}/ckpt", "--json", "{json}"]},
            ckpt_figures, needs=["mpi"]),
        Job("data", "data", "data_bench", {
            "smoke": ["--steps", "3", "--text-mb", "0.1", "--shard-tokens", "1048576", "--dir", "{tmp}/data",
                      "--json", "{json}"],
            "quick": ["--steps", "10", "--text-mb", "0.5", "--shard-tokens", "8388608", "--dir", "{tmp}/data",
                      "--json", "{json}"],
            "full": ["--steps", "20", "--text-mb", "2", "--dir", "{tmp}/data", "--json", "{json}"]}, data_figures),
        Job("crypt", "security", "crypt_bench", {
            "smoke": ["--mb", "2", "--repeats", "1", "--json", "{json}"],
            "quick": ["--mb", "16", "--repeats", "3", "--json", "{json}"],
            "full": ["--mb", "64", "--repeats", "5", "--json", "{json}"]}, crypt_figures),
    ]


def gpu_jobs():
    """With --gpu on a machine that has one: the same benchmarks on the GPU, against cuBLASLt (GEMM)
    and raw NCCL (collectives)."""
    return [
        Job("gpu-gemm", "gpu", "gemm_bench", {m: ["--device", "cuda", "--shapes", "1024", "4096", "8192",
                                                  "--precisions", "tf32", "fp16", "bf16", "--repeats", r,
                                                  "--json", "{json}"] for m, r in (("smoke", "3"), ("quick", "10"),
                                                                                  ("full", "20"))},
            gemm_figures, needs=["gpu"]),
        Job("gpu-attention", "gpu", "attention_bench", {m: ["--device", "cuda", "--dtype", "bf16", "--batch", "8",
                                                            "--context", "1024", "--heads", "12", "--head-size", "64",
                                                            "--repeats", "10", "--json", "{json}"]
                                                        for m in REPEATS}, attention_figures, needs=["gpu"]),
        Job("gpu-kernels", "gpu", "kernel_bench", {m: ["--device", "cuda", "--rows", "16384", "--channels", "768",
                                                      "--repeats", "20", "--json", "{json}"] for m in REPEATS},
            kernel_figures, needs=["gpu"]),
        Job("gpu-allreduce", "gpu", "allreduce_bench", {m: ["-b", "1K", "-e", "256M", "-f", "4", "--rounds", "5",
                                                            "-n", "20", "--json", "{json}"] for m in REPEATS},
            allreduce_figures, needs=["gpu"]),
        Job("gpu-train", "gpu", "train_bench", {m: ["--device", "cuda", "--precision", "bf16", "--layers", "12",
                                                    "--heads", "12", "--channels", "768", "--context", "1024",
                                                    "--vocab", "50304", "--batch", "8", "--steps", "10", "--warmup",
                                                    "3", "--peer", "none", "--json", "{json}"] for m in REPEATS},
            train_figures, needs=["gpu"]),
    ]

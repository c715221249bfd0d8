"""What the benchmark suite ran on: the CPU (model, vendor, ISA level), cores, memory, GPUs and
driver, the libraries loom was built with and the peers' versions, the commit, and the machine
class that names its baseline (vendor-isa-Nc, e.g. intel-avx512-2c; -h200 etc. with a GPU)."""
import json
import os
import platform
import re
import shutil
import subprocess
import tempfile


def _run(command, **kwargs):
    try:
        return subprocess.run(command, capture_output=True, text=True, timeout=60, **kwargs).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return ""


def commit(root):
    sha = _run(["git", "-C", root, "rev-parse", "HEAD"]) or "unknown"
    dirty = _run(["git", "-C", root, "status", "--porcelain", "--untracked-files=no"])
    return sha + ("-dirty" if dirty else "")


def _cpu():
    model, vendor, flags = platform.processor() or "unknown", "unknown", set()
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                key, _, value = line.partition(":")
                key, value = key.strip(), value.strip()
                if key == "model name":
                    model = value
                elif key == "vendor_id":
                    vendor = {"GenuineIntel": "intel", "AuthenticAMD": "amd"}.get(value, value.lower())
                elif key == "flags":
                    flags = set(value.split())
    except OSError:
        pass
    isa = "avx512" if {"avx512f", "avx512bw"} <= flags else "avx2" if {"avx2", "fma"} <= flags else "portable"
    return {"model": model, "vendor": vendor, "isa": isa}


def _memory_gib():
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemTotal:"):
                    return round(int(line.split()[1]) / 2**20, 1)
    except OSError:
        pass
    return 0.0


def _gpus():
    if not shutil.which("nvidia-smi"):
        return [], "no GPU here (nvidia-smi not found)"
    text = _run(["nvidia-smi", "--query-gpu=name,driver_version,memory.total", "--format=csv,noheader"])
    gpus = []
    for line in text.splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) == 3:
            gpus.append({"name": parts[0], "driver": parts[1], "memory": parts[2]})
    return gpus, None if gpus else "no GPU here (nvidia-smi lists none)"


def _loom_build(build):
    """The build line loom's benchmarks print: "loom 0.1.0 (CUDA off, NCCL off, cuDNN off, MPI 3.1)"."""
    program = os.path.join(build, "benchmarks", "kernel_bench")
    if not os.path.exists(program):
        raise SystemExit(f"bench: {program} is missing: build loom first (scripts/bench.sh builds it)")
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "probe.json")
        _run([program, "--rows", "8", "--channels", "8", "--repeats", "1", "--json", path])
        try:
            with open(path) as f:
                return json.load(f)["machine"]["build"]
        except (OSError, ValueError, KeyError):
            raise SystemExit(f"bench: {program} does not run; see `{program} --rows 8 --channels 8`")


def _peer_versions():
    versions = {}
    probe = ("import importlib\n"
             "for m in ('torch', 'tokenizers', 'numpy'):\n"
             "    try: print(m, importlib.import_module(m).__version__)\n"
             "    except Exception: print(m, 'not installed')\n")
    for line in _run(["/usr/bin/python3", "-c", probe]).splitlines():
        name, _, version = line.partition(" ")
        versions[name] = version
    for package in ("libopenblas0-pthread", "libopenblas0", "libopenmpi3", "libgloo0", "libsodium23"):
        version = _run(["dpkg-query", "-W", "-f=${Version}", package])
        if version:
            versions[package] = version
    return versions


def openblas_coretype(cpu):
    """The OPENBLAS_CORETYPE the peers (OpenBLAS, and PyTorch through it) should run with, and why.

    OpenBLAS picks its kernels from the CPU model it knows: a model newer than the library (Debian's
    0.3.21 and Sapphire Rapids or Emerald Rapids) gets the SSE3 "Prescott" kernels, a third of its
    speed, and every comparison against it would flatter loom. The user's own setting wins."""
    if os.environ.get("OPENBLAS_CORETYPE"):
        return os.environ["OPENBLAS_CORETYPE"], "set by the user"
    if cpu["isa"] == "avx512":
        return "SkylakeX", "the suite's choice for an AVX-512 CPU"
    if cpu["isa"] == "avx2":
        return ("Zen" if cpu["vendor"] == "amd" else "Haswell"), "the suite's choice for an AVX2 CPU"
    return None, "left to OpenBLAS's detection"


def describe(build):
    cpu = _cpu()
    coretype, why = openblas_coretype(cpu)
    cpu["openblas_coretype"] = {"value": coretype, "why": why}
    cores = os.cpu_count() or 1
    gpus, _ = _gpus()
    loom_build = _loom_build(build)
    # The first GPU's model joins the class: a GPU's presence changes what the CPU jobs share the
    # machine with, and the GPU jobs' figures are its own.
    gpu = "-" + re.sub(r"[^a-z0-9]+", "", gpus[0]["name"].lower().replace("nvidia", "")) if gpus else ""
    return {"cpu": cpu, "cores": cores, "memory_gib": _memory_gib(), "gpus": gpus,
            "os": f"{platform.system()} {platform.release()}", "loom_build": loom_build,
            "libraries": _peer_versions(), "class": f"{cpu['vendor']}-{cpu['isa']}-{cores}c{gpu}"}


def capabilities(build, host):
    mpi = shutil.which("mpirun") is not None and re.search(r"MPI (?!off)", host["loom_build"]) is not None
    _, gpu_why_not = _gpus()
    cuda = "CUDA off" not in host["loom_build"]
    if gpu_why_not is None and not cuda:
        gpu_why_not = f"loom was built without CUDA ({host['loom_build']})"
    return {"mpi": mpi, "gpu": gpu_why_not is None, "gpu_why_not": gpu_why_not}

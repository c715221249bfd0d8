"""The benchmark suite's report: report.md (the machine, a summary, then one section per area with
its table of loom against the same-run reference) and the PNG plots a person would rather look at
than read: GEMM TFLOP/s against shape, bus bandwidth against message size with the cost model's
prediction, tokens/s against ranks for DDP and the ZeRO stages, and model state per rank by stage,
measured against predicted. matplotlib (Debian's python3-matplotlib), drawn off-screen."""
import math
import os
import re

try:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
except ImportError:  # the report says so; scripts/install-deps.sh installs python3-matplotlib
    plt = None


def _figures(results, area, prefix=""):
    for section in results["sections"]:
        if section["area"] == area:
            return [f for f in section["figures"] if f["id"].startswith(prefix) and "median" in f]
    return []


def _section(results, area):
    return next(s for s in results["sections"] if s["area"] == area)


def _save(fig, plots_dir, name, section):
    path = os.path.join(plots_dir, name)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    section["plots"].append("plots/" + name)


def _shape_size(shape):
    """256^3 -> 256; MxNxK -> the cube root of M N K."""
    if shape.endswith("^3"):
        return float(shape[:-2])
    m, n, k = (float(x) for x in shape.split("x"))
    return (m * n * k) ** (1 / 3)


def plot_gemm(results, plots_dir, area="kernels", prefix="gemm.", name="gemm.png"):
    figures = _figures(results, area, prefix)
    if not figures:
        return
    series, reference = {}, {}
    for f in figures:
        shape, layout, precision, *isa = f["id"][len(prefix):].split(".")
        x = _shape_size(shape)
        label = f"loom {precision}" + (f" ({isa[0]})" if isa else "") + (f" {layout}" if layout != "NN" else "")
        series.setdefault(label, []).append((x, f["median"], f["min"], f["max"]))
        ref = f.get("reference")
        if ref and "median" in ref:
            reference.setdefault(ref["name"] + (f" {layout}" if layout != "NN" else ""), {})[x] = ref["median"]
    fig, ax = plt.subplots(figsize=(7, 4.2))
    for label, points in sorted(series.items()):
        points.sort()
        xs = [p[0] for p in points]
        ax.errorbar(xs, [p[1] for p in points], yerr=[[p[1] - p[2] for p in points], [p[3] - p[1] for p in points]],
                    marker="o", capsize=3, label=label)
    for label, points in sorted(reference.items()):
        xs = sorted(points)
        ax.plot(xs, [points[x] for x in xs], "k--", marker="s", label=label)
    ax.set_xscale("log", base=2)
    ax.set_xlabel("N (C = A B with M = N = K = N; the cube root of M N K otherwise)")
    ax.set_ylabel("TFLOP/s (median, min-max)")
    ax.set_title("GEMM throughput against shape")
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=7)
    _save(fig, plots_dir, name, _section(results, area))


def plot_allreduce(results, plots_dir, area="communication", prefix="allreduce.", name="allreduce.png"):
    figures = _figures(results, area, prefix)
    if not figures:
        return
    points = sorted((int(f["id"].rsplit(".", 1)[1]), f) for f in figures)
    xs = [p[0] for p in points]
    fig, ax = plt.subplots(figsize=(7, 4.2))
    ax.errorbar(xs, [f["median"] for _, f in points], yerr=[[f["median"] - f["min"] for _, f in points],
                                                           [f["max"] - f["median"] for _, f in points]],
                marker="o", capsize=3, label="loom")
    raw = [(x, f["reference"]["median"]) for x, f in points if "median" in f.get("reference", {})]
    if raw:
        ax.plot([r[0] for r in raw], [r[1] for r in raw], "k--", marker="s", label=points[0][1]["reference"]["name"])
    predicted = [(x, f["prediction"]) for x, f in points if "prediction" in f]
    if predicted:
        ax.plot([p[0] for p in predicted], [p[1] for p in predicted], "g-", label="cost model prediction")
    ax.set_xscale("log", base=2)
    ax.set_xlabel("message size (bytes)")
    kind = "bus" if "bus bandwidth" in points[0][1]["name"] else "algorithm"
    ax.set_ylabel(f"{kind} bandwidth, GB/s (median, min-max)")
    ax.set_title(f"all_reduce: {kind} bandwidth against message size")
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8)
    _save(fig, plots_dir, name, _section(results, area))


def plot_scaling(results, plots_dir):
    series = {}
    for f in _figures(results, "data_parallel", "ddp."):
        _, workload, backend, ranks = f["id"].split(".")
        series.setdefault((f"DDP {workload}", backend), {})[int(ranks[:-1])] = f["median"]
    for f in _figures(results, "sharding", "zero."):
        m = re.fullmatch(r"zero\.([\w-]+)\.(\d+)r\.tokens_per_s", f["id"])
        if m:
            series.setdefault((m.group(1), "zero_bench"), {})[int(m.group(2))] = f["median"]
    # The one-rank DDP run (in-process) starts every backend's line.
    ones = {k[0]: v[1] for k, v in series.items() if k[1] == "in-process" and 1 in v}
    lines = {}
    for (label, backend), points in series.items():
        if backend == "in-process":
            continue
        pts = dict(points)
        if label in ones:
            pts.setdefault(1, ones[label])
        lines[f"{label} ({backend})" if backend != "zero_bench" else f"zero_bench {label}"] = pts
    if not lines:
        return
    fig, ax = plt.subplots(figsize=(7, 4.2))
    for label, points in sorted(lines.items()):
        xs = sorted(points)
        ax.plot(xs, [points[x] for x in xs], marker="o", label=label)
    ax.set_xlabel("ranks (one process each; cores / ranks threads)")
    ax.set_ylabel("tokens/s (the job's, median)")
    ax.set_title("Data parallelism: tokens/s against ranks")
    ax.xaxis.get_major_locator().set_params(integer=True)
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=7)
    _save(fig, plots_dir, "scaling.png", _section(results, "data_parallel"))


def plot_memory(results, plots_dir):
    rows = {}
    for f in _figures(results, "sharding", "zero."):
        m = re.fullmatch(r"zero\.([\w-]+)\.(\d+)r\.state_mib", f["id"])
        if m:
            rows.setdefault(int(m.group(2)), []).append((m.group(1), f["median"], f.get("reference", {}).get("median")))
    if not rows:
        return
    ranks = max(rows)
    configs = rows[ranks]
    fig, ax = plt.subplots(figsize=(7, 4.2))
    xs = range(len(configs))
    ax.bar([x - 0.2 for x in xs], [c[1] for c in configs], width=0.4, label="measured")
    ax.bar([x + 0.2 for x in xs], [c[2] or 0 for c in configs], width=0.4, label="predicted (memory planner)")
    ax.set_xticks(list(xs), [c[0] for c in configs])
    ax.set_ylabel("model state per rank, MiB")
    ax.set_title(f"Memory per rank by stage, {ranks} rank(s): measured against predicted")
    ax.grid(True, axis="y", alpha=0.3)
    ax.legend(fontsize=8)
    _save(fig, plots_dir, "memory.png", _section(results, "sharding"))


def plot_all(results, plots_dir):
    """Draws every plot the results allow; returns why none was drawn, or None."""
    if plt is None:
        return "matplotlib is missing (Debian's python3-matplotlib; scripts/install-deps.sh installs it)"
    plot_gemm(results, plots_dir)
    plot_allreduce(results, plots_dir)
    plot_scaling(results, plots_dir)
    plot_memory(results, plots_dir)
    plot_gemm(results, plots_dir, area="gpu", prefix="gpu.gemm.", name="gpu_gemm.png")
    plot_allreduce(results, plots_dir, area="gpu", prefix="gpu.allreduce.", name="gpu_allreduce.png")
    return None


def _number(x):
    if x is None:
        return "-"
    return f"{x:.4g}" if abs(x) < 1e3 else f"{x:,.0f}"


def _versus(f):
    ref = f.get("reference")
    if "vs_reference" not in f:
        return "-"
    if ref["kind"] == "prediction":
        return f"{f['vs_reference']:.3f} of predicted"
    return f"{f['vs_reference']:.2f}x"


def _geomean(values):
    values = [v for v in values if v and v > 0]
    return math.exp(sum(math.log(v) for v in values) / len(values)) if values else None


def summary_rows(results):
    rows = []
    for s in results["sections"]:
        measured = [f for f in s["figures"] if "median" in f]
        peers = [f["vs_reference"] for f in measured if f.get("reference", {}).get("kind") == "peer" and
                 "vs_reference" in f]
        baselines = [f["vs_reference"] for f in measured if f.get("reference", {}).get("kind") == "baseline" and
                     "vs_reference" in f]
        g_peer, g_base = _geomean(peers), _geomean(baselines)
        rows.append({"area": s["title"], "figures": len(measured),
                     "vs_peer": f"{g_peer:.2f}x over {len(peers)}" if g_peer else "-",
                     "vs_baseline": f"{g_base:.2f}x over {len(baselines)}" if g_base else "-",
                     "not_measured": "; ".join(s.get("not_measured", [])) or "-"})
    return rows


def write(results, out, comparison=None):
    m = results["machine"]
    gpus = ", ".join(f"{g['name']} (driver {g['driver']}, {g['memory']})" for g in m["gpus"]) or "none"
    lines = [
        "# loom benchmark report", "",
        f"- **Commit** `{results['commit']}`, {results['date']}, `--{results['mode']}`: {results['repeats']} "
        f"repeat(s) of each benchmark, round-robin, in {results.get('seconds', 0):.0f} s",
        f"- **CPU** {m['cpu']['model']} ({m['cpu']['vendor']}, {m['cpu']['isa']}), {m['cores']} cores, "
        f"{m['memory_gib']} GiB; machine class `{m['class']}`",
        f"- **GPU** {gpus}",
        f"- **Build** {m['loom_build']}; {m['os']}",
        "- **Peers** " + ", ".join(f"{k} {v}" for k, v in sorted(m["libraries"].items())),
        *([f"- **OpenBLAS kernels** OPENBLAS_CORETYPE={m['cpu']['openblas_coretype']['value']} "
           f"({m['cpu']['openblas_coretype']['why']})"]
          if (m["cpu"].get("openblas_coretype") or {}).get("value") else []),
        *([f"- **Plots** not drawn: {results['plots_not_drawn']}"] if results.get("plots_not_drawn") else []),
        "",
        "Every figure is the median of the repeats, with their min-max. \"vs\" is loom against the same-run "
        "reference, above 1x when loom is ahead (a peer: another library; a baseline: the simplest way inside the "
        "same benchmark); against a prediction it is measured over predicted. A figure that could not be measured "
        "here says why.", "",
        "## Summary", "",
        "| area | figures | loom vs peers (geometric mean) | loom vs same-run baselines | not measured |",
        "|---|---:|---|---|---|"]
    for r in summary_rows(results):
        lines.append(f"| {r['area']} | {r['figures']} | {r['vs_peer']} | {r['vs_baseline']} | {r['not_measured']} |")
    for s in results["sections"]:
        lines += ["", f"## {s['title']}", ""]
        for why in s.get("not_measured", []):
            lines.append(f"- not measured: {why}")
        if s.get("not_measured"):
            lines.append("")
        if s["figures"]:
            lines += ["| figure | loom | min-max | unit | reference | reference median | vs |",
                      "|---|---:|---:|---|---|---:|---:|"]
            for f in s["figures"]:
                if "median" not in f:
                    lines.append(f"| {f['name']} | not measured: {f.get('not_measured', '')} | | {f['unit']} | | | |")
                    continue
                ref = f.get("reference")
                ref_name = f"{ref['name']} ({ref['kind']})" if ref else (
                    f"not measured: {f['reference_not_measured']}" if f.get("reference_not_measured") else "-")
                ref_median = _number(ref.get("median")) if ref else "-"
                if "prediction" in f:
                    ref_name += f"; cost model {f['prediction']:.3g}"
                lines.append(f"| {f['name']} | {_number(f['median'])} | {_number(f['min'])}-{_number(f['max'])} | "
                             f"{f['unit']} | {ref_name} | {ref_median} | {_versus(f)} |")
        for plot in s["plots"]:
            lines += ["", f"![{s['title']}]({plot})"]
    if comparison:
        import compare
        rows, name, baseline = comparison
        lines += ["", compare.markdown(rows, name, compare.machine_note(baseline, results))]
    with open(os.path.join(out, "report.md"), "w") as f:
        f.write("\n".join(lines) + "\n")

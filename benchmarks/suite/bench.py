"""loom's benchmark suite: every benchmark with its same-run references, repeated, into one
results.json (benchmarks/suite/results.schema.json), a report.md with plots, and, against a
baseline, the figures that moved beyond their noise. scripts/bench.sh sets up and runs it.

    python3 benchmarks/suite/bench.py [--smoke|--quick|--full] [--gpu] [--out DIR] [--build DIR]
                                      [--compare BASELINE|auto] [--fail-on-regression] [--save-baseline]

Repeats run round-robin (every job once, then every job again) so that a machine's drift touches
every benchmark alike; each figure keeps every repeat's value, and its median, min and max.
"""
import argparse
import datetime
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import compare  # noqa: E402
import jobs  # noqa: E402
import machine  # noqa: E402
import report  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SCHEMA = os.path.join(ROOT, "benchmarks", "suite", "results.schema.json")
BASELINES = os.path.join(ROOT, "benchmarks", "baselines")
MPI_ENV = {"OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1",
           "OMPI_MCA_btl_vader_single_copy_mechanism": "none"}
JOB_TIMEOUT_S = {"smoke": 120, "quick": 300, "full": 900}


def run_job(job, mode, build, out, repeat):
    """One run of one job; its JSON, or None and the reason."""
    json_path = os.path.join(out, "raw", f"{job.name}-{repeat}.json")
    log_path = os.path.join(out, "logs", f"{job.name}-{repeat}.txt")
    tmp = os.path.join(out, "tmp")
    os.makedirs(tmp, exist_ok=True)
    args = [a.replace("{json}", json_path).replace("{tmp}", tmp) for a in job.args[mode]]
    command = [os.path.join(build, "benchmarks", job.program), *args]
    if job.ranks > 1:
        command = ["mpirun", "-np", str(job.ranks), "--oversubscribe", "--bind-to", "none", *command]
    env = dict(os.environ, **MPI_ENV)
    started = time.monotonic()
    with open(log_path, "w") as log:
        log.write("$ " + " ".join(command) + "\n")
        log.flush()
        # A session of its own: on a timeout the whole tree goes (mpirun's ranks, the jobs that
        # ddp_bench, zero_bench and ckpt_bench start), not just the first process.
        process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=env, cwd=tmp,
                                   start_new_session=True)
        try:
            status = process.wait(timeout=JOB_TIMEOUT_S[mode])
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
            return None, f"timed out after {JOB_TIMEOUT_S[mode]} s (log: logs/{os.path.basename(log_path)})"
    seconds = time.monotonic() - started
    if status != 0 or not os.path.exists(json_path):
        return None, f"exited with status {status} (log: logs/{os.path.basename(log_path)})"
    try:
        with open(json_path) as f:
            doc = json.load(f)
    except ValueError as e:
        return None, f"wrote unreadable JSON ({e})"
    doc["suite_seconds"] = seconds
    return doc, None


def summarize(figure_in):
    """Median, min and max of the repeats (and of the reference's), and loom against the reference:
    above 1, loom is ahead (for a prediction: measured over predicted)."""
    f = dict(figure_in)
    if not f["values"]:
        f.setdefault("not_measured", "no repeat produced it")
        return f
    f.update(median=statistics.median(f["values"]), min=min(f["values"]), max=max(f["values"]))
    ref = f.get("reference")
    if ref and ref["values"]:
        ref.update(median=statistics.median(ref["values"]), min=min(ref["values"]), max=max(ref["values"]))
        if ref["median"] > 0 and f["median"] > 0:
            if ref["kind"] == "prediction":
                f["vs_reference"] = f["median"] / ref["median"]
            elif f["better"] == "higher":
                f["vs_reference"] = f["median"] / ref["median"]
            else:
                f["vs_reference"] = ref["median"] / f["median"]
    return f


def predicted_busbw(build, out, sizes):
    """The cost model's bus bandwidth at each size, for this machine's topology seen by 2 ranks."""
    topology = os.path.join(out, "tmp", "topology.json")
    env = dict(os.environ, **MPI_ENV)
    subprocess.run(["mpirun", "-np", "2", "--oversubscribe", os.path.join(build, "examples", "loom_topo", "loom-topo"),
                    "--dump", topology], env=env, capture_output=True, timeout=120, check=True)
    text = subprocess.run([os.path.join(build, "benchmarks", "allreduce_bench"), "--simulate", topology, "-b",
                           str(min(sizes)), "-e", str(max(sizes)), "-f", "2"], capture_output=True, text=True,
                          timeout=120, check=True).stdout
    predicted = {}
    for line in text.splitlines():
        parts = line.split()
        if line.startswith("#") or len(parts) < 9:
            continue
        predicted[int(parts[0])] = float(parts[7])
    return predicted


def baseline_file(host, mode):
    """A baseline per machine class and mode: the modes run different sizes."""
    return os.path.join(BASELINES, f"{host['class']}-{mode}.json")


def available(job, capabilities):
    for need in job.needs:
        if need == "mpi" and not capabilities["mpi"]:
            return "no MPI here (mpirun missing, or loom built without MPI)"
        if need == "gpu" and not capabilities["gpu"]:
            return capabilities["gpu_why_not"]
    return None


def build_results(mode, repeats, plan, docs, failures, skipped, host, predictions, gpu_asked, subset=False):
    sections = {area: {"area": area, "title": title, "figures": [], "plots": []} for area, title in jobs.AREAS}
    for job in plan:
        if job.name not in skipped and job.name not in failures:
            try:
                figures = job.extract(docs[job.name])
            except (KeyError, IndexError, ValueError, TypeError, StopIteration) as e:
                failures[job.name] = f"its JSON lacks what the suite reads ({type(e).__name__}: {e})"
        if job.name in skipped or job.name in failures:
            why = skipped.get(job.name) or failures[job.name]
            sections[job.area].setdefault("not_measured", []).append(f"{job.name}: {why}")
            continue
        for f in figures:
            area = job.area if job.area == "gpu" else f.pop("area", job.area)
            f.pop("area", None)
            if job.area == "gpu":
                f["id"] = "gpu." + f["id"]
            if job.name == "allreduce" and predictions:
                size = int(f["id"].rsplit(".", 1)[1])
                if size in predictions:
                    f["prediction"] = predictions[size]
            sections[area]["figures"].append(summarize(f))
    if not gpu_asked:
        sections["gpu"].setdefault("not_measured", []).append("not asked for: run with --gpu on a machine with a GPU")
    for s in sections.values():
        if not s["figures"] and not s.get("not_measured"):
            s["not_measured"] = ["no job of this run measures it" + (" (--jobs)" if subset else "")]
    return {"format": "loom-bench-suite-1", "mode": mode, "repeats": repeats,
            "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "commit": machine.commit(ROOT), "machine": host,
            "jobs": {job.name: {"seconds": [d["suite_seconds"] for d in docs.get(job.name, [])],
                                "status": "skipped" if job.name in skipped else "failed" if job.name in failures
                                else "ran", **({"why": skipped.get(job.name) or failures.get(job.name)}
                                               if job.name in skipped or job.name in failures else {})}
                     for job in plan},
            "sections": list(sections.values())}


def validate(doc):
    """Checks the document against the schema kept in the repository; None, or what is wrong."""
    try:
        import jsonschema
    except ImportError:
        print("bench: results.json not checked against its schema: python3-jsonschema is missing", file=sys.stderr)
        return None
    with open(SCHEMA) as f:
        schema = json.load(f)
    try:
        jsonschema.validate(doc, schema)
    except jsonschema.ValidationError as e:
        return f"{e.message} at {'/'.join(str(p) for p in e.absolute_path)}"
    return None


def main(argv=None):
    parser = argparse.ArgumentParser(description="loom's benchmark suite")
    size = parser.add_mutually_exclusive_group()
    for m in ("smoke", "quick", "full"):
        size.add_argument(f"--{m}", dest="mode", action="store_const", const=m)
    parser.add_argument("--gpu", action="store_true", help="add the GPU sections (on a machine with a GPU)")
    parser.add_argument("--out", help="where results.json, report.md and the plots go (default bench-results/DATE-MODE)")
    parser.add_argument("--build", default=os.environ.get("LOOM_BUILD_DIR", os.path.join(ROOT, "build")))
    parser.add_argument("--compare", help="a baseline results.json, or 'auto' (benchmarks/baselines/CLASS-MODE.json)")
    parser.add_argument("--fail-on-regression", action="store_true", help="exit 1 when a figure got worse")
    parser.add_argument("--save-baseline", action="store_true",
                        help="also write the results as this machine class's baseline in benchmarks/baselines/")
    parser.add_argument("--jobs", help="comma-separated job names (default: all)")
    args = parser.parse_args(argv)
    mode = args.mode or "quick"
    repeats = jobs.REPEATS[mode]
    if args.save_baseline and repeats < 2:
        parser.error(f"--save-baseline needs repeats to measure noise: --{mode} has {repeats}; use --quick or --full")
    out = os.path.abspath(args.out or os.path.join(ROOT, "bench-results",
                                                   datetime.datetime.now().strftime("%Y-%m-%d-%H%M") + "-" + mode))
    for sub in ("raw", "logs", "plots"):
        os.makedirs(os.path.join(out, sub), exist_ok=True)

    host = machine.describe(args.build)
    if host["cpu"]["openblas_coretype"]["value"]:
        # Every job and its peers inherit it (machine.openblas_coretype says why).
        os.environ["OPENBLAS_CORETYPE"] = host["cpu"]["openblas_coretype"]["value"]
    capabilities = machine.capabilities(args.build, host)
    plan = jobs.cpu_jobs(host["cores"]) + (jobs.gpu_jobs() if args.gpu else [])
    if args.jobs:
        wanted = set(args.jobs.split(","))
        unknown = wanted - {j.name for j in plan}
        if unknown:
            parser.error(f"unknown job(s) {', '.join(sorted(unknown))}; known: {', '.join(j.name for j in plan)}")
        plan = [j for j in plan if j.name in wanted]
    skipped = {j.name: why for j in plan if (why := available(j, capabilities))}
    print(f"loom bench --{mode}: {repeats} repeat(s) of {len(plan) - len(skipped)} job(s) on {host['cpu']['model']} "
          f"({host['cpu']['isa']}, {host['cores']} cores); results in {out}", flush=True)
    docs, failures = {}, {}
    started = time.monotonic()
    for repeat in range(repeats):
        for job in plan:
            if job.name in skipped or job.name in failures:
                continue
            t0 = time.monotonic()
            doc, why = run_job(job, mode, args.build, out, repeat)
            if doc is None:
                failures[job.name] = why
                print(f"  [{repeat + 1}/{repeats}] {job.name}: FAILED, {why}", flush=True)
                continue
            docs.setdefault(job.name, []).append(doc)
            print(f"  [{repeat + 1}/{repeats}] {job.name}: {time.monotonic() - t0:.1f} s", flush=True)
    for name, why in skipped.items():
        print(f"  {name}: not measured, {why}")
    predictions = {}
    if "allreduce" in docs:
        try:
            predictions = predicted_busbw(args.build, out, [r["size_bytes"] for r in docs["allreduce"][0]["rows"]])
        except (subprocess.SubprocessError, OSError, ValueError, KeyError) as e:
            print(f"  cost model prediction: not available ({e!r})")
    results = build_results(mode, repeats, plan, docs, failures, skipped, host, predictions, args.gpu,
                            bool(args.jobs))
    results["seconds"] = time.monotonic() - started
    why_no_plots = report.plot_all(results, os.path.join(out, "plots"))
    if why_no_plots:
        results["plots_not_drawn"] = why_no_plots
    with open(os.path.join(out, "results.json"), "w") as f:
        json.dump(results, f, indent=1)
    invalid = validate(results)  # after writing: a long run's numbers are kept whatever is wrong
    comparison, compare_error = None, None
    if args.compare:
        baseline_path = baseline_file(host, mode) if args.compare == "auto" else args.compare
        try:
            with open(baseline_path) as f:
                baseline = json.load(f)
            comparison = (compare.compare(baseline, results), os.path.relpath(baseline_path, ROOT), baseline)
        except OSError:
            compare_error = f"no baseline at {baseline_path} (make one with --save-baseline)"
        except compare.Incomparable as e:
            compare_error = str(e)
        except (ValueError, KeyError) as e:
            compare_error = f"the baseline {baseline_path} is not a suite's results.json ({e!r})"
    report.write(results, out, comparison)
    if args.save_baseline and not invalid:
        os.makedirs(BASELINES, exist_ok=True)
        target = baseline_file(host, mode)
        shutil.copyfile(os.path.join(out, "results.json"), target)
        print(f"bench: baseline for machine class {host['class']}, --{mode}, written to {os.path.relpath(target, ROOT)}")
    print(f"bench: {time.monotonic() - started:.0f} s; report: {os.path.join(out, 'report.md')}")
    status = 0
    if failures:
        print(f"bench: {len(failures)} job(s) failed: {', '.join(failures)}", file=sys.stderr)
        status = 1
    if invalid:
        print(f"bench: results.json does not hold to {os.path.relpath(SCHEMA, ROOT)}: {invalid}", file=sys.stderr)
        status = 1
    if compare_error:
        print(f"bench: not compared: {compare_error}", file=sys.stderr)
        return 2
    if comparison:
        worse = [r["id"] for r in comparison[0] if r["status"] == "worse"]
        print(f"bench: against {comparison[1]}: {len(worse)} worse, "
              f"{sum(r['status'] == 'better' for r in comparison[0])} better")
        if worse and args.fail_on_regression:
            print(f"bench: regression in {', '.join(worse)}", file=sys.stderr)
            status = 1
    return status


if __name__ == "__main__":
    sys.exit(main())

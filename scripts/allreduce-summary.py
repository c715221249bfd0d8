#!/usr/bin/env python3
"""Summarise several allreduce_bench JSON runs of one configuration: for every collective and
size, the median over the runs of loom's time over the raw backend's (out of place and in place,
each run's ratio taken within that run), and marks the cells over a target ratio.

    scripts/allreduce-summary.py [--target 1.05] RUN.json [RUN.json ...]

Exits 0 whatever the ratios are: it reports, it does not judge."""
import argparse
import json
import statistics
import sys


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("runs", nargs="+", help="allreduce_bench --json files of one configuration")
    parser.add_argument("--target", type=float, default=1.05, help="loom/raw ratio marked when exceeded")
    args = parser.parse_args()

    cells = {}  # (collective, bytes) -> lists of per-run figures
    configs = set()
    for path in args.runs:
        with open(path) as f:
            run = json.load(f)
        config = run["config"]
        configs.add((config["backend"], config["ranks"], run["machine"]["cpu"]["model"]))
        for row in run["rows"]:
            raw = row.get("raw")
            if not raw:
                sys.exit(f"{path}: row {row['collective']} {row['size_bytes']} has no raw column")
            cell = cells.setdefault((row["collective"], row["size_bytes"]),
                                    {"out": [], "in": [], "loom_out": [], "loom_in": [], "raw_out": [], "raw_in": []})
            cell["out"].append(raw["loom_over_raw"])
            cell["in"].append(raw["in_place_loom_over_raw"])
            cell["loom_out"].append(row["out_of_place"]["time_us"])
            cell["loom_in"].append(row["in_place"]["time_us"])
            cell["raw_out"].append(raw["time_us"])
            cell["raw_in"].append(raw["in_place_time_us"])
    if len(configs) != 1:
        sys.exit(f"the runs differ in backend, ranks or CPU: {sorted(configs)}")
    backend, ranks, cpu = configs.pop()
    print(f"# allreduce_bench, {backend} backend, {ranks} ranks, {cpu}: median over {len(args.runs)} runs")
    print(f"# loom/raw out, in place (x: over {args.target}); then median us: loom out, loom in, raw out, raw in;"
          " then the per-run range of loom/raw")
    over = 0
    for (collective, size), cell in sorted(cells.items()):
        med = {k: statistics.median(v) for k, v in cell.items()}
        marks = "".join("x" if med[k] > args.target else "." for k in ("out", "in"))
        over += marks.count("x")
        print(f"{collective:15} {size:>10} | {med['out']:6.3f} {med['in']:6.3f} {marks} | "
              f"{med['loom_out']:10.2f} {med['loom_in']:10.2f} {med['raw_out']:10.2f} {med['raw_in']:10.2f} | "
              f"out {min(cell['out']):.2f}-{max(cell['out']):.2f}, in {min(cell['in']):.2f}-{max(cell['in']):.2f}")
    print(f"# {over} of {2 * len(cells)} cells over {args.target}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

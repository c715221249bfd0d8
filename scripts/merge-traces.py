#!/usr/bin/env python3
"""Merges the per-rank Chrome traces of `train_gpt --trace DIR` (DIR/trace_rank<r>.json) into one
file with a process track per rank (Perfetto and chrome://tracing open it), and with --png draws
the merged timeline: one row per rank, its compute spans coloured by phase, its communication and
host spans on thinner lanes beneath.

usage: merge-traces.py DIR [-o merged.json] [--png timeline.png] [--step N]"""
import argparse
import glob
import json
import os
import re
import sys

PHASE_COLOURS = {
    "data": "#8c8c8c",
    "forward": "#4c72b0",
    "backward": "#dd8452",
    "communication": "#c44e52",
    "optimizer": "#55a868",
    "checkpoint": "#8172b2",
}


def load(directory):
    files = sorted(glob.glob(os.path.join(directory, "trace_rank*.json")),
                   key=lambda p: int(re.search(r"trace_rank(\d+)\.json$", p).group(1)))
    if not files:
        sys.exit(f"merge-traces: no trace_rank<r>.json in {directory}")
    traces = []
    for path in files:
        with open(path) as f:
            try:
                traces.append(json.load(f))
            except json.JSONDecodeError as e:
                sys.exit(f"merge-traces: {path} is not JSON: {e}")
    return files, traces


def merge(traces):
    events = []
    for trace in traces:
        events.extend(trace["traceEvents"])
    metadata = [e for e in events if e.get("ph") == "M"]
    spans = sorted((e for e in events if e.get("ph") == "X"), key=lambda e: (e["ts"], e["pid"], e["tid"]))
    ranks = sorted({t["otherData"]["rank"] for t in traces})
    return {"traceEvents": metadata + spans, "displayTimeUnit": "ms",
            "otherData": {"ranks": ranks, "merged_from": len(traces)}}


def draw(merged, path, step=None):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.patches import Patch

    spans = [e for e in merged["traceEvents"] if e.get("ph") == "X"]
    if step is not None:
        spans = [e for e in spans if e["args"].get("step") == step]
    if not spans:
        sys.exit("merge-traces: no spans to draw" + (f" in step {step}" if step is not None else ""))
    start = min(e["ts"] for e in spans)
    ranks = merged["otherData"]["ranks"]
    fig, ax = plt.subplots(figsize=(12, 0.9 + 0.75 * len(ranks)))
    for row, rank in enumerate(ranks):
        y = len(ranks) - 1 - row
        for e in spans:
            if e["pid"] != rank:
                continue
            x, width = (e["ts"] - start) / 1e3, max(e["dur"] / 1e3, 1e-3)
            if e["tid"] == 0 and e["cat"] == "phase":  # the step's phases: the row itself
                ax.broken_barh([(x, width)], (y + 0.35, 0.5), color=PHASE_COLOURS.get(e["name"], "#cccccc"))
            elif e["tid"] == 1:  # communication calls: a lane below
                ax.broken_barh([(x, width)], (y + 0.18, 0.14), color=PHASE_COLOURS["communication"], alpha=0.6)
            elif e["tid"] == 2:  # data wait and checkpoint saves
                ax.broken_barh([(x, width)], (y + 0.02, 0.14), color=PHASE_COLOURS.get(e["cat"], "#8c8c8c"))
    ax.set_yticks([len(ranks) - 1 - i + 0.5 for i in range(len(ranks))], [f"rank {r}" for r in ranks])
    ax.set_xlabel("milliseconds" + (f" (step {step})" if step is not None else ""))
    ax.set_ylim(0, len(ranks))
    fig.legend(handles=[Patch(color=c, label=n) for n, c in PHASE_COLOURS.items()], loc="lower center",
               ncol=len(PHASE_COLOURS), frameon=False)
    ax.set_title("loom training timeline: phases per rank, collectives and host work beneath")
    fig.tight_layout(rect=(0, 0.1 if len(ranks) > 2 else 0.16, 1, 1))
    fig.savefig(path, dpi=110)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("dir", help="the --trace directory")
    parser.add_argument("-o", "--output", help="merged trace (default DIR/merged.json)")
    parser.add_argument("--png", help="draw the timeline into this PNG")
    parser.add_argument("--step", type=int, help="draw only this step")
    args = parser.parse_args()
    files, traces = load(args.dir)
    merged = merge(traces)
    output = args.output or os.path.join(args.dir, "merged.json")
    with open(output, "w") as f:
        json.dump(merged, f)
    print(f"merged {len(files)} rank traces into {output}")
    if args.png:
        draw(merged, args.png, args.step)
        print(f"drew {args.png}")


if __name__ == "__main__":
    main()

"""Compares two runs of the benchmark suite (results.json, or a committed baseline) figure by figure.

A figure moved when its median moved by more than twice its noise, and its noise is measured, not
assumed: the larger relative spread, (max - min) / median, of its repeats in either run. Twice, so
that two runs of an unchanged machine rarely differ by that much (with 3 repeats each, a spread
covers about 1.7 standard deviations of one sample, and medians differ by about 1.2 of them). A
figure with fewer than 2 repeats on either side has no measured noise and is not compared; nor is
one measured on one side only. Direction comes from the figure: "higher" or "lower" is better.

    python3 benchmarks/suite/compare.py BASELINE CURRENT [--markdown OUT] [--fail-on-regression]
"""
import argparse
import json
import statistics
import sys

NOISE_MULTIPLE = 2.0


def spread(values):
    """Relative spread of the repeats, (max - min) / median; None with fewer than 2 repeats."""
    if len(values) < 2:
        return None
    ordered = sorted(values)
    median = statistics.median(ordered)
    if median == 0:
        return 0.0 if ordered[0] == ordered[-1] else float("inf")
    return (ordered[-1] - ordered[0]) / abs(median)


def compare_figure(base, current):
    """One figure of each run (dicts with values, median, better): a verdict and the numbers behind it.

    status: "better", "worse", "unchanged" or "not compared" (with why)."""
    out = {"id": current.get("id", base.get("id")), "status": "not compared"}
    for side, figure in (("baseline", base), ("current", current)):
        if figure.get("not_measured"):
            out["why"] = f"not measured in the {side} run: {figure['not_measured']}"
            return out
    noise_base, noise_current = spread(base["values"]), spread(current["values"])
    if noise_base is None or noise_current is None:
        out["why"] = "fewer than 2 repeats: no measured noise"
        return out
    if base["median"] == 0:
        out["why"] = "the baseline's median is 0"
        return out
    change = current["median"] / base["median"] - 1
    noise = max(noise_base, noise_current)
    out.update(change=change, noise=noise, baseline=base["median"], current=current["median"])
    if abs(change) <= NOISE_MULTIPLE * noise:
        out["status"] = "unchanged"
        return out
    higher_is_better = current.get("better", base.get("better")) == "higher"
    out["status"] = "better" if (change > 0) == higher_is_better else "worse"
    return out


def figures_by_id(doc):
    found = {}
    for section in doc["sections"]:
        for figure in section["figures"]:
            found[figure["id"]] = figure
    return found


class Incomparable(ValueError):
    """Runs of different modes: their figures come from different sizes."""


def compare(baseline_doc, current_doc):
    """Every figure of either run, in the current run's order, then those only the baseline has.
    Runs of different modes are refused (Incomparable)."""
    if baseline_doc.get("mode") != current_doc.get("mode"):
        raise Incomparable(f"the baseline is a --{baseline_doc.get('mode')} run and this one --{current_doc.get('mode')}: "
                           "the modes measure different sizes; compare runs of one mode")
    base, current = figures_by_id(baseline_doc), figures_by_id(current_doc)
    rows = []
    for fid, figure in current.items():
        if fid in base:
            rows.append(compare_figure(base[fid], figure))
        else:
            rows.append({"id": fid, "status": "not compared", "why": "new: not in the baseline"})
    for fid in base:
        if fid not in current:
            rows.append({"id": fid, "status": "not compared", "why": "gone: not in this run"})
    return rows


def markdown(rows, baseline_name, note=""):
    counts = {s: sum(1 for r in rows if r["status"] == s) for s in ("better", "worse", "unchanged", "not compared")}
    lines = [f"## Against the baseline `{baseline_name}`", "",
             f"{counts['worse']} worse, {counts['better']} better, {counts['unchanged']} within noise, "
             f"{counts['not compared']} not compared. A figure moved when its median moved by more than "
             f"{NOISE_MULTIPLE:g}x its noise (the larger relative max-min spread of its repeats in either run)."
             + (f" {note}" if note else ""), "",
             "| figure | baseline | this run | change | noise | verdict |", "|---|---:|---:|---:|---:|---|"]
    order = {"worse": 0, "better": 1, "unchanged": 2, "not compared": 3}
    for r in sorted(rows, key=lambda r: order[r["status"]]):
        if r["status"] == "not compared":
            lines.append(f"| {r['id']} | | | | | not compared: {r['why']} |")
        else:
            mark = {"worse": "**worse**", "better": "better", "unchanged": "within noise"}[r["status"]]
            lines.append(f"| {r['id']} | {r['baseline']:.4g} | {r['current']:.4g} | {100 * r['change']:+.1f}% | "
                         f"{100 * r['noise']:.1f}% | {mark} |")
    return "\n".join(lines) + "\n"


def machine_note(baseline_doc, current_doc):
    """Figures of two machine classes differ for more reasons than a change: say so."""
    a, b = baseline_doc["machine"]["class"], current_doc["machine"]["class"]
    return "" if a == b else f"**The machines differ** (baseline `{a}`, this run `{b}`): the changes include theirs."


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("baseline")
    parser.add_argument("current")
    parser.add_argument("--markdown", help="write the comparison table here")
    parser.add_argument("--fail-on-regression", action="store_true", help="exit 1 when a figure got worse")
    args = parser.parse_args(argv)
    docs = []
    for path in (args.baseline, args.current):
        try:
            with open(path) as f:
                docs.append(json.load(f))
        except (OSError, ValueError) as e:
            print(f"compare: cannot read {path}: {e}", file=sys.stderr)
            return 2
    baseline_doc, current_doc = docs
    try:
        rows = compare(baseline_doc, current_doc)
    except Incomparable as e:
        print(f"compare: {e}", file=sys.stderr)
        return 2
    text = markdown(rows, args.baseline, machine_note(baseline_doc, current_doc))
    if args.markdown:
        with open(args.markdown, "w") as f:
            f.write(text)
    print(text)
    worse = [r["id"] for r in rows if r["status"] == "worse"]
    if worse and args.fail_on_regression:
        print(f"compare: {len(worse)} figure(s) got worse: {', '.join(worse)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""Rows for loom's automatic GEMM rule (src/kernels/gemm_rule.cpp) from gemm_bench JSON.

usage: scripts/gemm-rule.py GEMM_JSON [--min-speedup 1.05] [--max-difference 1e-2]

For every shape, precision and layout where loom's own kernel ("loom-own") was faster than
cuBLASLt by at least --min-speedup and its result agreed with cuBLASLt's within
--max-difference (largest difference relative to the largest value), prints one exact-shape rule
row, with the measurement as a comment. Shapes where cuBLASLt won need no row (it is the
default). Widening exact shapes into ranges is a judgement left to the reader.
"""
import argparse
import json
import sys


def rows_from(record, min_speedup, max_difference):
    timings = {}
    for row in record.get("rows", []):
        key = (row["precision"], row.get("layout", "NN"), row["m"], row["n"], row["k"])
        timings.setdefault(key, {})[row["backend"]] = row
    out = []
    for (precision, layout, m, n, k), by_backend in sorted(timings.items()):
        own, cublas = by_backend.get("loom-own"), by_backend.get("cublaslt")
        if own is None or cublas is None:
            continue
        speedup = cublas["ms"] / own["ms"]
        difference = own.get("max_rel_diff_vs_cublaslt")
        if speedup < min_speedup or difference is None or difference > max_difference:
            continue
        out.append(
            f"    {{.precision = GemmPrecision::{precision}, .trans_a = {str(layout[0] == 'T').lower()}, "
            f".trans_b = {str(layout[1] == 'T').lower()}, .min_m = {m}, .max_m = {m}, .min_n = {n}, .max_n = {n}, "
            f".min_k = {k}, .max_k = {k}, .backend = GemmBackend::loom}},  "
            f"// {speedup:.2f}x cuBLASLt, difference {difference:.1e}")
    return out


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("json")
    parser.add_argument("--min-speedup", type=float, default=1.05)
    parser.add_argument("--max-difference", type=float, default=1e-2)
    args = parser.parse_args()
    try:
        with open(args.json) as f:
            record = json.load(f)
    except (OSError, json.JSONDecodeError) as error:
        print(f"gemm-rule: cannot read {args.json}: {error}", file=sys.stderr)
        return 1
    if record.get("benchmark") not in (None, "gemm_bench"):
        print(f"gemm-rule: {args.json} is a {record.get('benchmark')} record, not gemm_bench", file=sys.stderr)
        return 1
    rows = rows_from(record, args.min_speedup, args.max_difference)
    commit = record.get("commit", "unknown commit")
    print(f"// From {args.json} ({commit}): {len(rows)} shape(s) where loom's kernel won.")
    for row in rows:
        print(row)
    return 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""Reads train_gpt --trace files back with Python's json and checks what they hold for every rank
and every step in range: the phases, every unit's forward and backward inside its phase, the data
wait, each collective with its bytes (more than one rank), a checkpoint save in the step it
followed; then the merged file (scripts/merge-traces.py) has one process track per rank and the
PNG it drew is a PNG.
usage: check_trace.py TRACE_DIR RANKS FIRST LAST SAVE_EVERY MERGED_JSON PNG"""
import json
import sys


def spans(trace, step, **match):
    return [e for e in trace["traceEvents"] if e.get("ph") == "X" and e["args"]["step"] == step
            and all(e.get(k) == v for k, v in match.items())]


def main():
    directory, ranks, first, last, save_every = sys.argv[1], *map(int, sys.argv[2:6])
    merged_path, png = sys.argv[6], sys.argv[7]
    for rank in range(ranks):
        with open(f"{directory}/trace_rank{rank}.json") as f:
            trace = json.load(f)
        assert trace["otherData"]["rank"] == rank
        steps = {e["args"]["step"] for e in trace["traceEvents"] if e.get("ph") == "X"}
        assert steps == set(range(first, last + 1)), f"rank {rank}: steps {sorted(steps)}"
        for step in range(first, last + 1):
            where = f"rank {rank} step {step}"
            phases = {e["name"]: e for e in spans(trace, step, cat="phase", tid=0)}
            for name in ("forward", "backward", "optimizer"):
                assert name in phases, f"{where}: no {name} span in {sorted(phases)}"
            for kind in ("forward", "backward"):
                units = [e for e in spans(trace, step, cat="unit") if e["name"].startswith(kind + " unit ")]
                assert len(units) >= 2, f"{where}: {len(units)} {kind} unit spans"
                phase = phases[kind]
                for u in units:  # a unit runs inside its pass (1 us of rounding either side)
                    assert phase["ts"] - 1 <= u["ts"] and u["ts"] + u["dur"] <= phase["ts"] + phase["dur"] + 1, (where, u, phase)
            assert spans(trace, step, cat="data", tid=2), f"{where}: no data wait span"
            if ranks > 1:
                calls = spans(trace, step, cat="communication", tid=1)
                assert any(c["name"] == "all_reduce" and c["args"]["bytes"] > 1000 for c in calls), f"{where}: {calls}"
            saves = spans(trace, step, cat="checkpoint", tid=2)
            expected = 1 if step % save_every == 0 and step < last else 0
            assert len(saves) == expected, f"{where}: {len(saves)} checkpoint spans, expected {expected}"
    with open(merged_path) as f:
        merged = json.load(f)
    names = {e["pid"]: e["args"]["name"] for e in merged["traceEvents"] if e.get("name") == "process_name"}
    assert names == {r: f"rank {r}" for r in range(ranks)}, names
    assert {e["pid"] for e in merged["traceEvents"] if e.get("ph") == "X"} == set(range(ranks))
    ts = [e["ts"] for e in merged["traceEvents"] if e.get("ph") == "X"]
    assert ts == sorted(ts), "the merged spans are not in time order"
    with open(png, "rb") as f:
        assert f.read(8) == b"\x89PNG\r\n\x1a\n", f"{png} is not a PNG"
    print(f"ok: {ranks} rank traces of steps {first}-{last} and their merge")


if __name__ == "__main__":
    main()

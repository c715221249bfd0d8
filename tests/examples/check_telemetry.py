#!/usr/bin/env python3
"""Reads train_gpt's --metrics and --prometheus files back with independent readers (Python's json
and prometheus_client's reference parser) and checks what they hold: one line per logged step,
every phase, the phases inside the step's time, a checkpoint phase after each save, every rank's
straggler window after each exchange, and a Prometheus file whose samples equal the last JSON line's.
usage: check_telemetry.py METRICS_JSONL PROM_FILE STEPS LOG_EVERY CHECKPOINT_EVERY STRAGGLER_EVERY RANKS"""
import json
import math
import sys

from prometheus_client.parser import text_string_to_metric_families

PHASES = ["data", "forward", "backward", "communication", "optimizer", "checkpoint"]


def main():
    metrics_path, prom_path = sys.argv[1], sys.argv[2]
    steps, log_every, checkpoint_every, straggler_every, ranks = map(int, sys.argv[3:8])
    with open(metrics_path) as f:
        lines = [json.loads(line) for line in f]
    expected_steps = list(range(log_every, steps + 1, log_every))
    got_steps = [line["step"] for line in lines]
    assert got_steps == expected_steps, f"logged steps {got_steps}, expected {expected_steps}"
    for line in lines:
        phases = line["phase_seconds"]
        assert sorted(phases) == sorted(PHASES), f"step {line['step']}: phases {sorted(phases)}"
        assert all(v >= 0 for v in phases.values()), f"step {line['step']}: a negative phase {phases}"
        # Every phase but checkpoint (the saves between steps) lies inside the step's wall time.
        total = sum(phases.values()) - phases["checkpoint"]
        assert total <= line["step_seconds"] * 1.0001, f"step {line['step']}: phases {total} s > step {line['step_seconds']} s"
        for name in ("forward", "backward", "optimizer"):
            assert phases[name] > 0, f"step {line['step']}: no {name} time"
        assert line["rank"] == 0 and line["tokens_per_second"] > 0 and math.isfinite(line["loss"])
        assert line["memory_peak_bytes"]["activations"] > 0, "no activation memory on the CPU"
        # A save after step s (s a multiple of checkpoint_every) blocks inside step s + 1's checkpoint phase.
        saved_before = (line["step"] - 1) % checkpoint_every == 0 and line["step"] > 1
        assert (phases["checkpoint"] > 0) == saved_before, f"step {line['step']}: checkpoint phase {phases['checkpoint']}"
        # The latest straggler window: every rank's averages, from the first exchange on.
        window = line.get("window")
        last_exchange = line["step"] // straggler_every * straggler_every
        if last_exchange == 0:
            assert window is None, f"step {line['step']}: a window before the first exchange"
            continue
        assert window["last_step"] == last_exchange and window["steps"] == straggler_every, window
        assert [r["rank"] for r in window["ranks"]] == list(range(ranks)), window["ranks"]
        for r in window["ranks"]:
            assert 0 < sum(r["phase_seconds"].values()) - r["phase_seconds"]["checkpoint"] <= r["step_seconds"] * 1.001, r
    last = lines[-1]
    with open(prom_path) as f:
        families = {family.name: family for family in text_string_to_metric_families(f.read())}
    def value(name, **labels):
        family = families[name]
        for sample in family.samples:
            if sample.labels == {"rank": "0", **labels}:
                return sample.value
        raise AssertionError(f"{name}{labels}: no sample")
    assert value("loom_step") == last["step"]
    assert value("loom_step_seconds") == last["step_seconds"]
    assert value("loom_loss") == last["loss"]
    for phase in PHASES:
        assert value("loom_phase_seconds", phase=phase) == last["phase_seconds"][phase], phase
    assert value("loom_memory_peak_bytes", category="activations") == last["memory_peak_bytes"]["activations"]
    window = last["window"]
    for r in window["ranks"]:
        got = [s.value for s in families["loom_window_step_seconds"].samples if s.labels == {"rank": str(r["rank"])}]
        assert got == [r["step_seconds"]], (r, got)
    # prometheus_client drops a counter's _total suffix from the family name.
    assert families["loom_skipped_steps"].type == "counter"
    print(f"ok: {len(lines)} metrics lines and {len(families)} Prometheus families")


if __name__ == "__main__":
    main()

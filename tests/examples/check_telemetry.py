#!/usr/bin/env python3
"""Reads train_gpt's --metrics and --prometheus files back with independent readers (Python's json
and prometheus_client's reference parser) and checks what they hold: one line per logged step,
every phase, the phases inside the step's time, a checkpoint phase after each save, every rank's
straggler window after each exchange, and a Prometheus file whose samples equal the last JSON line's.
Then the right-sizing report: its JSON's ranks, shares and loom-plan rows, and the markdown's tables.
usage: check_telemetry.py METRICS_JSONL PROM_FILE STEPS LOG_EVERY CHECKPOINT_EVERY STRAGGLER_EVERY RANKS REPORT"""
import json
import math
import sys

from prometheus_client.parser import text_string_to_metric_families

PHASES = ["data", "forward", "backward", "communication", "optimizer", "checkpoint"]


def main():
    metrics_path, prom_path = sys.argv[1], sys.argv[2]
    steps, log_every, checkpoint_every, straggler_every, ranks = map(int, sys.argv[3:8])
    report_path = sys.argv[8]
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
        if ranks > 1:  # the gradient all-reduce, measured and predicted by the cost model
            ar = line["communication"]["all_reduce"]
            assert ar["measured_calls"] >= 1 and ar["bytes"] > 0 and ar["bus_bytes_per_second"] > 0, ar
            assert ar["predicted_bus_bytes_per_second"] > 0 and ar["achieved_over_predicted"] > 0, ar
        gpu = line["gpu"]  # the fake NVML's scripted reading (tests/support/fake_nvml.cpp)
        assert gpu["utilization_percent"] in (30, 60, 90) and gpu["memory_used_bytes"] == 40 << 30, gpu
        assert gpu["power_watts"] == 350.5 and gpu["pcie_rx_bytes_per_second"] == 2000 * 1024, gpu
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
    assert value("loom_gpu_power_watts") == 350.5
    assert value("loom_gpu_utilization_ratio") == last["gpu"]["utilization_percent"] / 100
    window = last["window"]
    for r in window["ranks"]:
        got = [s.value for s in families["loom_window_step_seconds"].samples if s.labels == {"rank": str(r["rank"])}]
        assert got == [r["step_seconds"]], (r, got)
    # prometheus_client drops a counter's _total suffix from the family name.
    assert families["loom_skipped_steps"].type == "counter"
    with open(report_path + ".json") as f:
        report = json.load(f)
    assert report["steps"] == steps and [r["rank"] for r in report["ranks"]] == list(range(ranks)), report["ranks"]
    for r in report["ranks"]:
        assert 0 < r["memory_peak_bytes"] < r["memory_capacity_bytes"], r
        assert r["gpu"]["utilization_p95_percent"] == 90 and r["gpu"]["samples"] > 0, r  # the fake NVML's
        assert sum(r["phase_seconds"].values()) - r["phase_seconds"]["checkpoint"] <= r["step_seconds"] * 1.001, r
    assert 0 <= report["communication_share"] < 1 and report["slowest_rank"] in range(ranks)
    kinds = {a["gpu"] for a in report["alternatives"]}
    assert kinds == {"NVIDIA A100-SXM4-80GB", "NVIDIA H100 80GB HBM3", "NVIDIA H200"}, kinds
    assert all(a["fits"] and a["tokens_per_second"] > 0 for a in report["alternatives"]), report["alternatives"]
    with open(report_path) as f:
        markdown = f.read()
    for rank in range(ranks):
        assert f"\n| {rank} | " in markdown, f"rank {rank} missing from the markdown report"
    assert "| NVIDIA H200 | " in markdown and "slowest rank" in markdown
    print(f"ok: {len(lines)} metrics lines, {len(families)} Prometheus families and the report")


if __name__ == "__main__":
    main()

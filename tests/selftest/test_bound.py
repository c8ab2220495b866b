"""Device- vs host-bound classification of latency cases (suite/bound.py) and the GPU study's analysis
(tools/bound_study.py) on made-up measurements."""

from __future__ import annotations

import importlib.util
import random
from pathlib import Path

import pytest

from suite.bound import DEVICE, HOST, classify

pytestmark = pytest.mark.selftest

ROOT = Path(__file__).resolve().parents[2]


def _record(path: str, median: float, util: float | None = None, device: str = "cuda:0") -> dict[str, object]:
    return {"kind": "latency", "cell": "m-torch-fp16", "batch_size": 1, "path": path, "device": device,
            "median_ms": median, "gpu": {} if util is None else {"mean_sm_util_pct": util}}


def test_each_path_is_classified_from_what_the_run_measured() -> None:
    graph = _record("graph", 0.9)
    assert classify(graph, [])[0] == DEVICE
    assert classify(_record("all", 5.0), [graph])[0] == HOST
    assert classify(_record("model", 0.92), [graph]) == (DEVICE, "eager 1.02x its CUDA-graph replay (<= 1.05x)")
    # the H100 study: ORT fp16 bs32 eager at 1.09x its replay moved +88 % with every CPU busy
    assert classify(_record("model", 0.98), [graph])[0] == HOST
    bound, why = classify(_record("model", 5.2), [graph])
    assert bound == HOST and "5.78x" in why and "launch-bound" in why
    assert classify(_record("model", 5.2, util=97.0), [])[0] == DEVICE  # no replay: NVML decides
    assert classify(_record("model", 5.2, util=40.0), [])[0] == HOST
    assert classify(_record("model", 5.2), [])[0] == HOST  # nothing to tell: the cautious answer
    assert classify(_record("model", 0.5, device="cpu"), [graph])[0] == HOST


ORT_CLOCK = "host perf_counter around run_with_iobinding (returns after the CUDA stream synchronizes)"


def test_a_replay_timed_on_the_host_is_device_bound_only_where_the_device_time_outweighs_the_host_path() -> None:
    """ONNX Runtime's replays are timed on the host, and ONNX Runtime synchronizes after each: on two H200s, cases
    under 2 ms moved up to 5.9 % between processes, cases from 2 ms up at most 1.8 % (docs/gpu.md)."""
    short = {**_record("graph", 0.8), "clock": ORT_CLOCK}
    bound, why = classify(short, [])
    assert bound == HOST and "timed on the host, 0.8 ms < 2 ms" in why
    assert classify({**_record("graph", 2.5), "clock": ORT_CLOCK}, [])[0] == DEVICE
    assert classify({**_record("graph", 0.05), "clock": "cuda events (torch) around a replay"}, [])[0] == DEVICE
    # an eager case near a host-bound replay proves nothing by the ratio: NVML decides, or the cautious answer
    replay = {**short, "bound": bound}
    assert classify({**_record("model", 0.82), "clock": ORT_CLOCK}, [replay])[0] == HOST
    assert classify({**_record("model", 0.82, util=95.0), "clock": ORT_CLOCK}, [replay])[0] == DEVICE
    assert classify(_record("model", 0.82), [{**_record("graph", 0.8), "bound": DEVICE}])[0] == DEVICE


def _load_study():
    spec = importlib.util.spec_from_file_location("bound_study", ROOT / "tools" / "bound_study.py")
    module = importlib.util.module_from_spec(spec)
    assert spec.loader is not None
    spec.loader.exec_module(module)
    return module


def test_the_study_counts_false_alarms_per_class_and_rule() -> None:
    """A device-bound case steady across processes, a host-bound one whose level follows the launch speed:
    plain single-run comparisons alarm on the host-bound case, the launch control cancels the drift."""
    study = _load_study()
    rng = random.Random(0)
    results = []
    for index, speed in enumerate((1.0, 1.3, 0.8, 1.15, 0.9)):
        device = [0.010 * (1 + rng.gauss(0, 0.002)) for _ in range(60)]
        host = [0.005 * speed * (1 + rng.gauss(0, 0.002)) for _ in range(60)]
        results.append({"index": index, "hogs": 0, "cases": [
            {"cell": "m-torch-fp16", "batch": 256, "path": "graph", "samples_s": device, "median_ms": 10.0 * 1,
             "util_pct": 99.0, "bound": "device", "why": "replay", "host_ms": 1.0, "launch_ms": 2.0},
            {"cell": "m-torch-fp16", "batch": 1, "path": "model", "samples_s": host, "median_ms": 5.0 * speed,
             "util_pct": 30.0, "bound": "host", "why": "eager 5x", "host_ms": 1.0, "launch_ms": 2.0 * speed}]})
    analysis = study.analyse(results)
    device, host = analysis["classes"]["device"], analysis["classes"]["host"]
    assert device["plain"]["alarms"] == 0 and device["plain"]["trials"] == 20
    assert host["plain"]["alarms"] >= 5 and host["launch_control"]["alarms"] == 0
    assert "| host | 1 |" in study.markdown(analysis)


def test_a_host_bound_gpu_case_is_judged_only_against_several_baseline_runs() -> None:
    """The class's gate rule (suite.bound.gate_rule): on the H100, host-bound cases read as regressions in 15 of
    100 A/A trials against one baseline run and 0 of 25 against four; device-bound ones in 0 of 260."""
    import numpy as np

    from metrics.regression import compare_latency
    from suite.bound import HOST_MIN_BASELINE_RUNS, gate_rule

    rng = np.random.default_rng(0)

    def run(ms: float) -> list[float]:
        return list(ms * 1e-3 * (1 + 0.002 * rng.standard_normal(200)))

    one = compare_latency([run(5.0)], run(6.0), 0.05, 0.99)
    assert one.verdict == "regression" and one.baseline_runs == 1
    host = {"bound": "host", "bound_why": "eager 5.78x its CUDA-graph replay (> 1.05x): launch-bound",
            "device": "cuda:0"}
    ruled = gate_rule(host, one)
    assert ruled.verdict == "inconclusive" and "regression against 1 baseline run(s)" in ruled.reason
    assert f"K >= {HOST_MIN_BASELINE_RUNS}" in ruled.reason and "launch-bound" in ruled.reason
    assert gate_rule({**host, "bound": "device"}, one) is one  # device-bound: the plain rule
    assert gate_rule({**host, "device": "cpu"}, one) is one  # CPU cases: the plain rule (docs/gating.md)
    several = compare_latency([run(5.0) for _ in range(HOST_MIN_BASELINE_RUNS)], run(6.0), 0.05, 0.99)
    assert several.verdict == "regression" and gate_rule(host, several) is several
    doubled = compare_latency([run(5.0)], run(10.0), 0.05, 0.99)
    assert gate_rule(host, doubled) is doubled  # beyond what launch speed moved between processes: judged
    same = compare_latency([run(5.0)], run(5.0), 0.05, 0.99)
    assert gate_rule(host, same) is same

"""Per-node deltas for a case that moved (issue 26): ONNX Runtime's profiler per node, against the baseline run's
(metrics/node_profile.py; the runner's node_profile; --node-profile; the gate's explanation of a moved case)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from metrics.drift import DriftTolerances
from metrics.node_profile import explain_nodes, node_deltas, node_round_times_us, node_times_us, round_deltas
from suite.gate.baselines import ResultsBaseline, latency_label
from suite.gate.latency import LatencyOutcome
from suite.gate.state import Gate

pytestmark = pytest.mark.selftest


def _event(node: str, dur: float, op: str = "Conv") -> dict[str, Any]:
    return {"cat": "Node", "name": f"{node}_kernel_time", "dur": dur, "args": {"op_name": op}}


def test_each_nodes_median_after_the_warmup_runs() -> None:
    events = [_event("conv1", 900), _event("gemm", 50, "Gemm"),  # warm-up run
              _event("conv1", 10), _event("gemm", 5, "Gemm"), {"cat": "Session", "name": "model_run", "dur": 99},
              _event("conv1", 12), _event("gemm", 7, "Gemm"),
              _event("conv1", 30), _event("gemm", 6, "Gemm"),
              {"cat": "Node", "name": "conv1_fence_before", "dur": 1}]
    assert node_times_us(events, skip_runs=1) == {"Conv conv1": 12.0, "Gemm gemm": 6.0}
    assert node_times_us(events)["Conv conv1"] == 21.0  # the warm-up counts when not skipped


def test_the_largest_change_first_and_its_share_of_the_whole() -> None:
    base = {"Conv a": 100.0, "Gemm b": 50.0, "Relu c": 10.0}
    now = {"Conv a": 101.0, "Gemm b": 80.0, "Add d": 9.0}
    assert [d.node for d in node_deltas(base, now)] == ["Gemm b", "Relu c", "Add d", "Conv a"]
    text = explain_nodes(base, now, top=2)
    assert text.startswith("per node (ONNX Runtime profiler): 0.160 -> 0.190 ms summed over 4 nodes")
    assert "Gemm b: 50.0 -> 80.0 us (+30.0) (100% of the change)" in text and "Relu c: gone, was 10.0 us" in text
    assert "Add d" not in text  # top=2


def test_each_nodes_median_per_round_after_the_warmup_and_no_short_last_round() -> None:
    runs = [[("conv1", 900)], [("conv1", 10)], [("conv1", 12)], [("conv1", 30)], [("conv1", 11)], [("conv1", 13)],
            [("conv1", 14)], [("conv1", 99)]]
    events = [_event(node, dur) for run in runs for node, dur in run]
    assert node_round_times_us(events, runs_per_round=3, skip_runs=1) == {"Conv conv1": [12.0, 13.0]}  # 99 left out
    assert node_round_times_us(events, runs_per_round=1, skip_runs=7) == {"Conv conv1": [99.0]}
    with pytest.raises(ValueError, match="runs_per_round"):
        node_round_times_us(events, runs_per_round=0)


def test_rounds_rank_a_node_that_moved_above_one_the_load_moved() -> None:
    """Interleaved rounds: load hits both sides of a round alike, so a large node's per-round change scatters
    about 0 while a small node that moved by 20 us moves every round. The medians of the two sides taken one after
    the other (node_deltas) name the large node; round_deltas names the moved one, then the new node."""
    load = [0, 300, -150, 500, 0, -200, 250, 0, 400, -100]
    scatter = [90, -60, 30, -20, 80, -40, 30, 100, 60, 30]  # the large node's per-round change: median 30, MAD 50
    base = {"Conv big": [3000.0 + x for x in load], "Relu small": [50.0] * 10}
    now = {"Conv big": [3000.0 + x + d for x, d in zip(load, scatter, strict=True)],
           "Relu small": [70.0 + (k % 3) for k in range(10)], "Mul new": [9.0 + (k % 2) for k in range(10)]}
    ranked = round_deltas(base, now)
    assert [d.node for d in ranked] == ["Relu small", "Mul new", "Conv big"]
    small, big = ranked[0], ranked[2]
    assert small.delta_us == pytest.approx(21.0) and small.baseline_us == 50.0 and small.current_us == 71.0
    assert big.beyond_spread_us < 0 < ranked[1].beyond_spread_us and ranked[1].baseline_us is None
    # the same times as medians of two runs one after the other: the large node's noise is named first
    sequential = node_deltas({"Conv big": 3000.0, "Relu small": 50.0}, {"Conv big": 3100.0, "Relu small": 71.0})
    assert sequential[0].node == "Conv big"
    assert small.describe(21.0).startswith("Relu small: 50.0 -> 71.0 us (+21.0 +- ")
    assert round_deltas({}, {}) == []


def test_the_runner_profiles_its_own_session_per_node(tmp_path: Path) -> None:
    import onnxruntime as ort

    from engines.onnxrt.backend import OnnxRuntimeRunner

    model = torch.nn.Sequential(torch.nn.Conv2d(1, 4, 3), torch.nn.ReLU(), torch.nn.Flatten(), torch.nn.Linear(144, 3))
    path = tmp_path / "m.onnx"
    torch.onnx.export(model, (torch.randn(1, 1, 8, 8),), str(path), input_names=["x"], output_names=["y"],
                      dynamic_axes={"x": {0: "b"}}, dynamo=False)

    def profiling(prefix: str) -> Any:
        options = ort.SessionOptions()
        options.enable_profiling, options.profile_file_prefix = True, prefix
        return ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])

    plain = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    runner = OnnxRuntimeRunner(plain, ("y",), label="m-onnxruntime-fp32", profiling_session=profiling)
    times = runner.node_profile({"x": np.ones((2, 1, 8, 8), np.float32)}, runs=5)
    assert any(n.startswith("Gemm ") for n in times) and all(t >= 0 for t in times.values())
    assert not list(tmp_path.glob("*.json"))  # the profile file went with its temporary directory
    with pytest.raises(RuntimeError, match="without a profiling session"):
        OnnxRuntimeRunner(plain, ("y",)).node_profile({"x": np.ones((1, 1, 8, 8), np.float32)}, runs=1)


def _gate(baseline_nodes: dict[str, dict[str, float]]) -> Gate:
    gate = Gate(max_slowdown=0.05, confidence=0.99, busy_limit=0.2, drift=DriftTolerances(),
                inject_slowdown=None, inject_accuracy_drop=None, environment={})
    gate.results_baseline = ResultsBaseline(source=Path("old.json"), environment={},
                                            engines={"m-onnxruntime-fp32": {"layers": 3}}, node_times=baseline_nodes)
    gate.latency = [LatencyOutcome("m-onnxruntime-fp32-bs1-all", "t::x", "regression"),
                    LatencyOutcome("m-onnxruntime-fp32-bs8-all", "t::y", "unchanged")]
    return gate


def test_a_moved_case_names_the_nodes_that_moved_where_both_runs_profiled_it() -> None:
    record = {"kind": "latency", "cell": "m-onnxruntime-fp32", "shape": "bs1", "path": "all",
              "node_times_us": {"Conv a": 100.0, "Gemm b": 90.0}}
    assert latency_label(record) == "m-onnxruntime-fp32-bs1-all"
    gate = _gate({"m-onnxruntime-fp32-bs1-all": {"Conv a": 100.0, "Gemm b": 50.0}})
    structure = gate.structure({"m-onnxruntime-fp32": {"layers": 3}}, [record])
    assert structure is not None
    why = structure["moved"]["m-onnxruntime-fp32-bs1-all"]
    assert why.startswith("structure: no structural change found") and "Gemm b: 50.0 -> 90.0 us (+40.0)" in why
    assert "m-onnxruntime-fp32-bs8-all" not in structure["moved"]  # unchanged: nothing to explain
    unprofiled = _gate({}).structure({"m-onnxruntime-fp32": {"layers": 3}}, [record])
    assert unprofiled is not None and "per node" not in unprofiled["moved"]["m-onnxruntime-fp32-bs1-all"]

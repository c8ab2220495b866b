"""The kernels one inference launches, with their GPU time (--kernel-profile; issue 26): the per-inference
arithmetic, the sentence beside a case that moved, the summary over every profiled case, and which runs profile.
The profiler itself needs a GPU (docs/gpu.md); here its totals are given."""

from __future__ import annotations

from pathlib import Path

import pytest

from metrics.drift import DriftTolerances
from metrics.kernel_profile import explain_kernels, kernels_per_inference, same_kernels
from suite.checks import kernel_profile
from suite.gate.baselines import ResultsBaseline, profiles_of
from suite.gate.latency import LatencyOutcome
from suite.gate.state import Gate
from suite.gate.tables import kernels_line

pytestmark = pytest.mark.selftest

CONV_A = "sm90_xmma_fprop_implicit_gemm_f16f16_f16f32_f32_nhwckrsc_nhwc_tilesize128x128x64"
CONV_B = "implicit_convolve_sgemm"


def test_totals_become_launches_and_gpu_time_per_inference_costliest_first() -> None:
    kernels = kernels_per_inference([("relu", 40, 80.0), (CONV_A, 20, 1000.0), ("relu", 10, 20.0)], inferences=10)
    assert kernels == {CONV_A: {"calls": 2.0, "gpu_us": 100.0}, "relu": {"calls": 5.0, "gpu_us": 10.0}}
    assert list(kernels) == [CONV_A, "relu"]


def test_the_sentence_says_whether_other_kernels_ran_and_where_the_time_went() -> None:
    base = {CONV_A: {"calls": 2.0, "gpu_us": 100.0}, "relu": {"calls": 5.0, "gpu_us": 10.0}}
    algorithm = {CONV_B: {"calls": 2.0, "gpu_us": 140.0}, "relu": {"calls": 5.0, "gpu_us": 10.0}}
    said = explain_kernels(base, algorithm)
    assert said.startswith("kernels per inference (torch.profiler): 7 -> 7 launches, 0.110 -> 0.150 ms GPU; "
                           "1 new, 1 gone; largest changes: "), said
    assert f"{CONV_B}: new, 140.0 us" in said and f"{CONV_A}: gone, was 100.0 us" in said
    slower = {CONV_A: {"calls": 2.0, "gpu_us": 120.0}, "relu": {"calls": 5.0, "gpu_us": 10.0}}
    assert "; the same kernels; largest changes: " + f"{CONV_A}: 100.0 -> 120.0 us (+20.0) (100% of the change)" \
        in explain_kernels(base, slower)
    assert same_kernels(base, slower) and not same_kernels(base, algorithm)


def test_long_cpp_kernel_names_are_shown_short() -> None:
    from metrics.kernel_profile import short_name

    full = ("void at::native::batch_norm_transform_input_kernel<c10::Half, c10::Half, float, true, int>"
            "(torch::headeronly::detail::GenericPackedTensorAccessor<c10::Half const, 3ul>, float)")
    assert short_name(full) == "at::native::batch_norm_transform_input_kernel"
    assert short_name(CONV_A) == CONV_A and short_name("Memcpy HtoD (Pageable -> Device)") == "Memcpy HtoD"
    said = explain_kernels({full: {"calls": 1, "gpu_us": 10.0}}, {full.replace("true", "false"): {"calls": 1,
                                                                                                   "gpu_us": 12.0}})
    assert "1 new, 1 gone" in said and "at::native::batch_norm_transform_input_kernel: 10.0 -> 12.0 us" in said
    assert "GenericPackedTensorAccessor" not in said


def test_only_a_gpu_case_with_the_option_is_profiled() -> None:
    assert not kernel_profile.wanted(0, "cuda:0")
    assert not kernel_profile.wanted(20, "cpu")
    assert kernel_profile.wanted(20, "cuda:0")


def _record(label_cell: str, shape: str, kernels: dict[str, dict[str, float]]) -> dict[str, object]:
    return {"kind": "latency", "cell": label_cell, "shape": shape, "path": "graph", "kernels": kernels}


def test_a_moved_case_names_its_kernels_and_the_summary_counts_cases_on_other_kernels() -> None:
    base = {CONV_A: {"calls": 2.0, "gpu_us": 100.0}}
    now = {CONV_B: {"calls": 2.0, "gpu_us": 140.0}}
    old_records = [_record("m-torch-fp16", "bs32", base), _record("m-torch-fp16", "bs1", base)]
    records = [_record("m-torch-fp16", "bs32", now), _record("m-torch-fp16", "bs1", base)]
    gate = Gate(max_slowdown=0.05, confidence=0.99, busy_limit=0.2, drift=DriftTolerances(), inject_slowdown=None,
                inject_accuracy_drop=None, environment={})
    gate.results_baseline = ResultsBaseline(source=Path("old.json"), environment={},
                                            engines={"m-torch-fp16": {"layers": 3}},
                                            kernels=profiles_of(old_records, "kernels"))
    gate.latency = [LatencyOutcome("m-torch-fp16-bs32-graph", "t::x", "regression"),
                    LatencyOutcome("m-torch-fp16-bs1-graph", "t::y", "unchanged")]
    structure = gate.structure({"m-torch-fp16": {"layers": 3}}, records)
    assert structure is not None
    assert "kernels per inference (torch.profiler): 2 -> 2 launches, 0.100 -> 0.140 ms GPU; 1 new, 1 gone" \
        in structure["moved"]["m-torch-fp16-bs32-graph"]
    assert structure["kernels"] == {"profiled": 2, "other_kernels": ["m-torch-fp16-bs32-graph"]}
    assert kernels_line(structure) == ("kernels: other kernels in 1 of 2 cases profiled in both runs: "
                                       "m-torch-fp16-bs32-graph")
    unprofiled = Gate(max_slowdown=0.05, confidence=0.99, busy_limit=0.2, drift=DriftTolerances(),
                      inject_slowdown=None, inject_accuracy_drop=None, environment={})
    unprofiled.results_baseline = ResultsBaseline(source=Path("old.json"), environment={})
    unprofiled.latency = gate.latency
    assert "kernels" not in (unprofiled.structure({}, records) or {})

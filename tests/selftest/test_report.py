"""The HTML report: its sections, tables and figures from hand-made data, and a real run's self-contained
file opened in headless Chromium (the DOM after pytest-html's scripts ran, and a screenshot)."""

from __future__ import annotations

import html as htmllib
import json
import math
import os
import re
import shutil
import subprocess
import tempfile
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from report.html import render_report
from report.practitioners_table import BASELINE_COLUMNS, GPU_COLUMNS, PRACTITIONER_COLUMNS
from report.run_section import RUN_METADATA_TITLE
from suite import verdict
from suite.gate.baseline_environment import difference_block
from tests.selftest.suite_runs import ci_environment, explain, run_suite

pytestmark = pytest.mark.selftest

CELLS = [("torch", "fp32"), ("onnxruntime", "fp32"), ("onnxruntime", "int8")]
HOST_CLOCK = "host perf_counter (outputs copied back to host, so the call has completed)"
EVENT_CLOCK = "cuda events (torch), inputs and outputs resident on the device"


# =========================================================================== hand-made data


def _latency(model: str, engine: str, precision: str, batch: int, path: str, *, scale: float = 1.0,
             gpu: bool = True, **extra: Any) -> dict[str, Any]:
    samples = [0.001 * scale * batch * (1 + 0.01 * i) for i in range(20)]
    record: dict[str, Any] = {
        "kind": "latency", "model": model, "engine": engine, "precision": precision,
        "cell": f"{model}-{engine}-{precision}", "batch_size": batch, "path": path,
        "clock": HOST_CLOCK if path == "all" else EVENT_CLOCK, "samples_s": samples,
        "mean_ms": 1.1 * scale * batch, "median_ms": 1.05 * scale * batch, "p90_ms": 1.3 * scale * batch,
        "p99_ms": 1.4 * scale * batch, "max_ms": 1.5 * scale * batch,
        "throughput_per_s": 900.0 * batch / scale, "gpu": {}, **extra}
    if gpu:
        record["gpu"] = {"source": "NVML", "peak_memory_mib": 120.0 + batch, "mean_sm_util_pct": 57.0,
                         "timeline": {"t_s": [0, 0.1, 0.2], "memory_mib": [100, 120, 120], "sm_util_pct": [0, 80, 90]}}
    return record


def _records() -> list[dict[str, Any]]:
    """One model 'net': three cells at batch 1 and 8 on the 'all' path, torch also on 'model'; accuracy,
    parity on its data set and on generated inputs (one with a localization table); a harness-overhead
    record for each torch path."""
    records: list[dict[str, Any]] = []
    for engine, precision in CELLS:
        base = {"model": "net", "engine": engine, "precision": precision, "cell": f"net-{engine}-{precision}"}
        for batch in (1, 8):
            records.append(_latency("net", engine, precision, batch, "all"))
            if engine == "torch":
                records.append(_latency("net", engine, precision, batch, "model", scale=0.5, bound="host"))
        records.append({**base, "kind": "accuracy", "dataset": "d", "top1": 0.95, "top5": 0.99, "n": 100})
        if (engine, precision) != ("torch", "fp32"):
            records.append({**base, "kind": "parity", "dataset": "d", "name": "logits", "isclose_pct": 99.5,
                            "mae": 1e-6, "max_abs_error": 3e-5, "cosine": 0.9999991, "top1_agreement_pct": 100.0,
                            "passed": True, "shape": [64, 10],
                            "ranks": [{"rank": r, "mae": 1e-6 * r, "disagreement_pct": 0.5 * r} for r in range(1, 11)]})
            generated = {**base, "kind": "parity", "dataset": "generated:normal", "name": "logits",
                         "isclose_pct": 97.25, "mae": 2e-6, "max_abs_error": 4e-5, "cosine": 0.99998,
                         "top1_agreement_pct": 98.5, "passed": precision != "int8",
                         "failures": ["cosine 0.99998 < 0.99999"] if precision == "int8" else []}
            if precision == "int8":
                generated["localization"] = [
                    {"name": "/features/conv3/Conv", "op": "Conv", "max_abs_error": 0.75, "cosine": 0.91,
                     "isclose_pct": 12.5},
                    {"name": "/features/relu3/Relu", "op": "Relu", "max_abs_error": 0.5, "cosine": 0.93,
                     "isclose_pct": 20.0}]
            records.append(generated)
    for path, overhead in (("model", 1.25), ("graph", 3.5)):
        records.append({"kind": "harness_overhead", "model": "net", "engine": "torch", "precision": "fp32",
                        "cell": "net-torch-fp32", "batch_size": 8, "path": path, "clock": EVENT_CLOCK,
                        "suite_median_ms": 1.0125, "bare_median_ms": 1.0, "overhead_pct": overhead,
                        "overhead_low_pct": overhead - 0.5, "overhead_high_pct": overhead + 0.5, "limit_pct": 2.0,
                        "rounds": 200, "ratio_of_medians_pct": 1.3, "host_overhead_pct": 6.0,
                        "pairing": "both calls every round, order alternating"})
    return records


def _engines() -> dict[str, dict[str, Any]]:
    return {"net-torch-fp32": {"size_mb": 4.25, "layers": 12, "parameters": 1_234_567, "layer_kind": "leaf modules"},
            "net-onnxruntime-fp32": {"size_mb": 4.3, "layers": 31, "parameters": 1_234_567,
                                     "layer_kind": "onnx nodes", "providers": ["CPUExecutionProvider"]},
            "net-onnxruntime-int8": {"size_mb": 2.5, "layers": 57, "parameters": 1_234_567,
                                     "layer_kind": "onnx nodes"}}


def _environment() -> dict[str, Any]:
    return {"device": "cuda:0", "hostname": "gpu-7", "python": "3.11.9", "platform": "Linux-6.1-x86_64",
            "cpu": "AMD EPYC 9654", "cpu_count": 16, "torch": "2.14.1+cu130", "onnxruntime-gpu": "1.31.1",
            "tensorrt": "10.13.0", "onnxruntime_providers": ["CUDAExecutionProvider", "CPUExecutionProvider"],
            "gpu_name": "NVIDIA H100 80GB HBM3", "gpu_compute_capability": "9.0", "cuda_runtime": "13.0",
            "cudnn": 91200, "driver": "580.159.04"}


def _gate(**extra: Any) -> dict[str, Any]:
    return {"latency_baseline": "b.json", "accuracy_baseline": None, "max_slowdown": 0.05, "confidence": 0.99,
            "environment_differences": {"latency": {"source": "b.json", "keys": {"gpu_name": ["A100", "H100"]}}},
            "latency": [{"label": "net-onnxruntime-int8-bs8-all", "status": "regression", "baseline_median_ms": 8.0,
                         "current_median_ms": 9.0, "change_pct": 12.5, "ci_low": 1.1, "ci_high": 1.15,
                         "interference": 0.01, "baseline_interference": 0.0},
                        {"label": "net-torch-fp32-bs8-model", "status": "unchanged", "baseline_median_ms": 4.25,
                         "current_median_ms": 4.2, "change_pct": -1.18, "ci_low": 0.97, "ci_high": 1.0,
                         "interference": 0.0, "baseline_interference": 0.0},
                        {"label": "net-onnxruntime-fp32-bs1-all", "status": "no-baseline", "interference": 0.0,
                         "baseline_interference": None}],
            "drift": [], "injected": {}, **extra}


COVERAGE = {"latency": {"gated": 40, "cases": 45, "without_baseline": 5, "absent_from_run": 2},
            "accuracy": {"gated": 12, "cases": 12, "without_baseline": 0, "absent_from_run": 0}}


def _check(check_id: str, state: str, reason: str | None = None, detail: str = "", known: bool = False,
           components: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    return {"id": check_id, "state": state, "reason": reason, "detail": detail, "known_failure": known,
            "components": components or []}


def _verdict() -> dict[str, Any]:
    """A failed run: one latency regression, not-judged checks for an accepted and an unaccepted reason,
    one known failure (the shape of suite.verdict.Ledger.as_dict())."""
    unsupported = [_check(f"tests/latency/test_latency.py::test_latency[net-torch-int8-bs{b}]", "not judged",
                          "unsupported", "not judged (unsupported): torch has no int8 path") for b in (1, 8)]
    busy = [_check("tests/latency/test_latency.py::test_latency[net-onnxruntime-fp32-bs1]", "not judged", "busy",
                   "net-onnxruntime-fp32-bs1-all: other processes used 45% of the CPUs",
                   components=[{"label": "net-onnxruntime-fp32-bs1-all", "state": "not judged", "reason": "busy",
                                "detail": "other processes used 45% of the CPUs"}])]
    return {
        "verdict": "failed", "why": ["1 check(s) failed", "1 not judged (busy), a reason not accepted"],
        "accepted": ["unsupported"], "interrupted": None,
        "counts": {"passed": 17, "failed": 1, "known_failures": 1, "not_judged": {"busy": 1, "unsupported": 2}},
        "failed": [_check("tests/latency/test_latency.py::test_latency[net-onnxruntime-int8-bs8]", "failed",
                          detail="AssertionError: 1 latency case regressed\nsecond line of the detail",
                          components=[{"label": "net-onnxruntime-int8-bs8-all", "state": "failed",
                                       "reason": None, "detail": "12.50% slower, CI [1.100, 1.150]"}])],
        "known_failures": [_check("tests/parity/test_parity.py::test_parity_on_dataset[net-onnxruntime-int8]",
                                  "failed", detail="cosine 0.51 with ORT_ENABLE_ALL", known=True)],
        "not_judged": {"busy": busy, "unsupported": unsupported},
        "reasons": {"busy": "other processes used the CPUs while this case was timed, in every attempt",
                    "unsupported": "the engine has no such path by design"},
    }


def _run_info() -> dict[str, Any]:
    return {"config": "suite-gpu.toml", "engine_options": {"onnxruntime": {"execution_provider": "cuda"},
                                                           "tensorrt": {"workspace_mb": 4096}},
            "git_commit": "abc123 (dirty)", "command": "pytest --device cuda:0 --suite-config suite-gpu.toml",
            "device": "cuda:0", "workers": 2, "phases": {"building": 75.0, "accuracy/parity": 41.5, "latency": 320.0}}


def test_the_run_table_gives_each_workers_time_but_not_every_tests() -> None:
    """run.worker_time is a row of the run's table; run.test_times (a row per test phase, thousands in a night) is
    kept in --suite-results for tools/compare_runs.py, not written into the report."""
    times = [["t.py::test_x[a-torch-fp32]", "gw0", "call", 0.0, 1.25]] * 3
    html = _render(run_info={**_run_info(), "worker_time": {"gw0": {"span_s": 9.0, "idle_s": 0.5}},
                             "test_times": times})
    assert 'data-key="worker_time"' in html and "span_s=9.0" in html.replace(" ", "")
    assert 'data-key="test_times"' not in html and "test_x[a-torch-fp32]" not in html


def _render(**kwargs: Any) -> str:
    args: dict[str, Any] = dict(records=_records(), engines=_engines(), environment=_environment(), gate=_gate(),
                                verdict=_verdict(), run_info=_run_info(), with_plots=False)
    args.update(kwargs)
    return render_report(**args)


def _one(pattern: str, text: str) -> str:
    match = re.search(pattern, text, flags=re.S)
    assert match, pattern
    return match.group(0)


# =========================================================================== verdict and the run


def test_verdict_comes_first_then_the_run_then_models_changes_and_the_environment() -> None:
    """Only the difference from the baseline's environment comes before the verdict (test_environment_difference.py
    has what it shows)."""
    base = {**_environment(), "onnxruntime-gpu": "1.30.0"}
    html = _render(difference=difference_block(_environment(), [("b.json", base)]))
    order = [html.index(marker) for marker in ('id="suite-difference"', 'id="suite-verdict"', 'id="suite-run"',
                                               'id="model-net"', 'class="suite practitioners"', 'id="changes"',
                                               'id="suite-environment"')]
    assert order == sorted(order)
    verdict = _one(r'<section id="suite-verdict".*?</section>', html)
    assert 'class="verdict verdict-failed"' in verdict and '<span class="word">failed</span>' in verdict
    assert "<li>1 check(s) failed</li>" in verdict
    assert ("17 passed &middot; 1 failed &middot; 1 known failure &middot; 3 not judged (busy 1, unsupported 2)"
            in verdict)
    # a failed check: its id and the first line of its detail, and the comparison that failed
    assert "test_latency[net-onnxruntime-int8-bs8]</code>: AssertionError: 1 latency case regressed" in verdict
    assert "second line" not in verdict
    assert "<code>net-onnxruntime-int8-bs8-all</code> failed: 12.50% slower, CI [1.100, 1.150]" in verdict
    # the latency regressions, baseline -> current and change
    regression = _one(r'<table class="suite verdict-regressions".*?</table>', verdict)
    assert "<td>8.0000</td><td>9.0000</td><td>+12.50%</td><td>[1.100, 1.150]</td>" in regression
    assert "net-torch-fp32-bs8-model" not in regression  # unchanged cases are not listed here


def test_not_judged_checks_are_grouped_by_reason_with_its_description_and_whether_it_was_accepted() -> None:
    verdict = _one(r'<section id="suite-verdict".*?</section>', _render())
    busy = _one(r'<div class="not-judged-reason" data-reason="busy".*?</div>', verdict)
    assert 'data-accepted="no"' in busy and "not accepted</span>" in busy and "--accept-not-judged busy" in busy
    assert "other processes used the CPUs while this case was timed" in busy and "45% of the CPUs" in busy
    assert busy.count("net-onnxruntime-fp32-bs1-all") == 1, "a comparison the detail names is not repeated"
    unsupported = _one(r'<div class="not-judged-reason" data-reason="unsupported".*?</div>', verdict)
    assert 'data-accepted="yes"' in unsupported and "unsupported: 2 checks" in unsupported
    assert "the engine has no such path by design" in unsupported and unsupported.count('class="check"') == 2
    known = verdict[verdict.index("Known failures (1)"):]
    assert "test_parity_on_dataset[net-onnxruntime-int8]</code>: cosine 0.51" in known


def test_verdict_from_a_real_ledger_and_a_passed_and_a_missing_verdict() -> None:
    from suite.verdict import FAILED, NOT_JUDGED, PASSED, Ledger

    ledger = Ledger(accepted=("unsupported",))
    ledger.add("t::a", PASSED)
    ledger.add("t::b", NOT_JUDGED, "unsupported", "not judged (unsupported): no int8 path")
    html = _render(verdict=ledger.as_dict())
    assert '<span class="word">passed</span>' in html and 'class="verdict verdict-passed"' in html
    assert 'data-reason="unsupported" data-accepted="yes"' in html
    ledger.add("t::c", NOT_JUDGED, "no-baseline", "net-torch-fp32-bs1-all: no baseline")
    html = _render(verdict=ledger.as_dict())
    assert 'class="verdict verdict-not-judged"' in html and "1 not judged (no-baseline), a reason not accepted" in html
    ledger.add("t::d", FAILED, detail="AssertionError: top-1 0.5 < 0.9")
    assert 'class="verdict verdict-failed"' in _render(verdict=ledger.as_dict())
    html = _render(verdict=None)
    assert html.index('id="suite-verdict"') < html.index('id="suite-run"') and "not recorded" in html


def test_many_checks_are_folded_behind_details() -> None:
    verdict = _verdict()
    verdict["not_judged"]["unsupported"] = [_check(f"t::case{i}", "not judged", "unsupported") for i in range(30)]
    section = _one(r'<div class="not-judged-reason" data-reason="unsupported".*?</div>', _render(verdict=verdict))
    assert section.count('class="check"') == 30 and "<summary>18 more</summary>" in section


def test_the_run_shows_the_environment_that_matters_coverage_and_phases() -> None:
    html = _render(gate=_gate(coverage=COVERAGE))
    run = html[html.index('id="suite-run"'):html.index('id="model-net"')]
    for text in ("NVIDIA H100 80GB HBM3", "580.159.04", "13.0", "91200", "2.14.1+cu130", "1.31.1 (onnxruntime-gpu)",
                 "10.13.0", "9.0", "<code>suite-gpu.toml</code>", "<b>onnxruntime</b>: execution_provider=cuda",
                 "<b>tensorrt</b>: workspace_mb=4096", "<code>abc123 (dirty)</code>", "<code>b.json</code>"):
        assert text in run, text
    assert re.search(r'<tr class="drift" data-key="gpu_name">', run), "GPU differs from the baseline's"
    assert ("<b>latency gate</b>: gated 40 of 45 cases; 5 without baseline; 2 baseline cases absent from this run"
            in run)
    assert "<b>accuracy/parity drift gate</b>: gated 12 of 12 records; 0 without baseline" in run
    phases = _one(r'<table class="suite phases".*?</table>', run)
    assert "<td>75.0 s</td>" in phases and "<td>41.5 s</td>" in phases and "<td>5.3 min</td>" in phases
    # absent pieces are left out, not invented
    bare = _render(gate={}, run_info=None)
    run = bare[bare.index('id="suite-run"'):bare.index('id="model-net"')]
    assert "Gate coverage" not in run and "Wall time" not in run and "config file" not in run


def test_one_environment_table_the_suites_fingerprint() -> None:
    html = _render()
    assert html.count('class="suite environment"') == 1
    env = _one(r'<table class="suite environment".*?</table>', html)
    assert "<td class=\"name\">cudnn</td>" in env and "CUDAExecutionProvider, CPUExecutionProvider" in env
    assert '<tr class="drift"><td class="name">gpu_name</td>' in env
    # pytest-html's own block is hidden when pytest-metadata leaves it empty
    assert "#environment:empty" in html


def test_pytest_metadata_keeps_only_what_the_user_passed() -> None:
    from report.plugin import pytest_metadata

    metadata = {"Python": "3.11.9", "Platform": "Linux", "Packages": {"pytest": "9.2.0", "pluggy": "1.6"},
                "Plugins": {"html": "4.2.0"}, "nightly": "42"}
    pytest_metadata(metadata, None)  # type: ignore[arg-type]
    assert metadata == {"nightly": "42"}


# =========================================================================== per model


def test_practitioners_table_rows_engine_precision_path_with_facts_median_and_baseline() -> None:
    html = _render()
    tables = re.findall(r'<table class="suite practitioners".*?</table>', html, flags=re.S)
    assert len(tables) == 2  # batch 1 and batch 8
    for column in (*PRACTITIONER_COLUMNS, *BASELINE_COLUMNS, *GPU_COLUMNS, "bound"):
        assert re.search(rf">{re.escape(column)}</th>", tables[0]), column
    for table in tables:
        cells = re.findall(r'data-cell="net-([\w-]+)" data-path="(\w+)"', table)
        assert cells == [("torch-fp32", "all"), ("torch-fp32", "model"), ("onnxruntime-fp32", "all"),
                         ("onnxruntime-int8", "all")]
    bs8 = tables[1]
    caption = _one(r"<caption>.*?</caption>", bs8)
    assert "net, batch 8" in caption and "latency-all (host arrays in and out" in caption
    assert f"clock: {HOST_CLOCK}" in caption and "latency-model (inputs and outputs" in caption
    assert f"clock: {EVENT_CLOCK}" in caption and "isclose and MAE against PyTorch fp32 on d" in caption
    int8 = _one(r'<tr class="regression" data-cell="net-onnxruntime-int8" data-path="all">.*?</tr>', bs8)
    # layers (with what the engine counts), parameters, size, then median / mean / p99 / max, throughput
    assert ('<td>57<span class="unit">onnx nodes</span></td><td>1,234,567</td><td>2.500</td>'
            '<td class="name">all</td><td>8.400</td><td>8.800</td><td>11.20</td><td>12.00</td><td>7,200</td>') in int8
    assert '<td>8.000</td><td class="name">+12.50% regression</td>' in int8  # baseline and change
    assert "<td>95.00</td><td>99.00</td><td>99.50</td><td>1e-06</td>" in int8  # top-1, top-5, isclose, MAE on d
    torch_model = _one(r'<tr class="unchanged" data-cell="net-torch-fp32" data-path="model">.*?</tr>', bs8)
    assert '<td class="name">host</td><td>4.250</td><td class="name">-1.18% unchanged</td>' in torch_model
    torch_all = _one(r'<tr class="" data-cell="net-torch-fp32" data-path="all">.*?</tr>', bs8)
    assert 'rowspan="2"' in torch_all and "reference" in torch_all  # cell figures span both path rows
    assert '<td class="name">-</td>' in torch_all  # no bound recorded on this row
    no_base = _one(r'<tr class="no-baseline" data-cell="net-onnxruntime-fp32".*?</tr>', tables[0])
    assert '<td>-</td><td class="name">no-baseline</td>' in no_base


def test_practitioners_table_without_baseline_gpu_or_bound_has_only_its_own_columns() -> None:
    records = [r for r in _records() if r.get("path", "all") == "all"]
    for r in records:
        r["gpu"] = {}
    html = _render(records=records, gate={}, engines={})
    table = _one(r'<table class="suite practitioners".*?</table>', html)
    assert re.findall(r">([^<>]+)</th>", table) == list(PRACTITIONER_COLUMNS)
    assert "<td>-</td><td>-</td><td>-</td>" in table  # no engine facts: layers, parameters, size
    assert "latency-model" not in _one(r"<caption>.*?</caption>", table)


def test_parity_tables_per_data_set_generated_inputs_and_worst_layers() -> None:
    html = _render()
    tables = re.findall(r'<table class="suite parity".*?</table>', html, flags=re.S)
    assert [re.search(r'data-dataset="([^"]+)"', t).group(1) for t in tables] == ["d", "generated:normal"]  # type: ignore[union-attr]
    assert "parity against PyTorch fp32 on d, 64 rows" in tables[0]
    assert "on generated inputs (normal)" in tables[1]
    int8 = _one(r'<tr class="drift" data-cell="net-onnxruntime-int8">.*?</tr>', tables[1])
    assert "<td>97.25</td><td>2e-06</td><td>4e-05</td><td>0.999980</td><td>98.50</td>" in int8
    assert "FAILED: cosine 0.99998 &lt; 0.99999" in int8
    loc = _one(r'<table class="suite localization".*?</table>', html)
    assert "net-onnxruntime-int8, output logits on generated inputs (normal): worst layers" in loc
    assert '<td class="name">/features/conv3/Conv</td><td class="name">Conv</td><td>0.750</td><td>0.910000</td>' in loc
    assert html.index(tables[1]) < html.index(loc)
    ranks = _one(r'<table class="suite ranks".*?</table>', html)
    assert ranks.count("<tr><td>") == 10 and "onnxruntime int8" in ranks and "On d." in ranks


def test_harness_overhead_table_sits_next_to_the_latency_figures() -> None:
    html = _render(with_plots=True)
    overhead = _one(r'<table class="suite overhead".*?</table>', html)
    rows = re.findall(r'<tr class="([\w-]*)" data-cell="net-torch-fp32">(.*?)</tr>', overhead)
    assert [cls for cls, _ in rows] == ["", "over-limit"]
    assert ('<td class="name">model</td><td>8</td><td>1.0125</td><td>1.0000</td><td>+1.25%</td>'
            "<td>+0.75 .. +1.75%</td><td>+1.30%</td><td>+6.00%</td><td>2%</td><td>200</td>"
            '<td class="name">within</td>') in rows[0][1]
    assert '<td class="name">over the limit</td>' in rows[1][1]
    assert "median over rounds of suite/bare - 1" in overhead and EVENT_CLOCK in overhead
    latency_figure = html.index('alt="net latency per round"')
    gpu_figure = html.index('alt="net GPU memory and utilization over time"')
    assert latency_figure < html.index('class="suite overhead"') < gpu_figure


def test_no_overhead_section_without_records() -> None:
    records = [r for r in _records() if r["kind"] != "harness_overhead"]
    assert 'class="suite overhead"' not in _render(records=records)


# =========================================================================== figures


def test_every_figure_is_an_embedded_png_with_a_caption() -> None:
    html = _render(with_plots=True, gate=None)
    figures = re.findall(r'<figure class="plot"><img class="plot" alt="([^"]+)" src="data:image/png;base64,'
                         r'([A-Za-z0-9+/=]+)"/><figcaption>(.*?)</figcaption></figure>', html, flags=re.S)
    assert [alt for alt, _, _ in figures] == ["net latency per round", "net throughput against batch size",
                                              "net GPU memory and utilization over time"]
    assert all(len(png) > 5000 for _, png, _ in figures)
    assert html.count("<img") == len(figures), "an image outside a captioned figure"
    latency, throughput, gpu = (caption for _, _, caption in figures)
    assert "one box per engine and precision" in latency and "median (the figure the latency gate compares)" in latency
    assert "20 rounds per case" in latency and HOST_CLOCK in latency
    assert "items per second = batch size / median round" in throughput
    assert "largest batch, on the device-resident path" in gpu
    assert "No baseline was given" in html


def _many_cells_records() -> list[dict[str, Any]]:
    """A GPU tier's worth of cases: 4 engines x 5 precisions x 3 batches x 3 paths, each with a timeline."""
    records = []
    for engine in ("torch", "onnxruntime", "inductor", "tensorrt"):
        for i, precision in enumerate(("fp32", "tf32", "fp16", "bf16", "int8")):
            for batch in (1, 32, 256):
                for path in ("all", "model", "graph"):
                    records.append(_latency("big", engine, precision, batch, path, scale=1 + i))
    return records


def test_no_axes_holds_more_than_eight_series() -> None:
    from report import plots

    records = _many_cells_records()
    built = plots.model_plots(records, "big")
    try:
        assert [p.kind for p in built] == ["latency", "throughput", "gpu"]
        for plot in built:
            axes = plot.figure.axes
            assert axes, plot.kind
            for ax in axes:
                lines = [line for line in ax.get_lines() if not line.get_label().startswith("_")]
                boxes = ax.patches
                assert len(lines) <= plots.MAX_SERIES and len(boxes) <= plots.MAX_SERIES, (plot.kind, ax.get_title())
                if ax.get_legend() is not None:
                    assert len(ax.get_legend().get_texts()) <= plots.MAX_SERIES
        latency, throughput, gpu = (p.figure for p in built)
        # 20 cells in groups of at most 8, an engine's 5 precisions kept together: 4 rows per batch, 3 paths
        assert len(latency.axes) == 3 * 4 * 3 and sum(len(ax.patches) for ax in latency.axes) == len(records)
        assert len(throughput.axes) == 4 * 3
        # one case per cell (its largest batch on the model path), one column per engine
        assert len(gpu.axes) == 2 * 4 and all(len(ax.get_lines()) == 5 for ax in gpu.axes)
        assert {line.get_label() for line in gpu.axes[0].get_lines()} == {f"{p} bs256 model" for p in
                                                                          ("fp32", "tf32", "fp16", "bf16", "int8")}
    finally:
        for plot in built:
            plots.plt.close(plot.figure)


def test_series_groups_keep_an_engines_precisions_together() -> None:
    from report.plots import series_groups

    cells = [(e, p) for e in ("torch", "onnxruntime", "tensorrt") for p in ("fp32", "fp16", "bf16", "int8")]
    assert [len(g) for g in series_groups(cells)] == [8, 4]
    assert series_groups(cells)[0][-1] == ("onnxruntime", "int8")
    assert [len(g) for g in series_groups([("torch", f"p{i}") for i in range(11)])] == [8, 3]


# =========================================================================== a real run


#: The one CI variable the report's run sees; it must be the environment block's only row.
REPORT_CI_VARIABLES = {"CI": "selftest"}


@pytest.fixture(scope="module")
def report(suite_baseline: Path) -> Path:
    """A real run of the tiny config against both saved baselines, with the HTML report."""
    path = suite_baseline / "report.html"
    done = run_suite(suite_baseline, "--latency-baseline", "latest", "--accuracy-baseline",
                     str(suite_baseline / "base.json"), "--html", str(path), "--self-contained-html",
                     env=ci_environment(**REPORT_CI_VARIABLES))
    assert path.exists(), explain(done)
    return path


def _pytest_html_data(html: str) -> dict[str, Any]:
    blob = _one(r'data-jsonblob="[^"]*"', html)
    return json.loads(htmllib.unescape(blob.partition('"')[2][:-1]))


def test_report_file_is_self_contained_verdict_first_with_tables_and_captioned_figures(report: Path) -> None:
    html = report.read_text()
    assert html.index('id="suite-verdict"') < html.index('id="suite-run"') < html.index('class="suite practitioners"')
    assert html.index('id="suite-verdict"') < html.index('id="results-table"')
    assert html.count('class="suite practitioners"') == 4  # tiny and steady, batches 1 and 4
    assert 'data-cell="tiny-onnxruntime-fp32"' in html and 'data-cell="tiny-torch-fp32"' in html
    assert html.count("data:image/png;base64,") >= 4
    assert html.count("<figcaption>") == html.count('<img class="plot"') >= 4
    assert "Changed since baseline" in html and html.count('class="suite environment"') == 1
    assert not re.search(r'<(img|script|link)[^>]+(src|href)="(https?:|file:|/)', html), "external resource"
    # pytest-html's environment block: the CI variables only, none of pytest-metadata's own keys; the suite's
    # fingerprint is the environment table
    assert _pytest_html_data(html)["environment"] == REPORT_CI_VARIABLES


CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


CHROMIUM_STARTS = 3


def _chromium(tmp_path: Path, check: Callable[[subprocess.CompletedProcess[str]], str | None],
              *args: str) -> subprocess.CompletedProcess[str]:
    """Headless Chromium with flags for a container (no sandbox, no GPU, /tmp instead of a small /dev/shm),
    its own profile, HOME and XDG folders, and no stdin, so nothing of the calling machine's state reaches it.

    `check` says what is wrong with a finished start (None: nothing). A start that crashes, hangs or renders
    short gets a fresh profile and another try, up to CHROMIUM_STARTS, each failed one named in a warning;
    when none succeeds the test fails with every start's exit code and stderr. The report under test is a
    file, so one good render judges it fully; a report that does not render fails every start."""
    assert CHROMIUM
    failures: list[str] = []
    # TMPDIR short: Chromium's singleton socket lives there, and a Unix socket's path has at most 107 characters;
    # pytest's numbered base directory grows (.../pytest-3762/test_report_renders_in_headles0/org.chromium.Chromium
    # .XXXXXX/SingletonSocket was too long: "Socket path too long", exit -6 on every start).
    short_tmp = tempfile.mkdtemp(prefix="cr", dir="/tmp")
    for start in range(1, CHROMIUM_STARTS + 1):
        home = tmp_path / f"chromium-{start}"
        env = {**os.environ, "HOME": str(home), "XDG_CONFIG_HOME": str(home / "config"),
               "XDG_CACHE_HOME": str(home / "cache"), "TMPDIR": short_tmp}
        cmd = [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
               "--disable-quic", "--no-first-run", "--disable-background-networking", "--disable-component-update",
               "--disable-sync", "--disable-extensions", "--disable-crash-reporter",
               f"--user-data-dir={home / 'profile'}", *args]
        try:
            done = subprocess.run(cmd, capture_output=True, text=True, timeout=180, env=env,
                                  stdin=subprocess.DEVNULL)
        except subprocess.TimeoutExpired as hung:
            stderr = hung.stderr.decode(errors="replace") if isinstance(hung.stderr, bytes) else (hung.stderr or "")
            failures.append(f"start {start}: no exit in 180 s; stderr ends: {stderr[-800:]!r}")
            continue
        problem = check(done)
        if problem is None:
            shutil.rmtree(short_tmp, ignore_errors=True)
            if failures:
                warnings.warn("chromium needed another start:\n" + "\n".join(failures), stacklevel=2)
            return done
        failures.append(f"start {start}: {problem}; exit {done.returncode}; stdout {len(done.stdout)} chars; "
                        f"stderr ends: {done.stderr[-800:]!r}")
    shutil.rmtree(short_tmp, ignore_errors=True)
    pytest.fail(f"{CHROMIUM} failed {CHROMIUM_STARTS} starts with {' '.join(args)}:\n" + "\n".join(failures))


def _rendered_rows(done: subprocess.CompletedProcess[str]) -> str | None:
    """pytest-html builds its results table with JavaScript: rows in the dumped DOM mean its scripts ran."""
    if done.returncode != 0:
        return "non-zero exit"
    rows = done.stdout.count('class="results-table-row')
    return None if rows >= 5 else f"{rows} results-table rows in the DOM (5 or more expected)"


@pytest.mark.skipif(CHROMIUM is None, reason=verdict.skip_message(
    "unavailable", "chromium is not installed (apt-get install chromium; .ci/run does)"))
def test_report_renders_in_headless_chromium(report: Path, tmp_path: Path) -> None:
    dom = _chromium(tmp_path, _rendered_rows, "--virtual-time-budget=5000", "--dump-dom", report.as_uri()).stdout
    assert dom.index('id="suite-verdict"') < dom.index('class="suite practitioners"') < dom.index('id="results-table"')
    assert 'class="suite practitioners"' in dom and 'class="suite ranks"' in dom and 'class="suite parity"' in dom
    for column in PRACTITIONER_COLUMNS:
        assert re.search(rf">{re.escape(column)}</th>", dom), column
    assert dom.count('src="data:image/png;base64,') >= 4 and dom.count("<figcaption>") >= 4
    # pytest-html's environment table has the CI variables' rows and nothing of pytest-metadata's own
    environment = _one(r'<table id="environment">.*?</table>', dom)
    rows = re.findall(r"<tr>\s*<td>(.*?)</td>\s*<td><div>(.*?)</div></td>\s*</tr>", environment, flags=re.S)
    assert dict(rows) == REPORT_CI_VARIABLES, environment
    assert dom.count('class="suite environment"') == 1
    # ... moved under the run and retitled: one table titled Environment, the suite's fingerprint
    run = dom[dom.index('id="suite-run"'):dom.index('class="suite practitioners"')]
    assert f"<h2>{RUN_METADATA_TITLE}</h2>" in run and '<table id="environment">' in run
    assert len(re.findall(r">\s*Environment\s*</h2>", dom)) == 1 and 'id="suite-environment">Environment</h2>' in dom
    shot = tmp_path / "report.png"

    def screenshot_taken(done: subprocess.CompletedProcess[str]) -> str | None:
        if done.returncode != 0 or not shot.exists():
            return "no screenshot"
        data = shot.read_bytes()
        if data[:8] != b"\x89PNG\r\n\x1a\n" or len(data) <= 50_000:
            return f"a screenshot of {len(data)} bytes, PNG header {data[:8]!r} (a PNG over 50 kB expected)"
        return None

    _chromium(tmp_path, screenshot_taken, "--window-size=1400,3000", "--virtual-time-budget=5000",
              f"--screenshot={shot}", report.as_uri())


def test_engine_census_and_rebuild_checks_appear_in_the_model_section() -> None:
    """Engine facts' precision census is a column (red where the engine computes almost nothing in the cell's
    precision), and --rebuild-check records are a table of their own."""
    records = [{"kind": "rebuild", "model": "m", "engine": "onnxruntime", "precision": "fp16",
                "cell": "m-onnxruntime-fp16", "builds": 2, "identical_artifacts": False, "identical_outputs": False,
                "max_abs_difference": 0.004, "per_build": [{"size_mb": 1.2, "layers": 11},
                                                            {"size_mb": 1.3, "layers": 12}]}]
    engines = {"m-onnxruntime-fp16": {"size_mb": 1.2, "layers": 11, "precision_census": {
        "counts": {"fp32": 4}, "ok": False, "text": "named fp16 but computes nothing in fp16: 0 of 4"}}}
    html = render_report(records, engines, {"device": "cpu"}, {}, None, None, with_plots=False)
    assert ">computes in</th>" in html and 'class="census-off"' in html and ">fp32 4<" in html
    table = re.search(r'<table class="suite rebuild".*?</table>', html, flags=re.S)
    assert table and "differ (largest 0.00400)" in table.group(0) and "1.300 MB, 12 layers" in table.group(0)


# =========================================================================== the audit's defects


def _timeline(memory: list[float], util: list[float] | None = None) -> dict[str, Any]:
    n = len(memory)
    util = util or [80.0] * n
    return {"source": "NVML", "interval_s": 0.02, "samples": n, "peak_memory_mib": max(memory),
            "mean_sm_util_pct": sum(util) / n, "timeline": {"t_s": [0.02 * i for i in range(n)],
                                                            "memory_mib": memory, "sm_util_pct": util}}


def test_gpu_timeline_keeps_every_engines_memory_in_view() -> None:
    """The rows share y: limits set in the column loop froze the first column's (torch, 11-16 GiB) and later
    engines' lines (onnxruntime 28.8-37.8 GiB, inductor 40.2 GiB on the H100) drew off the axes."""
    from report import plots

    records = []
    for engine, precision, memory in (("torch", "fp32", [11_002.0, 15_712.0, 15_712.0]),
                                      ("onnxruntime", "fp32", [28_812.0, 28_812.0, 28_812.0]),
                                      ("onnxruntime", "fp16", [35_736.0, 37_784.0, 37_784.0]),
                                      ("inductor", "fp32", [40_228.0])):  # one NVML sample: a short case
        records.append(_latency("big", engine, precision, 256, "model", gpu=False))
        records[-1]["gpu"] = _timeline(memory)
    plot = plots.gpu_timeline_plot(records, "big")
    assert plot is not None
    try:
        drawn = 0
        for ax in plot.figure.axes:
            low, high = ax.get_ylim()
            for line in ax.get_lines():
                ys = [y for y in line.get_ydata() if y == y]
                assert ys and low <= min(ys) and max(ys) <= high, (ax.get_title(), line.get_label(), ys, (low, high))
                assert len(ys) > 1 or line.get_marker() not in (None, "None", ""), "a lone sample must be visible"
                drawn += 1
        assert drawn == 2 * len(records)
    finally:
        plots.plt.close(plot.figure)


def test_intervals_print_capped_as_the_terminal_does() -> None:
    """A `last:K` baseline of 2 runs gives intervals like [0.162, 300580.185] or [0.000, inf]: the report prints
    them as the terminal does (metrics.regression.format_ratio), bounds beyond 100x as '>100x'."""
    gate = _gate()
    gate["latency"][0].update(ci_low=0.162, ci_high=6.9e99)
    gate["latency"].append({"label": "net-torch-fp32-bs1-all", "status": "regression", "baseline_median_ms": 1.0,
                            "current_median_ms": 1.5, "change_pct": 50.0, "ci_low": 0.0, "ci_high": float("inf"),
                            "interference": 0.0, "baseline_interference": 0.0})
    html = _render(gate=gate)
    regressions = _one(r'<table class="suite verdict-regressions".*?</table>', html)
    assert "<td>[0.162, &gt;100x]</td>" in regressions and "<td>[&lt;0.01x, &gt;100x]</td>" in regressions
    changes = _one(r'<table class="suite latency-changes".*?</table>', html)
    assert "[0.162, &gt;100x]" in changes and "[&lt;0.01x, &gt;100x]" in changes
    assert "inf" not in regressions + changes and "e+99" not in html and "6900000" not in html


def test_gate_warnings_and_both_sides_of_the_busy_figure_are_shown() -> None:
    """gate["warnings"] (last:5 that found 2 runs; cases saved busy) reach the verdict; the changes table shows
    others' CPU now / baseline and which side was busy, as the terminal does ('68% / 90%', 'busy (baseline)')."""
    last5 = ("--latency-baseline last:5: asked for 5 saved runs, found 2: the run-to-run interval rests on 2 runs "
             "(t factor 63.7 at 99%, against 4.6 with 5), so many cases come out inconclusive")
    saved_busy = ("2 case(s) were saved to the baseline while other processes used more than 20% of the CPUs "
                  "(net-torch-fp32-bs1-all, net-torch-fp32-bs8-all): save the baseline again on a quiet machine")
    coverage = {"latency": {**COVERAGE["latency"], "saved_busy": 2}}
    gate = _gate(warnings=[last5, saved_busy], coverage=coverage, busy_limit=0.2)
    gate["latency"].append({"label": "net-torch-fp32-bs1-all", "status": "busy", "baseline_median_ms": 1.0,
                            "current_median_ms": 1.01, "change_pct": 1.0, "ci_low": 0.9, "ci_high": 1.2,
                            "interference": 0.68, "baseline_interference": 0.9, "busy_side": "baseline"})
    html = _render(gate=gate)
    verdict = _one(r'<section id="suite-verdict".*?</section>', html)
    warnings_box = _one(r'<div class="gate-warnings">.*?</div>', verdict)
    assert "Gate warnings (2)" in warnings_box
    assert htmllib.escape(last5) in warnings_box and htmllib.escape(saved_busy) in warnings_box
    assert "2 of the baseline's cases were saved busy" in _one(r'<ul class="coverage">.*?</ul>', html)
    changes = _one(r'<table class="suite latency-changes".*?</table>', html)
    assert "others' CPU now / baseline</th>" in changes
    busy = _one(r'<tr class="busy"><td class="name">net-torch-fp32-bs1-all</td>.*?</tr>', changes)
    assert "<td>68% / 90%</td>" in busy and '<td class="name">busy (baseline)</td>' in busy
    regression = _one(r'<tr class="regression"><td class="name">net-onnxruntime-int8-bs8-all</td>.*?</tr>', changes)
    assert "<td>1% / 0%</td>" in regression
    # without warnings, no box
    assert 'class="gate-warnings"' not in _render()


def test_a_run_stopped_by_a_usage_error_shows_the_error_and_never_advises_accepting_interrupted() -> None:
    from suite.verdict import Ledger

    ledger = Ledger(accepted=("no-data",))
    ledger.mark_interrupted("stopped by a usage error", ["tests/accuracy/test_accuracy.py::test_top1_top5[mynet]"])
    stopped = ledger.as_dict()
    html = _render(verdict=stopped, records=[], engines={}, gate={})
    verdict = _one(r'<section id="suite-verdict".*?</section>', html)
    assert "--accept-not-judged interrupted" not in verdict and "accept it with" not in verdict
    assert 'class="run-error"' in verdict and "The run was stopped by a usage error" in verdict
    assert "ERROR:" in verdict  # where the message is, when the verdict does not carry it
    # the plugin may add the message (verdict["error"]): shown verbatim
    message = ("[models.mynet].inputs: the smoke forward on a synthetic batch of 1 failed: RuntimeError: mat1 and "
               "mat2 shapes cannot be multiplied (1x10 and 16x4); declared inputs: x float32 [10] in [0, 1]")
    verdict = _one(r'<section id="suite-verdict".*?</section>',
                   _render(verdict={**stopped, "error": message}, records=[], engines={}, gate={}))
    assert f'<pre class="error">{htmllib.escape(message)}</pre>' in verdict
    assert "--accept-not-judged interrupted" not in verdict
    internal = {**stopped, "interrupted": "stopped by an internal error", "stopped_by": "INTERNALERROR> KeyError: 'x'"}
    verdict = _one(r'<section id="suite-verdict".*?</section>', _render(verdict=internal, gate={}))
    assert "INTERNALERROR&gt; KeyError: &#x27;x&#x27;" in verdict and "--accept-not-judged interrupted" not in verdict
    # a run interrupted by a signal keeps its advice: the reason may be accepted by name
    ledger = Ledger()
    ledger.mark_interrupted("SIGTERM", ["t::a"])
    verdict = _one(r'<section id="suite-verdict".*?</section>', _render(verdict=ledger.as_dict(), gate={}))
    assert "--accept-not-judged interrupted" in verdict and 'class="run-error"' not in verdict


def test_harness_overhead_not_measured_is_one_line_saying_why() -> None:
    records = [r for r in _records() if r["kind"] != "harness_overhead"]
    html = _render(records=records)  # the hand-made environment is a CUDA run
    line = _one(r'<p class="note overhead-missing" data-model="net">.*?</p>', html)
    assert "not measured in this run" in line and "tests/latency/test_harness_overhead.py was not selected" in line
    assert html.index('class="suite practitioners"') < html.index("overhead-missing") < html.index('id="changes"')
    cpu = _one(r'<p class="note overhead-missing".*?</p>', _render(records=records, environment={"device": "cpu"}))
    assert "runs on CUDA only" in cpu
    unknown = _one(r'<p class="note overhead-missing".*?</p>', _render(records=records, environment={}))
    assert "was not selected / runs on CUDA only" in unknown
    other = [dict(r, model="other") if r["kind"] == "harness_overhead" else r for r in _records()]
    assert "measured for other only (--overhead-model" in _render(records=other)
    # measured: the table, no line; no latency at all: neither
    assert "overhead-missing" not in _render()
    assert "overhead-missing" not in _render(records=[r for r in records if r["kind"] != "latency"])


def test_gpu_memory_column_shows_what_the_case_added_over_a_device_wide_start() -> None:
    """NVML's peak is device-wide and grows in run order (engines loaded earlier stay loaded): ORT fp16 at batch 1
    showed 29 GB. The table shows what the case added over its first sample, with that start figure below; a mean
    utilization from fewer than 10 samples (20 ms apart) is '-'."""
    records = [r for r in _records() if r.get("path", "all") == "all"]
    for r in records:
        r["gpu"] = {}
    late = next(r for r in records if r["kind"] == "latency" and r["engine"] == "onnxruntime"
                and r["precision"] == "int8" and r["batch_size"] == 8)
    late["gpu"] = _timeline([29_004.4, 29_396.4, 29_396.4])  # 3 samples: utilization not shown
    early = next(r for r in records if r["kind"] == "latency" and r["engine"] == "torch" and r["batch_size"] == 8)
    early["gpu"] = _timeline([11_002.4] + [15_712.4] * 29, [50.0] * 30)
    table = re.findall(r'<table class="suite practitioners".*?</table>', _render(records=records, gate={}),
                       flags=re.S)[1]
    for column in GPU_COLUMNS:
        assert f">{column}</th>" in table
    assert "peak GPU memory" not in table
    int8 = _one(r'<tr class="" data-cell="net-onnxruntime-int8".*?</tr>', table)
    assert '+392<span class="unit">29,004 in use at start</span></td>' in int8
    assert '-<span class="unit">3 samples</span></td>' in int8
    torch = _one(r'<tr class="" data-cell="net-torch-fp32".*?</tr>', table)
    assert '+4,710<span class="unit">11,002 in use at start</span></td>' in torch and "<td>50.00</td>" in torch
    ort = _one(r'<tr class="" data-cell="net-onnxruntime-fp32".*?</tr>', table)
    assert ort.count("<td>-</td>") >= 2  # no NVML figures for this case
    caption = _one(r"<caption>.*?</caption>", table)
    assert "includes every engine loaded earlier in this process" in caption and "fewer than 10 NVML samples" in caption


def _minilm_records() -> list[dict[str, Any]]:
    """Sequence-length shapes, as minilm_l6's latency_shapes: two at batch 8 (seq 128 and 256) and batches 1 and
    32 at seq 128, on the 'all' and 'model' paths; records carry `shape` and `dims` beside batch_size."""
    records = []
    for engine, precision in (("torch", "fp32"), ("onnxruntime", "fp16")):
        for batch, seq in ((1, 128), (8, 128), (8, 256), (32, 128)):
            for path in ("all", "model"):
                scale = seq / 128 * (0.5 if path == "model" else 1.0)
                records.append(_latency("minilm", engine, precision, batch, path, scale=scale, gpu=False,
                                        shape=f"bs{batch}-seq{seq}", dims={"seq": seq}))
    return records


def test_sequence_length_shapes_are_the_unit_of_tables_figures_and_baseline_lookup() -> None:
    """Tables filtered on batch only (seq 128 and 256 at batch 8 in one table), figures indexed by batch only (one
    shape overwrote the other) and the baseline looked up '...-bs8-all', which never matches the gate's
    '...-bs8-seq256-all' (suite/gate/baselines.py key_label)."""
    from report import plots

    records = _minilm_records()
    gate = {"latency_baseline": "b.json", "max_slowdown": 0.05, "confidence": 0.99, "latency": [
        {"label": "minilm-onnxruntime-fp16-bs8-seq256-all", "status": "regression", "baseline_median_ms": 16.0,
         "current_median_ms": 16.8, "change_pct": 5.0, "ci_low": 1.03, "ci_high": 1.07},
        {"label": "minilm-torch-fp32-bs8-seq128-model", "status": "unchanged", "baseline_median_ms": 4.2,
         "current_median_ms": 4.2, "change_pct": 0.0, "ci_low": 0.99, "ci_high": 1.01}]}
    html = _render(records=records, engines={}, gate=gate)
    tables = re.findall(r'<table class="suite practitioners".*?</table>', html, flags=re.S)
    assert [re.search(r'data-shape="([^"]+)"', t).group(1) for t in tables] == [  # type: ignore[union-attr]
        "bs1-seq128", "bs8-seq128", "bs8-seq256", "bs32-seq128"]
    seq256 = tables[2]
    assert "minilm, batch 8 x seq 256" in _one(r"<caption>.*?</caption>", seq256)
    assert len(re.findall(r"data-path=", seq256)) == 4  # 2 cells x 2 paths, no seq-128 row
    ort = _one(r'<tr class="regression" data-cell="minilm-onnxruntime-fp16" data-path="all">.*?</tr>', seq256)
    assert "<td>16.00</td>" in ort and '<td class="name">+5.00% regression</td>' in ort
    torch = _one(r'<tr class="unchanged" data-cell="minilm-torch-fp32" data-path="model">.*?</tr>', tables[1])
    assert "<td>4.200</td>" in torch and "+0.00% unchanged" in torch
    assert "regression" not in tables[1] and "unchanged" not in seq256
    built = plots.model_plots(records, "minilm")
    try:
        latency, throughput = built
        titles = [ax.get_title() for ax in latency.figure.axes]
        assert "batch 8 x seq 128, latency-all" in titles and "batch 8 x seq 256, latency-all" in titles
        assert sum(len(ax.patches) for ax in latency.figure.axes) == len(records)  # no shape drawn over another
        assert "one row of panels per shape (batch and seq)" in latency.caption
        # a line joins shapes that differ only in batch: seq 128 (1, 8, 32); bs8 x seq256 alone is said, not drawn
        assert [ax.get_title() for ax in throughput.figure.axes] == ["latency-all, seq 128", "latency-model, seq 128"]
        for ax in throughput.figure.axes:
            assert all(list(line.get_xdata()) == [1, 8, 32] for line in ax.get_lines())
        assert "Not drawn (the only batch timed at its other axes): bs8 x seq256" in throughput.caption
    finally:
        for plot in built:
            plots.plt.close(plot.figure)
    # the GPU timeline takes each cell's largest shape and says which
    for r in records:
        r["gpu"] = _timeline([100.0, 120.0, 120.0])
    timeline = plots.gpu_timeline_plot(records, "minilm")
    assert timeline is not None
    try:
        labels = {line.get_label() for ax in timeline.figure.axes for line in ax.get_lines()}
        assert labels == {"fp32 bs32 x seq128 model", "fp16 bs32 x seq128 model"}
    finally:
        plots.plt.close(timeline.figure)


TENSORRT_MISSING = ("tensorrt is not installed (its wheels live only on NVIDIA's package index: pip install "
                    "--extra-index-url https://pypi.nvidia.com tensorrt); import failed: No module named 'tensorrt'")


def test_first_screen_failed_and_unaccepted_open_accepted_folded_and_grouped_with_what_was_not_tested() -> None:
    """The H100 report opened on a screen of 28 identical accepted 'tensorrt is not installed' lines. Accepted
    reasons are folded with identical messages grouped; failed and not-accepted checks stay open, first; one line
    names what was not tested at all; one line says the counts are the suite's, not pytest-html's."""
    verdict = _verdict()
    unavailable = [_check(f"tests/parity/test_parity.py::test_parity_on_generated_inputs[net-tensorrt-fp32-{d}]",
                          "not judged", "unavailable", TENSORRT_MISSING) for d in range(26)]
    unavailable += [_check(f"tests/latency/test_latency.py::test_latency[net-tensorrt-fp32-bs{b}]", "not judged",
                           "unavailable", TENSORRT_MISSING) for b in (1, 8)]
    verdict["not_judged"]["unsupported"].append(_check(
        "tests/latency/test_latency.py::test_latency[net-torch-fp32-bs8-graph]", "not judged", "unsupported",
        "not judged (unsupported): latency-graph needs CUDA graphs (this run uses --device cpu)"))
    verdict["not_judged"] = {"unavailable": unavailable, **verdict["not_judged"]}  # accepted, listed first
    verdict["accepted"] = ["unsupported", "unavailable"]
    verdict["reasons"]["unavailable"] = "a library, execution provider or device the check needs is missing"
    verdict["counts"]["not_judged"]["unavailable"] = 28
    section = _one(r'<section id="suite-verdict".*?</section>', _render(verdict=verdict))
    trt = _one(r'<div class="not-judged-reason" data-reason="unavailable".*?</div>', section)
    assert '<details class="accepted-reason"><summary><b>unavailable: 28 checks; ' in trt  # folded: no 'open'
    assert "28 &times; tensorrt is not installed (its wheels" in _one(r"<summary>.*?</summary>", trt)
    assert f"<li>28 &times; {htmllib.escape(TENSORRT_MISSING)}</li>" in trt and trt.count('class="check"') == 28
    unsupported = _one(r'<div class="not-judged-reason" data-reason="unsupported".*?</div>', section)
    assert "<li>2 &times; torch has no int8 path</li>" in unsupported and "<details" in unsupported
    busy = _one(r'<div class="not-judged-reason" data-reason="busy".*?</div>', section)
    assert "<details" not in busy and "<h4>busy: 1 check;" in busy  # not accepted: open
    # failed first, then the reasons that decide the verdict, then the accepted ones
    assert (section.index("Failed checks (1)") < section.index('data-reason="busy"')
            < section.index('data-reason="unavailable"') < section.index('data-reason="unsupported"'))
    # what was not tested at all, by the verdict
    line = _one(r'<p class="not-tested">.*?</p>', section)
    assert ("<b>Not tested in this run:</b> <b>tensorrt</b> (unavailable: tensorrt is not installed); "
            "<b>torch int8</b> (unsupported: torch has no int8 path); <b>torch latency-graph</b> (unsupported: "
            "latency-graph needs CUDA graphs).") in line
    assert "onnxruntime" not in line  # its cells ran (records), even with a busy case
    assert section.index('class="counts"') < section.index('class="not-tested"') < section.index("Failed checks")
    note = _one(r'<p class="note counts-note">.*?</p>', section)
    assert "shows each check as counted here" in note and "is a &quot;Not judged&quot; row" in note


def test_pytest_html_environment_block_is_run_metadata_and_versions_read_as_versions() -> None:
    """pytest-html's 'Environment' block (--metadata, CI variables) reappeared above the verdict as a second
    environment table: it is retitled and moved under the run. Both onnxruntime and onnxruntime-gpu installed is
    flagged unless the fingerprint names the imported one; cuDNN's integer reads as a version."""
    html = _render()
    run = html[html.index('id="suite-run"'):html.index('id="model-net"')]
    assert '<div id="suite-run-metadata"></div>' in run and f'title.textContent = "{RUN_METADATA_TITLE}"' in run
    assert f'h2::after {{ content: "{RUN_METADATA_TITLE}"' in html  # without scripts: retitled in place
    assert "9.12.0 (91200)" in run and "9.12.0 (91200)" in _one(r'<table class="suite environment".*?</table>', html)
    both = {**_environment(), "onnxruntime": "1.30.0", "cudnn": 91900}
    row = _one(r'<tr class="flag" data-key="onnxruntime">.*?</tr>', _render(environment=both))
    assert "1.30.0 (onnxruntime) / 1.31.1 (onnxruntime-gpu)" in row and "both distributions are installed" in row
    assert "9.19.0 (91900)" in _render(environment=both)
    row = _one(r'<tr class="[^"]*" data-key="onnxruntime">.*?</tr>',
               _render(environment={**both, "onnxruntime_imported": "1.31.1"}))
    assert "1.31.1 (imported; installed: onnxruntime 1.30.0, onnxruntime-gpu 1.31.1)" in row and "flag" not in row
    from report.format import cudnn_text

    assert (cudnn_text(8902), cudnn_text("90100"), cudnn_text(None)) == ("8.9.2 (8902)", "9.1.0 (90100)", "-")


def _overlaps(a: Any, b: Any) -> bool:
    return a.x0 < b.x1 and b.x0 < a.x1 and a.y0 < b.y1 and b.y0 < a.y1


def test_figures_read_cleanly_ticks_apart_log_ticks_near_the_boxes_measured_batches_legends_off_the_data() -> None:
    """The audit's CPU figures: 'onnxruntime' tick labels ran together, boxes at 0.19 ms sat on a log axis whose
    first label was 1, the throughput axis labelled every power of 2 and legends covered lines."""
    from report import plots

    records = []
    for engine, precision, scale in (("torch", "fp32", 100.0), ("torch", "fp16", 300.0), ("onnxruntime", "fp32", 0.19),
                                     ("onnxruntime", "fp16", 0.3), ("onnxruntime", "int8", 0.18)):
        for batch in (1, 32):
            records.append(_latency("cnn", engine, precision, batch, "all", scale=scale / batch))
    built = plots.model_plots(records, "cnn")
    try:
        latency, throughput, gpu = built
        for plot in built:
            plot.figure.canvas.draw()
            renderer = plot.figure.canvas.get_renderer()
            legends = [ax.get_legend() for ax in plot.figure.axes if ax.get_legend() is not None]
            for legend in legends:  # beside or under the panels, never over one
                box = legend.get_window_extent(renderer)
                assert not any(_overlaps(box, ax.get_window_extent(renderer)) for ax in plot.figure.axes), plot.kind
        assert len([ax for ax in throughput.figure.axes if ax.get_legend()]) == 1
        for ax in latency.figure.axes:
            renderer = latency.figure.canvas.get_renderer()
            texts = [t for t in ax.get_xticklabels() if t.get_text()]
            assert len(texts) == 5
            rotation = math.radians(texts[0].get_rotation())
            if rotation:  # slanted lines of text: apart when the anchors' spacing across them exceeds a line
                xs = sorted(float(ax.transData.transform((x, 0))[0]) for x in ax.get_xticks())
                spacing = min(b - a for a, b in zip(xs, xs[1:], strict=False))
                line_height = texts[0].get_fontsize() * latency.figure.dpi / 72
                assert spacing * math.sin(rotation) > 1.2 * line_height, ax.get_title()
            else:
                boxes = [t.get_window_extent(renderer) for t in texts]
                assert not any(_overlaps(a, b) for i, a in enumerate(boxes) for b in boxes[i + 1:]), ax.get_title()
            assert ax.get_yscale() == "log"
            low, high = ax.get_ylim()
            ticks = [t for t, label in zip(ax.get_yticks(), ax.get_yticklabels(), strict=True)
                     if label.get_text() and low <= t <= high]
            assert len(ticks) >= 3, (ax.get_title(), ticks)
            for line in ax.get_lines():
                if line.get_label() == "_nolegend_" or len(line.get_ydata()) != 2 or line.get_color() != "black":
                    continue  # medians only: black two-point lines
                median = float(line.get_ydata()[0])
                assert any(median / 2.5 <= t <= median * 2.5 for t in ticks), (ax.get_title(), median, ticks)
        for ax in throughput.figure.axes:
            assert [t.get_text() for t in ax.get_xticklabels()] == ["1", "32"]
    finally:
        for plot in built:
            plots.plt.close(plot.figure)


def test_tables_say_model_wide_notes_once_and_leave_out_columns_that_say_nothing() -> None:
    """The paths-and-clocks paragraph repeated above every batch table: later tables fold it. A model without
    labelled data gets no top-1/top-5 columns, and a bound that is the same for every case is said once, in the
    caption, instead of a column of one word."""
    tables = re.findall(r'<table class="suite practitioners".*?</table>', _render(), flags=re.S)
    assert "<details" not in tables[0] and '<details class="notes"><summary>latency paths, clocks and column notes: ' \
        "as in the first table</summary>" in tables[1]
    assert "min-width: 40em" in _render()  # captions are not squeezed to a narrow table's width
    parity = re.findall(r'<table class="suite parity".*?</table>', _render(), flags=re.S)
    assert "isclose: % of output elements" in parity[0] and "Columns as in the first parity table above" in parity[1]
    records = [r for r in _records() if r["kind"] != "accuracy"]
    for r in records:
        if r["kind"] == "latency":
            r["bound"] = "host"
    html = _render(records=records, gate={})
    table = re.findall(r'<table class="suite practitioners".*?</table>', html, flags=re.S)[0]
    head = re.findall(r">([^<>]+)</th>", table)
    assert "top-1 (%)" not in head and "top-5 (%)" not in head and "bound" not in head
    assert "isclose (%)" in head and "path" in head
    caption = _one(r"<caption>.*?</caption>", table)
    assert "no top-1/top-5 columns: no accuracy record for this model" in caption
    assert "bound: host for every case of this model" in caption
    row = _one(r'<tr class="" data-cell="net-onnxruntime-int8".*?</tr>', table)
    assert row.endswith("<td>99.50</td><td>1e-06</td></tr>")  # isclose and MAE right after the GPU columns


def test_localization_notes_carry_the_census_and_both_bisect_conclusions() -> None:
    """The report's localization table is preceded by the precision census and the bisect's two conclusions: the
    optimization level and the execution provider's settings (engines/onnxrt/bisect.py)."""
    from report.parity_tables import localization_table

    record = {"cell": "m-onnxruntime-fp32", "name": "logits", "dataset": "generated:uniform", "localization": {
        "worst": [{"index": 0, "name": "logits", "op_type": "Gemm", "max_abs_error": 0.01, "cosine": 1.0,
                   "isclose_pct": 71.88}],
        "first_divergent": None,
        "census_verdict": {"ok": True, "text": "3 of 3 conv/gemm/matmul nodes compute in fp32"},
        "bisect": {"conclusion": "passes at every optimization level with this feed: no level breaks it",
                   "providers": ["CUDAExecutionProvider", "CPUExecutionProvider"], "cell_level": "ORT_ENABLE_ALL",
                   "settings_conclusion": "use_tf32=1 breaks it"}}}
    html = localization_table(record)
    assert '<p class="note">3 of 3 conv/gemm/matmul nodes compute in fp32</p>' in html
    assert "optimization bisect: passes at every optimization level with this feed: no level breaks it" in html
    assert "CUDAExecutionProvider settings at ORT_ENABLE_ALL, one at a time: use_tf32=1 breaks it" in html
    assert html.index("use_tf32=1 breaks it") < html.index('<table class="suite localization"')
    assert "error rises most" not in html  # a record of before the rise (no "born")
    born = {"index": 3, "name": "relu_6", "op_type": "Relu", "rel_error": 0.000727, "rise": 727.0}
    html = localization_table({**record, "localization": {**record["localization"], "born": [born]}})
    assert "error rises most at: relu_6 (Relu): relative error " in html and "x its inputs&#x27;" in html
    failing = {**record["localization"], "born": [born], "first_divergent": {"index": 0, "name": "logits"}}
    assert "error rises most" not in localization_table({**record, "localization": failing})

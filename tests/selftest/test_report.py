"""The HTML report: its tables and plots from hand-made records, and a real run's self-contained file
opened in headless Chromium (the DOM after pytest-html's scripts ran, and a screenshot)."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

from report.html import PRACTITIONER_COLUMNS, render_report
from tests.selftest.suite_runs import explain, run_suite

pytestmark = pytest.mark.selftest

CELLS = [("torch", "fp32"), ("onnxruntime", "fp32"), ("onnxruntime", "int8")]


def _records() -> list[dict[str, object]]:
    records: list[dict[str, object]] = []
    for engine, precision in CELLS:
        base = {"model": "net", "engine": engine, "precision": precision, "cell": f"net-{engine}-{precision}"}
        for batch in (1, 8):
            samples = [0.001 * batch * (1 + 0.01 * i) for i in range(20)]
            records.append({**base, "kind": "latency", "batch_size": batch, "path": "all", "samples_s": samples,
                            "mean_ms": 1.1 * batch, "max_ms": 1.5 * batch, "throughput_per_s": 900.0 * batch,
                            "gpu": {"timeline": {"t_s": [0, 0.1, 0.2], "memory_mib": [100, 120, 120],
                                                 "sm_util_pct": [0, 80, 90]}}})
        records.append({**base, "kind": "accuracy", "dataset": "d", "top1": 0.95, "top5": 0.99, "n": 100})
        if (engine, precision) != ("torch", "fp32"):
            records.append({**base, "kind": "parity", "dataset": "d", "name": "logits", "isclose_pct": 99.5,
                            "mae": 1e-6, "ranks": [{"rank": r, "mae": 1e-6 * r, "disagreement_pct": 0.5 * r}
                                                   for r in range(1, 11)]})
    return records


GATE = {"latency_baseline": "b.json", "accuracy_baseline": None, "max_slowdown": 0.05, "confidence": 0.99,
        "environment_differences": {"latency": {"source": "b.json", "keys": {"gpu_name": ["A100", "H100"]}}},
        "latency": [{"label": "net-onnxruntime-int8-bs8-all", "status": "regression", "baseline_median_ms": 8.0,
                     "current_median_ms": 9.0, "change_pct": 12.5, "ci_low": 1.1, "ci_high": 1.15,
                     "interference": 0.01}],
        "drift": [], "injected": {}}


def test_practitioners_table_has_a_row_per_engine_and_precision_and_dashes_where_absent() -> None:
    html = render_report(_records(), {"net-onnxruntime-int8": {"size_mb": 2.5}}, {"device": "cpu"}, GATE,
                         with_plots=False)
    for column in PRACTITIONER_COLUMNS:
        assert f">{column}</th>" in html
    tables = re.findall(r'<table class="suite practitioners".*?</table>', html, flags=re.S)
    assert len(tables) == 2  # batch 1 and batch 8
    for table in tables:
        assert [c for c in re.findall(r'data-cell="net-([\w-]+)"', table)] == [f"{e}-{p}" for e, p in CELLS]
    int8 = re.search(r'data-cell="net-onnxruntime-int8">(.*?)</tr>', tables[1]).group(1)  # type: ignore[union-attr]
    assert "<td>8.800</td>" in int8 and "<td>2.500</td>" in int8 and "<td>95.00</td>" in int8
    assert "<td>-</td>" in int8  # no latency-model path on CPU
    assert "reference" in re.search(r'data-cell="net-torch-fp32">(.*?)</tr>', tables[0]).group(1)  # type: ignore[union-attr]


def test_rank_table_changes_and_environment_warning() -> None:
    html = render_report(_records(), {}, {"device": "cpu", "gpu_name": "H100"}, GATE, with_plots=False)
    ranks = re.search(r'<table class="suite ranks".*?</table>', html, flags=re.S).group(0)  # type: ignore[union-attr]
    assert ranks.count("<tr><td>") == 10 and "onnxruntime int8" in ranks
    assert "Baseline from a different environment" in html and "A100" in html
    assert 'class="regression"><td class="name">net-onnxruntime-int8-bs8-all' in html


def test_plots_are_embedded_pngs() -> None:
    html = render_report(_records(), {}, {"device": "cuda:0"}, None)
    images = re.findall(r'<img class="plot" alt="net plot" src="data:image/png;base64,([A-Za-z0-9+/=]+)"', html)
    assert len(images) == 3, "latency, throughput and GPU timeline plots"
    assert all(len(i) > 5000 for i in images)
    assert "No baseline was given" in html


@pytest.fixture(scope="module")
def report(suite_baseline: Path) -> Path:
    """A real run of the tiny config against both saved baselines, with the HTML report."""
    path = suite_baseline / "report.html"
    done = run_suite(suite_baseline, "--latency-baseline", "latest", "--accuracy-baseline",
                     str(suite_baseline / "base.json"), "--html", str(path), "--self-contained-html")
    assert path.exists(), explain(done)
    return path


def test_report_file_is_self_contained_with_tables_and_plots(report: Path) -> None:
    html = report.read_text()
    assert html.count('class="suite practitioners"') == 4  # tiny and steady, batches 1 and 4
    assert 'data-cell="tiny-onnxruntime-fp32"' in html and 'data-cell="tiny-torch-fp32"' in html
    assert html.count("data:image/png;base64,") >= 4
    assert "Changed since baseline" in html and 'class="suite environment"' in html
    assert not re.search(r'<(img|script|link)[^>]+(src|href)="(https?:|file:|/)', html), "external resource"


CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


def _chromium(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    assert CHROMIUM
    cmd = [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
           "--disable-background-networking", "--disable-component-update", "--disable-sync",
           f"--user-data-dir={tmp_path / 'chromium-profile'}", *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=120)


@pytest.mark.skipif(CHROMIUM is None, reason="chromium is not installed (apt-get install chromium; .ci/run does)")
def test_report_renders_in_headless_chromium(report: Path, tmp_path: Path) -> None:
    done = _chromium(tmp_path, "--virtual-time-budget=5000", "--dump-dom", report.as_uri())
    assert done.returncode == 0, done.stderr[-2000:]
    dom = done.stdout
    # pytest-html builds its results table with JavaScript: rows in the DOM mean its scripts ran.
    assert dom.count('class="results-table-row') >= 5, dom[:2000]
    assert 'class="suite practitioners"' in dom and 'class="suite ranks"' in dom
    for column in PRACTITIONER_COLUMNS:
        assert f">{column}</th>" in dom
    assert dom.count('src="data:image/png;base64,') >= 4
    shot = tmp_path / "report.png"
    done = _chromium(tmp_path, "--window-size=1400,3000", "--virtual-time-budget=5000", f"--screenshot={shot}",
                     report.as_uri())
    assert done.returncode == 0 and shot.exists() and shot.stat().st_size > 50_000, done.stderr[-2000:]
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"

"""The users' plain pytest-benchmark gate: ``--benchmark-compare --benchmark-compare-fail=min:10%``
fails against a baseline that was faster, and passes against itself. (``min``, not ``mean``: the A/A half
must not depend on how busy the machine is; a neighbour's burst moved the mean of 10 rounds by 17 % on
the 2-core VM, which is pytest-benchmark's false alarm, docs/gating.md "Two gates", not what this tests.)"""

import json
from pathlib import Path

import pytest

from tests.selftest.suite_runs import explain, run_suite, timed_only

pytestmark = pytest.mark.selftest

LATENCY = ("-m", "latency", "--models", "steady", "--latency-rounds", "10")


def _saved(workdir: Path) -> Path:
    return next((workdir / "benchmarks").rglob("0001_*.json"))


def test_compare_fail_catches_a_faster_baseline_and_passes_an_honest_one(tmp_path: Path) -> None:
    saved = run_suite(tmp_path, *LATENCY, "--benchmark-autosave")
    assert timed_only(saved), explain(saved)  # it saved the baseline and judged nothing
    # 1000 %: an honest baseline passes however busy the machine is (a self-test's outcome must not depend on it)
    honest = run_suite(tmp_path, *LATENCY, "--benchmark-compare=0001", "--benchmark-compare-fail=min:1000%")
    assert honest.returncode == 0, explain(honest)
    # the compared run's environment opens the verdict too (suite/baseline_environment.py)
    assert "environment: baseline (--benchmark-compare 0001) -> this run:\n  no difference in the recorded " \
           "environment\n" in honest.stdout, explain(honest)

    path = _saved(tmp_path)
    data = json.loads(path.read_text())
    for bench in data["benchmarks"]:  # doctor the baseline: every case was 100 times as fast, beyond any load
        for key in ("min", "max", "mean", "median"):
            bench["stats"][key] /= 100
    path.write_text(json.dumps(data))
    doctored = run_suite(tmp_path, *LATENCY, "--benchmark-compare=0001", "--benchmark-compare-fail=min:10%")
    assert doctored.returncode != 0, explain(doctored)
    assert "Performance has regressed" in doctored.stdout + doctored.stderr, explain(doctored)

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
    # the compared run's environment opens the verdict too (suite/gate/baseline_environment.py)
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
    # each case fails on its own report, saying what flagged it (test_report_counts.py: one case, one outcome)
    assert "checks: 0 passed, 2 failed, 0 not judged" in doctored.stdout, explain(doctored)
    assert doctored.stdout.count("--benchmark-compare-fail against 0001_") >= 2, explain(doctored)
    assert "Field 'min' has failed PercentageRegressionCheck" in doctored.stdout, explain(doctored)


def test_a_regression_on_no_case_report_still_fails_the_run() -> None:
    """take_regressions drops from pytest-benchmark's list only the findings already on a case's report
    (suite/gate/benchmark_compare.py judge); any other stays a failed check of its own, never silently lost, and the
    list is emptied (its terminal summary would raise a bare PerformanceRegression)."""
    from types import SimpleNamespace

    from suite import verdict
    from suite.gate import benchmark_compare

    found = [("test_latency[a] (0001_abc)", "Field 'median' has failed"),
             ("test_latency[b] (0001_abc)", "Field 'median' has failed")]
    bench = SimpleNamespace(compare_fail=["median:5%"], compared_mapping={"p": {"t::a": {}, "t::b": {}}},
                            benchmarks=[], performance_regressions=list(found))
    config = SimpleNamespace(_benchmarksession=bench, stash=pytest.Stash())
    config.stash[benchmark_compare._ON_REPORTS] = {found[0]}
    ledger = verdict.Ledger()
    benchmark_compare.take_regressions(config, ledger)  # type: ignore[arg-type]
    assert list(ledger.checks) == [f"{benchmark_compare.LABEL}: test_latency[b] (0001_abc)"], ledger.checks
    assert ledger.outcome()[0] == verdict.FAILED and bench.performance_regressions == []


def test_the_noise_model_note_names_its_verdict_and_interval() -> None:
    """Beside a finding: the suite's model's verdict on the same pair, its interval, and --latency-baseline where
    it is no regression; where a side kept no rounds, it says it cannot weigh it."""
    from types import SimpleNamespace

    from suite.gate import benchmark_compare

    config = SimpleNamespace(stash=pytest.Stash())  # no gate: its defaults, 5 % and 99 %
    steady = [0.010 + 0.0001 * (i % 3) for i in range(40)]
    same, _ = benchmark_compare.noise_model_note(config, steady, steady)  # type: ignore[arg-type]
    assert same.startswith("the suite's noise model calls this pair unchanged (ratio 1.000, 99% CI [") and \
        same.endswith("as likely noise; judge with --latency-baseline last:5"), same
    slower, _ = benchmark_compare.noise_model_note(config, [s * 2 for s in steady], steady)  # type: ignore[arg-type]
    assert slower.startswith("the suite's noise model agrees: regression (ratio 2.000, 99% CI ["), slower
    none, model = benchmark_compare.noise_model_note(config, steady, None)  # type: ignore[arg-type]
    assert "cannot weigh it" in none and "--latency-regression 5%, --latency-confidence 99%" in model

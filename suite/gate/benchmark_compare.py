"""pytest-benchmark's ``--benchmark-compare-fail`` on the flagged case's own report (issue 47).

pytest-benchmark compares after the last test (its session finish) and reports a bare list of regressions: the
suite used to add each as a run-level failed check, so one case was a passed test *and* a failed check (pytest's
line ``34 passed`` above the verdict's ``34 passed, 32 failed``, junit ``failures="0"`` in a run that exits 1, a green
Passed row beside a red Failed one in the HTML). Here the same check, with pytest-benchmark's own objects, runs when
the case's call report is made (``judge``): a flagged case's report fails with the finding, so pytest's line, the
verdict, junit and the HTML count one case once, as they do for the suite's own gate. At the session's end
(``take_regressions``) the regressions pytest-benchmark found are matched with those already on a report; one that
is not (none should be) still fails the run as a check of its own, never dropped.

Beside each finding: what the suite's noise model (metrics/regression.py, the gate's threshold and confidence) says
of the same pair of runs, with the case's interval. pytest-benchmark's threshold still decides; a finding the
model calls inconclusive or unchanged says so and points to --latency-baseline (docs/gating.md 'Two gates').
"""

from __future__ import annotations

from typing import Any

import pytest

from metrics.regression import compare_latency
from suite import verdict
from suite.gate.coverage import benchmark_compared
from suite.gate.state import gate_of
from suite.options import options_of

LABEL = "pytest-benchmark --benchmark-compare-fail"

#: The findings already on a case's report: (pytest-benchmark's name for the pair, its failure text).
_ON_REPORTS = pytest.StashKey[set[tuple[str, str]]]()


def judge(item: pytest.Item, report: pytest.TestReport) -> None:
    """A latency case's call report: each --benchmark-compare-fail finding against each compared run becomes a
    failed component of the case, and a report that passed fails with the findings as its message."""
    bench = getattr(item.config, "_benchmarksession", None)
    fixture = getattr(item, "funcargs", {}).get("benchmark") if report.when == "call" else None
    stats = getattr(fixture, "stats", None)
    if bench is None or not getattr(bench, "compare_fail", None) or not stats:
        return
    lines = []
    for name, failure, compared in findings(bench, stats):
        item.config.stash.setdefault(_ON_REPORTS, set()).add((name, failure))
        run = str(compared.get("source")).split("/")[-1][:12]  # pytest-benchmark's own short name of the run
        note, model = noise_model_note(item.config, getattr(fixture, "extra_info", {}).get("samples_s"),
                                       (compared.get("extra_info") or {}).get("samples_s"))
        text = f"against {run}: {failure}; {note}"
        report.user_properties.append((verdict.USER_PROPERTY, verdict.Component(LABEL, verdict.FAILED, None,
                                                                                 f"{text} ({model})").as_dict()))
        lines += [f"{LABEL} {text}", f"  ({model}; the exit status follows --benchmark-compare-fail)"]
    if lines and report.passed:
        report.outcome = "failed"
        report.longrepr = "\n".join(f"E   {line}" for line in lines)


def findings(bench: Any, stats: Any) -> list[tuple[str, str, dict[str, Any]]]:
    """(name, failure, compared case) of each of pytest-benchmark's checks that this case fails, made as its
    session's ``prepare_benchmarks`` makes them after the run (the same flat case, the same name)."""
    from pytest_benchmark.utils import short_filename

    out = []
    for path, mapping in (bench.compared_mapping or {}).items():
        compared = mapping.get(stats.fullname)
        if compared is None:
            continue
        flat = stats.as_dict(include_data=False, stats=False, cprofile=(bench.cprofile_sort_by, bench.cprofile_top))
        flat.update(compared["stats"])
        flat["path"], flat["source"] = str(path), short_filename(path, bench.machine_id)
        for check in bench.compare_fail:
            failure = check.fails(stats, flat)
            if failure:
                out.append((bench.name_format(flat), failure, {**compared, "source": flat["source"]}))
    return out


def noise_model_note(config: pytest.Config, current: Any, baseline: Any) -> tuple[str, str]:
    """What the suite's noise model (the gate's threshold and confidence) says of this pair of runs, with the case's
    interval, kept short enough for the verdict's one line; and the model's settings. A finding the model calls
    anything but a regression is, on this evidence, as likely noise."""
    gate = gate_of(config)
    slowdown, confidence = (gate.max_slowdown, gate.confidence) if gate is not None else (0.05, 0.99)
    model = (f"the suite's noise model: --latency-regression {slowdown * 100:g}%, --latency-confidence "
             f"{confidence * 100:g}%, each run's rounds in contiguous batches, docs/gating.md 'Two gates'")
    try:
        comparison = compare_latency(list(baseline), list(current), slowdown, confidence)
    except (TypeError, ValueError):  # no per-round samples on a side (a run saved by plain pytest-benchmark)
        return ("the suite's noise model cannot weigh it (a run kept no per-round samples); judge with "
                "--latency-baseline", model)
    figures = f"ratio {comparison.ratio:.3f}, {confidence * 100:g}% CI {comparison.interval_text}"
    if comparison.verdict == "regression":
        return f"the suite's noise model agrees: regression ({figures})", model
    return (f"the suite's noise model calls this pair {comparison.verdict} ({figures}): as likely noise; judge with "
            "--latency-baseline last:5", model)


def take_regressions(config: pytest.Config, ledger: verdict.Ledger) -> None:
    """At the session's end, after pytest-benchmark compared: a case its compared run lacks is not judged
    (no-baseline), as with the suite's own gate; a regression it found that is on no case's report (``judge``) fails
    the run as a check of its own. pytest-benchmark's list is emptied either way: its terminal summary would raise
    a bare PerformanceRegression (a traceback, and no 'N passed' line)."""
    bench = getattr(config, "_benchmarksession", None)
    if bench is None or not getattr(bench, "compare_fail", None):
        return
    compared = benchmark_compared(bench)
    for case in bench.benchmarks:
        if case and case.fullname not in compared:
            ledger.add_component(case.fullname, verdict.Component(
                LABEL, verdict.NOT_JUDGED, "no-baseline",
                f"the compared run ({options_of(config).benchmark_compare}) has no case named {case.fullname}"))
    on_reports = config.stash.get(_ON_REPORTS, set())
    found = list(bench.performance_regressions or [])
    bench.performance_regressions.clear()
    for name, failure in found:
        if (name, failure) not in on_reports:
            ledger.add(f"{LABEL}: {name}", verdict.FAILED, detail=f"Performance has regressed: {failure}")

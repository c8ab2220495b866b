"""The gates: latency against a pytest-benchmark baseline, accuracy/parity against a --suite-results
baseline, and the self-test knobs that prove they fire.

Tests opt in with one line at their end, ``gate.check()``: every record the test appended to the
session is compared with its baseline counterpart and the test fails with the numbers when a gate
trips. Results are kept for the terminal tables and the HTML report (``report/``).

Why measure other processes' CPU use during each latency case (``interference``): on a shared
machine a neighbour's burst looks exactly like a regression. A case measured while others used more
than ``--latency-busy-limit`` of the CPUs is reported as ``busy`` (listed, not failed): a verdict
from it would be about the neighbour, not the engine.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from metrics.regression import DriftComparison, LatencyComparison, compare_accuracy, compare_latency, compare_parity
from suite import inject
from suite.baselines import (
    BaselineError,
    DriftTolerances,
    LatencyBaseline,
    ResultsBaseline,
    benchmark_storage_dir,
    key_label,
    latency_key,
    load_latency_baselines,
    load_results_baseline,
    parse_drift,
    parse_fraction,
    record_key,
    resolve_latency_baselines,
)
from suite.environment import differences, fingerprint

GATE_KEY = pytest.StashKey["Gate"]()
_METER_KEY = pytest.StashKey["CpuMeter"]()


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("inference-suite-gate", "inference suite: baselines and gates (docs/gating.md)")
    group.addoption("--latency-baseline", default=None, metavar="FILE|ID|latest|last:K",
                    help="saved pytest-benchmark run(s) to gate latency against: files or run ids (0003), comma-"
                         "separated, 'latest', or 'last:K' (the K newest under --benchmark-storage; with K >= 2 the "
                         "gate also learns each case's run-to-run noise)")
    group.addoption("--latency-regression", default="5%", metavar="PCT",
                    help="slowdown the latency gate must catch (default 5%%): a case fails when its median is "
                         "significantly slower (CI above 1) and slower by at least half of this")
    group.addoption("--latency-confidence", default="99%", metavar="PCT",
                    help="confidence of the latency gate's interval (default 99%%)")
    group.addoption("--latency-busy-limit", default="20%", metavar="PCT",
                    help="cases measured while other processes used more than this share of the CPUs are "
                         "reported as 'busy', not gated (default 20%%; 100%% gates them all)")
    group.addoption("--accuracy-baseline", default=None, metavar="FILE",
                    help="a --suite-results JSON to gate top-1/top-5 and parity figures against")
    group.addoption("--accuracy-drift", default=DriftTolerances().describe(), metavar="SPEC",
                    help="allowed drift against --accuracy-baseline (default %(default)s): top-1/top-5/isclose "
                         "drops in points, MAE growth factor")
    group.addoption("--inject-slowdown", default=None, metavar="PCT",
                    help="SELF-TEST ONLY: make every latency round slower by this fraction of its own time "
                         "(busy-wait after the call) to show the latency gate fails")
    group.addoption("--inject-accuracy-drop", default=None, metavar="PCT",
                    help="SELF-TEST ONLY: flip the top-1 class of this fraction of rows in every non-reference "
                         "engine's outputs to show the drift gate fails")


# =========================================================================== state


@dataclass
class LatencyOutcome:
    label: str
    nodeid: str
    status: str  # a LatencyComparison verdict, "busy" or "no-baseline"
    comparison: LatencyComparison | None = None
    interference: float | None = None
    baseline_interference: float | None = None


@dataclass
class DriftOutcome:
    label: str
    nodeid: str
    comparison: DriftComparison


@dataclass
class Gate:
    """Options, baselines and everything compared during the session."""

    max_slowdown: float
    confidence: float
    busy_limit: float
    drift: DriftTolerances
    inject_slowdown: float | None
    inject_accuracy_drop: float | None
    environment: dict[str, Any]
    latency_baseline: LatencyBaseline | None = None
    results_baseline: ResultsBaseline | None = None
    latency: list[LatencyOutcome] = field(default_factory=list)
    drift_results: list[DriftOutcome] = field(default_factory=list)
    no_accuracy_baseline: list[str] = field(default_factory=list)
    _drift_seen: set[int] = field(default_factory=set)

    def finish(self, records: list[dict[str, Any]]) -> None:
        """Compare, for the tables only, the records whose test failed before reaching gate.check()."""
        for record in records:
            if record.get("kind") in ("accuracy", "parity"):
                self.check_drift(record, "")

    def environment_differences(self) -> dict[str, tuple[Any, dict[str, tuple[Any, Any]]]]:
        """{"latency"|"accuracy": (baseline file, {key: (baseline, current)})} where they differ."""
        out = {}
        for name, base in (("latency", self.latency_baseline), ("accuracy", self.results_baseline)):
            if base is not None:
                diff = differences(base.environment, self.environment)
                if diff:
                    out[name] = (base.source, diff)
        return out

    # ---- latency -----------------------------------------------------------------------------------
    def check_latency(self, record: dict[str, Any], nodeid: str,
                      interference: float | None) -> tuple[LatencyOutcome | None, str | None]:
        """The case's outcome (None without a latency baseline) and a failure message for a regression."""
        key = latency_key(record)
        if key is None or self.latency_baseline is None:
            return None, None
        label = key_label(key)
        baseline = self.latency_baseline.samples.get(key)
        if baseline is None:
            outcome = LatencyOutcome(label, nodeid, "no-baseline", interference=interference)
            self.latency.append(outcome)
            return outcome, None
        comparison = compare_latency(baseline, record["samples_s"], self.max_slowdown, self.confidence)
        base_busy = self.latency_baseline.interference.get(key)
        busy = [v for v in (interference, base_busy) if v is not None and v > self.busy_limit]
        status = "busy" if busy and comparison.verdict != "unchanged" else comparison.verdict
        outcome = LatencyOutcome(label, nodeid, status, comparison, interference, base_busy)
        self.latency.append(outcome)
        if status == "busy" and comparison.verdict == "regression":
            return outcome, None
        if status == "regression":
            return outcome, f"{label}: {comparison.explain()}{self._env_note('latency')}"
        return outcome, None

    # ---- accuracy / parity -------------------------------------------------------------------------
    def check_drift(self, record: dict[str, Any], nodeid: str) -> str | None:
        key = record_key(record)
        if key is None or self.results_baseline is None or id(record) in self._drift_seen:
            return None
        self._drift_seen.add(id(record))
        label = " / ".join(key[1:])
        baseline = self.results_baseline.records.get(key)
        if baseline is None:
            self.no_accuracy_baseline.append(f"{key[0]} {label}")
            return None
        if key[0] == "accuracy":
            comparison = compare_accuracy(baseline, record, self.drift.top1_pts / 100, self.drift.top5_pts / 100)
        else:
            comparison = compare_parity(baseline, record, self.drift.isclose_pts, self.drift.mae_factor)
        self.drift_results.append(DriftOutcome(label, nodeid, comparison))
        if comparison.failed:
            return f"{label}: {comparison.explain()}{self._env_note('accuracy')}"
        return None

    def _env_note(self, which: str) -> str:
        diff = self.environment_differences().get(which)
        if not diff:
            return ""
        items = "; ".join(f"{k}: {b} -> {c}" for k, (b, c) in diff[1].items())
        return f"\n  NOTE: the baseline comes from a different environment ({items})"

    def as_dict(self) -> dict[str, Any]:
        """Plain data for the HTML report."""
        return {
            "max_slowdown": self.max_slowdown,
            "confidence": self.confidence,
            "busy_limit": self.busy_limit,
            "drift_tolerances": self.drift.describe(),
            "latency_baseline": None if self.latency_baseline is None else str(self.latency_baseline.source),
            "accuracy_baseline": None if self.results_baseline is None else str(self.results_baseline.source),
            "environment_differences": {k: {"source": str(src), "keys": {n: list(v) for n, v in d.items()}}
                                        for k, (src, d) in self.environment_differences().items()},
            "latency": [{"label": o.label, "status": o.status, "interference": o.interference,
                         "baseline_interference": o.baseline_interference,
                         **({} if o.comparison is None else o.comparison.as_dict())} for o in self.latency],
            "drift": [{"label": o.label, **o.comparison.as_dict()} for o in self.drift_results],
            "no_accuracy_baseline": list(self.no_accuracy_baseline),
            "injected": {"slowdown": self.inject_slowdown, "accuracy_drop": self.inject_accuracy_drop},
        }


def gate_of(config: pytest.Config) -> Gate | None:
    return config.stash.get(GATE_KEY, None)


def pytest_configure(config: pytest.Config) -> None:
    try:
        def pct(option: str) -> float:
            return parse_fraction(config.getoption(option), option)

        inject_slow = config.getoption("--inject-slowdown")
        inject_drop = config.getoption("--inject-accuracy-drop")
        gate = Gate(
            max_slowdown=pct("--latency-regression"), confidence=pct("--latency-confidence"),
            busy_limit=pct("--latency-busy-limit"), drift=parse_drift(config.getoption("--accuracy-drift")),
            inject_slowdown=None if inject_slow is None else parse_fraction(inject_slow, "--inject-slowdown"),
            inject_accuracy_drop=None if inject_drop is None else parse_fraction(inject_drop, "--inject-accuracy-drop"),
            environment=fingerprint(config.getoption("--device", "cpu")),
        )
        if not (0.0 < gate.max_slowdown < 10.0):
            raise BaselineError("--latency-regression must be above 0%")
        if not (0.5 <= gate.confidence < 1.0):
            raise BaselineError("--latency-confidence must be in [50%, 100%)")
        spec = config.getoption("--latency-baseline")
        if spec:
            storage = benchmark_storage_dir(config.getoption("benchmark_storage", None))
            gate.latency_baseline = load_latency_baselines(resolve_latency_baselines(spec, storage))
        spec = config.getoption("--accuracy-baseline")
        if spec:
            gate.results_baseline = load_results_baseline(Path(spec))
    except BaselineError as exc:
        raise pytest.UsageError(str(exc)) from exc
    config.stash[GATE_KEY] = gate


def pytest_sessionstart(session: pytest.Session) -> None:
    """The accuracy knob wraps the session's ``run_batched`` (every accuracy/parity output goes through it)."""
    gate = gate_of(session.config)
    if gate is None or not gate.inject_accuracy_drop:
        return
    from suite.plugin import suite_session

    suite = suite_session(session.config)
    original = suite.run_batched
    fraction = gate.inject_accuracy_drop

    def run_batched(cell: Any, feeds: dict[str, Any]) -> dict[str, Any]:
        outputs = original(cell, feeds)
        return outputs if cell.is_reference else inject.flip_top1(outputs, fraction)

    suite.run_batched = run_batched  # type: ignore[method-assign]


def pytest_report_header(config: pytest.Config) -> list[str]:
    gate = gate_of(config)
    if gate is None:
        return []
    lines = []
    if gate.latency_baseline is not None:
        b = gate.latency_baseline
        lines.append(f"latency gate: baseline {b.source} ({b.datetime or 'undated'}, {len(b.samples)} cases), "
                     f"fails at a significant slowdown >= {gate.max_slowdown * 50:g}% "
                     f"(--latency-regression {gate.max_slowdown * 100:g}%)")
    if gate.results_baseline is not None:
        lines.append(f"drift gate: baseline {gate.results_baseline.source} "
                     f"({len(gate.results_baseline.records)} records), tolerances {gate.drift.describe()}")
    for which, (source, diff) in gate.environment_differences().items():
        lines.append(f"WARNING: {which} baseline {source} comes from a DIFFERENT ENVIRONMENT:")
        lines.extend(f"WARNING:   {k}: {b} -> {c}" for k, (b, c) in diff.items())
    if gate.inject_slowdown:
        lines.append(f"SELF-TEST: every latency round is slowed down by {gate.inject_slowdown * 100:g}%")
    if gate.inject_accuracy_drop:
        lines.append(f"SELF-TEST: top-1 flipped on {gate.inject_accuracy_drop * 100:g}% of rows of every engine")
    return lines


# =========================================================================== fixtures


class CpuMeter:
    """Share of the machine's CPU time used by *other* processes (and stolen by a hypervisor) between
    creation and ``stop``; None where /proc/stat is unavailable or the window is too short to tell."""

    def __init__(self) -> None:
        self._start = self._snapshot()

    @staticmethod
    def _snapshot() -> tuple[float, float, float] | None:
        try:
            with open("/proc/stat") as f:
                fields = [float(v) for v in f.readline().split()[1:]]
        except (OSError, ValueError):
            return None
        hz = os.sysconf("SC_CLK_TCK")
        # user nice system idle iowait irq softirq steal: busy = all but idle and iowait.
        busy = (sum(fields[:8]) - fields[3] - fields[4]) / hz
        own = sum(os.times()[:2])
        return time.perf_counter(), busy, own

    #: /proc/stat and os.times count in clock ticks (10 ms): shorter windows give noise, not a share.
    MIN_WINDOW_S = 0.2

    def stop(self, pad: bool = False) -> float | None:
        """The share since creation. A window shorter than MIN_WINDOW_S gives None, or with ``pad``
        is extended by sleeping (this process then uses no CPU, so the neighbours are still what is
        measured): a 15 ms case on a busy machine is as unreliable as a long one."""
        end = self._snapshot()
        if self._start is None or end is None:
            return None
        wall = end[0] - self._start[0]
        if wall < self.MIN_WINDOW_S and pad:
            time.sleep(self.MIN_WINDOW_S - wall)
            end = self._snapshot()
            assert end is not None
            wall = end[0] - self._start[0]
        if wall < self.MIN_WINDOW_S:
            return None
        others = (end[1] - self._start[1]) - (end[2] - self._start[2])
        return min(1.0, max(0.0, others / (wall * (os.cpu_count() or 1))))


@pytest.fixture
def latency_wrapper(request: pytest.FixtureRequest) -> Any:
    """``latency_wrapper(timed)``: the timed callable, slowed by ``--inject-slowdown`` if given; also
    starts measuring other processes' CPU use for the case."""
    gate = gate_of(request.config)

    def wrap(timed: Any) -> Any:
        request.node.stash[_METER_KEY] = CpuMeter()
        if gate is not None and gate.inject_slowdown:
            return inject.SlowedCall(timed, gate.inject_slowdown)
        return timed

    return wrap


class GateCheck:
    """What the ``gate`` fixture gives a test: ``check()`` compares the records the test appended."""

    def __init__(self, request: pytest.FixtureRequest) -> None:
        from suite.plugin import suite_session

        self._request = request
        self._suite = suite_session(request.config)
        self._first = len(self._suite.records)
        config, gate = request.config, gate_of(request.config)
        # Pad short cases' CPU windows only where the figure is used: gating now, or a saved baseline.
        self._pad = bool((gate is not None and gate.latency_baseline is not None)
                         or config.getoption("benchmark_save", None) or config.getoption("benchmark_autosave", None))

    def check(self) -> None:
        request, gate = self._request, gate_of(self._request.config)
        if gate is None:
            return
        nodeid = request.node.nodeid
        meter = request.node.stash.get(_METER_KEY, None)
        failures = []
        for record in self._suite.records[self._first:]:
            if record.get("kind") == "latency":
                interference = meter.stop(pad=self._pad) if meter is not None else None
                outcome, message = gate.check_latency(record, nodeid, interference)
                _annotate_benchmark(request, interference, outcome)
            else:
                message = gate.check_drift(record, nodeid)
            if message:
                failures.append(message)
        if failures:
            pytest.fail("\n".join(failures), pytrace=False)


def _annotate_benchmark(request: pytest.FixtureRequest, interference: float | None,
                        outcome: LatencyOutcome | None) -> None:
    """Saved benchmarks carry the interference figure, so they can serve as baselines that know it."""
    if "benchmark" not in request.fixturenames:
        return
    info: dict[str, Any] = {"interference": interference}
    if outcome is not None:
        info["verdict"] = outcome.status
        if outcome.comparison is not None:
            info["ratio"] = outcome.comparison.ratio
    request.getfixturevalue("benchmark").extra_info["gate"] = info


@pytest.fixture
def gate(request: pytest.FixtureRequest) -> GateCheck:
    """``gate.check()`` at the end of a test: its accuracy/parity/latency records against the baselines."""
    return GateCheck(request)


# =========================================================================== terminal


def pytest_terminal_summary(terminalreporter: Any, exitstatus: int, config: pytest.Config) -> None:
    gate = gate_of(config)
    if gate is None:
        return
    from suite.plugin import suite_session

    gate.finish(suite_session(config).records)
    tr = terminalreporter
    for which, (source, diff) in gate.environment_differences().items():
        tr.section(f"WARNING: {which} baseline from a DIFFERENT ENVIRONMENT", sep="!", red=True, bold=True)
        tr.write_line(f"{source} was measured on another machine or software stack; its comparisons are shown "
                      "but may reflect the environment, not the engine:", red=True)
        for key, (base, cur) in diff.items():
            tr.write_line(f"  {key:<24} {base!s:>28}  ->  {cur!s}", red=True)
    if gate.inject_slowdown or gate.inject_accuracy_drop:
        tr.section("SELF-TEST KNOBS WERE ON", sep="!", yellow=True)
        if gate.inject_slowdown:
            tr.write_line(f"--inject-slowdown {gate.inject_slowdown * 100:g}%: every latency round was made slower")
        if gate.inject_accuracy_drop:
            tr.write_line(f"--inject-accuracy-drop {gate.inject_accuracy_drop * 100:g}%: engine outputs were altered")
    if gate.latency_baseline is not None:
        _latency_table(tr, gate)
    if gate.results_baseline is not None:
        _drift_table(tr, gate)


def _latency_table(tr: Any, gate: Gate) -> None:
    by_status: dict[str, list[LatencyOutcome]] = {}
    for o in gate.latency:
        by_status.setdefault(o.status, []).append(o)
    title = (f"latency gate: {gate.max_slowdown * 100:g}% threshold, {gate.confidence * 100:g}% CI, "
             f"baseline {gate.latency_baseline.source if gate.latency_baseline else '-'}")
    tr.section(title, sep="-", red=bool(by_status.get("regression")))
    shown = [o for s in ("regression", "improvement", "busy", "inconclusive") for o in by_status.get(s, [])]
    if shown:
        tr.write_line(f"{'case':<52}{'baseline':>11}{'current':>11}{'change':>9}  {'CI of ratio':<17}"
                      f"{'others CPU':>10}  verdict")
        for o in shown:
            c = o.comparison
            assert c is not None
            others = "-" if o.interference is None else f"{o.interference * 100:.0f}%"
            tr.write_line(f"{o.label:<52}{c.baseline_median_s * 1e3:>9.4g}ms{c.current_median_s * 1e3:>9.4g}ms"
                          f"{c.change_pct:>+8.2f}%  [{c.ci_low:.3f}, {c.ci_high:.3f}]  {others:>10}  {o.status}",
                          red=o.status == "regression", green=o.status == "improvement",
                          yellow=o.status in ("busy", "inconclusive"))
    counts = ", ".join(f"{len(v)} {k}" for k, v in sorted(by_status.items()))
    tr.write_line(f"cases: {counts or 'none compared'}")
    missing = by_status.get("no-baseline", [])
    if missing:
        tr.write_line(f"no baseline for {len(missing)} cases: {', '.join(o.label for o in missing[:8])}"
                      + (" ..." if len(missing) > 8 else ""), yellow=True)
    base = gate.latency_baseline
    if base is not None and base.without_samples:
        tr.write_line(f"{len(base.without_samples)} baseline cases hold no per-round samples (saved before the gate "
                      "existed; save a new baseline)", yellow=True)


def _drift_table(tr: Any, gate: Gate) -> None:
    failed = [o for o in gate.drift_results if o.comparison.failed]
    changed = [o for o in gate.drift_results if o.comparison.changed and not o.comparison.failed]
    tr.section(f"accuracy/parity drift gate: {gate.drift.describe()}, baseline "
               f"{gate.results_baseline.source if gate.results_baseline else '-'}", sep="-", red=bool(failed))
    for o in failed + changed:
        figures = "; ".join(f.describe() for f in o.comparison.figures)
        tr.write_line(f"{'DRIFT ' if o.comparison.failed else 'moved '}{o.label}: {figures}",
                      red=o.comparison.failed)
    unchanged = len(gate.drift_results) - len(failed) - len(changed)
    tr.write_line(f"records: {len(failed)} drifted beyond tolerance, {len(changed)} moved within it, "
                  f"{unchanged} identical")
    if gate.no_accuracy_baseline:
        tr.write_line(f"no baseline for {len(gate.no_accuracy_baseline)} records: "
                      f"{', '.join(gate.no_accuracy_baseline[:6])}" + (" ..." if len(gate.no_accuracy_baseline) > 6
                                                                        else ""), yellow=True)

"""The gates: latency against a pytest-benchmark baseline, accuracy/parity against a --suite-results
baseline, and the self-test knobs that prove they fire.

Tests opt in with one line at their end, ``gate.check()``: every record the test appended to the
session is compared with its baseline counterpart and the test fails with the numbers when a gate
trips. Results are kept for the terminal tables and the HTML report (``report/``).

Every comparison reports into the run's verdict (suite/verdict.py) as a component of its test: a
regression fails; unchanged and improvement pass; busy, inconclusive and no-baseline are *not
judged*, and a run with a not-judged case does not exit 0 unless the user accepted that reason. A
latency case timed in a run given no baseline at all is no-baseline too: it was timed and compared
with nothing, so it never reads as passed (its timed outputs are still checked, and can still fail).

Why measure other processes' CPU use during each latency case (``interference``): on a shared
machine a neighbour's burst looks exactly like a regression. A case measured while others used more
than ``--latency-busy-limit`` of the CPUs is re-measured (``--latency-busy-retries``); still busy, it
is not judged ("busy"). A baseline case saved busy is shown next to the current figure: against it
a regression still fails (the baseline was, if anything, slow), anything else is not judged. A
device-bound GPU case (``bound = "device"`` in its record) is judged whatever the CPUs did: its time
is the device's (docs/gating.md has the measurement).

Coverage is stated and enforced: which collected cases have a baseline counterpart, which do not,
and which baseline cases this run does not have. A baseline that matches nothing is a usage error.

PYTEST_DONT_REWRITE: suite/plugin.py imports this module at its top, so where the project is not installed it
is imported before conftest.py's pytest_plugins registers it, too late for pytest to rewrite its asserts (pytest
warned so). Where the project is installed, the entry points load it unmarked, unrewritten too.
"""

from __future__ import annotations

import dataclasses
import itertools
import os
import re
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from metrics.regression import (
    DriftComparison,
    DriftFigure,
    LatencyComparison,
    compare_accuracy,
    compare_latency,
    compare_memory,
    compare_parity,
    student_t_quantile,
)
from suite import bound, inject, verdict
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
    refuse_self_test_run,
    resolve_latency_baselines,
    saved_fingerprint,
)
from suite.environment import differences, fingerprint
from suite.results import incompleteness
from suite.state import suite_session

GATE_KEY = pytest.StashKey["Gate"]()
_METER_KEY = pytest.StashKey["CpuMeter"]()
_INTERFERENCE_KEY = pytest.StashKey["float | None"]()

# Case ids (suite/plugin.py latency_case_id, Cell.id) -> what they measure, for coverage.
_ENGINES = "torch|onnxruntime|inductor|tensorrt"
_PRECISIONS = "fp32|tf32|fp16|bf16|int8"
_CELL = rf"(?P<model>.+)-(?P<engine>{_ENGINES})-(?P<precision>{_PRECISIONS})"
_LATENCY_ID = re.compile(rf"test_latency\[{_CELL}-(?P<shape>bs\d+(?:-[A-Za-z_]+\d+)*)(?:-(?P<path>model|graph))?\]$")
_ACCURACY_ID = re.compile(rf"test_top1_top5\[{_CELL}\]$")
_PARITY_ID = re.compile(rf"test_parity_on_dataset\[{_CELL}\]$")
_GENERATED_ID = re.compile(rf"test_parity_on_generated_inputs\[{_CELL}-(?P<distribution>[a-z]+)\]$")
_BATCHES_ID = re.compile(rf"test_parity_at_every_engine_batch\[{_CELL}\]$")  # data set generated:batches


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
    group.addoption("--latency-busy-retries", type=int, default=2, metavar="N",
                    help="re-measure a case measured busy up to N times (default 2); still busy, it is not judged")
    group.addoption("--accept-incomplete-baseline", action="store_true", default=False,
                    help="use a baseline saved by a run that was interrupted (its missing cases are not judged)")
    group.addoption("--accuracy-baseline", default=None, metavar="FILE",
                    help="a --suite-results JSON to gate top-1/top-5 and parity figures against")
    group.addoption("--accuracy-drift", default=DriftTolerances().describe(), metavar="SPEC",
                    help="allowed drift against --accuracy-baseline (default %(default)s): top-1/top-5/isclose "
                         "drops in points, MAE growth factor, each cell's peak GPU memory growth factor")
    group.addoption("--inject-slowdown", default=None, metavar="PCT",
                    help="SELF-TEST ONLY: make every latency round slower by this fraction of its own time "
                         "(busy-wait after the call) to show the latency gate fails")
    group.addoption("--inject-accuracy-drop", default=None, metavar="PCT",
                    help="SELF-TEST ONLY: flip the top-1 class of this fraction of rows in every non-reference "
                         "engine's outputs to show the drift gate fails")


BENCHMARK_COMPARE_NOTE = (
    "--benchmark-compare-fail is pytest-benchmark's own check: one run's statistic against one saved run's, "
    "with no noise model, so on a shared machine it flags unchanged cases (docs/gating.md 'Two gates' has the "
    "measured false-alarm rates); the suite's gate is --latency-baseline")


# =========================================================================== busy


def load_can_explain(baseline_interference: float | None, current_interference: float | None) -> float:
    """The largest slowdown (current / baseline time) that the difference in interference can explain: the CPU
    time the case had (1 - the share others used) at the baseline over what it had now. Equal interference on both
    sides explains nothing (1.0), whatever its level: a slowdown measured at 76 % against a baseline at 75 % is a
    regression. A share not measured counts as none (0). Checked against the hog study (docs/gating.md,
    "Launch-bound cases"): with every CPU busy (16 loops on 16 vCPUs, others' share above 90 %) against quiet
    runs, the largest move of any case was +88 %, within this bound (10x and more); a bound any tighter than
    the CPU time lost would call a neighbour's slowdown a regression."""
    base = min(max(baseline_interference or 0.0, 0.0), 0.999)
    current = min(max(current_interference or 0.0, 0.0), 0.999)
    return (1.0 - base) / (1.0 - current)


# =========================================================================== state

#: What judges a latency case: the suite's gate, or pytest-benchmark's own check (suite/plugin.py takes its findings).
NO_BASELINE_OPTIONS = "--latency-baseline or --benchmark-compare-fail"

_STATE = {"regression": verdict.FAILED, "unchanged": verdict.PASSED, "improvement": verdict.PASSED,
          "busy": verdict.NOT_JUDGED, "inconclusive": verdict.NOT_JUDGED, "no-baseline": verdict.NOT_JUDGED}


@dataclass
class LatencyOutcome:
    label: str
    nodeid: str
    status: str  # a LatencyComparison verdict, "busy" or "no-baseline"
    comparison: LatencyComparison | None = None
    interference: float | None = None
    baseline_interference: float | None = None
    busy_side: str | None = None  # "current" | "baseline" when status is busy
    attempts: int = 1
    baseline_given: bool = True  # False: no-baseline because the run was given no latency baseline at all

    def component(self) -> verdict.Component:
        """This outcome as a check component of its test (suite/verdict.py)."""
        state = _STATE[self.status]
        reason = self.status if state == verdict.NOT_JUDGED else None
        if self.status == "no-baseline" and not self.baseline_given:
            detail = f"no latency baseline given ({NO_BASELINE_OPTIONS}); timed, not judged"
        elif self.status == "no-baseline":
            detail = "the latency baseline has no such case"
        elif self.status == "busy" and self.busy_side == "baseline":
            detail = (f"the baseline was measured while other processes used {_pct(self.baseline_interference)} of "
                      "the CPUs; save a new baseline on a quiet machine")
        elif self.status == "busy":
            detail = (f"other processes used {_pct(self.interference)} of the CPUs in each of {self.attempts} "
                      "attempt(s)")
        else:
            assert self.comparison is not None
            c = self.comparison
            detail = (f"median {c.baseline_median_s * 1e3:.4g} -> {c.current_median_s * 1e3:.4g} ms "
                      f"({c.change_pct:+.2f}%), CI {c.interval_text}; {c.reason}")
        return verdict.Component(f"latency gate {self.label}", state, reason, detail)


@dataclass
class DriftOutcome:
    label: str
    nodeid: str
    comparison: DriftComparison


@dataclass
class Coverage:
    """Which of this run's cases a baseline covers, and which baseline cases the run lacks."""

    cases: int = 0
    with_baseline: int = 0
    absent_from_run: int = 0
    absent_examples: tuple[str, ...] = ()
    saved_busy: int = 0  # of the run's cases with a baseline: how many were saved while the CPUs were busy

    @property
    def without_baseline(self) -> int:
        return self.cases - self.with_baseline

    def describe(self, gated: int | None = None) -> str:
        head = (f"gated {gated} of {self.cases} cases" if gated is not None
                else f"{self.with_baseline} of {self.cases} cases have a baseline")
        return (f"{head}; {self.without_baseline} without baseline; {self.absent_from_run} baseline cases absent "
                "from this run" + (f"; {self.saved_busy} of the baseline's cases were saved busy" if self.saved_busy
                                   else ""))

    def as_dict(self) -> dict[str, Any]:
        return {"cases": self.cases, "with_baseline": self.with_baseline, "without_baseline": self.without_baseline,
                "absent_from_run": self.absent_from_run, "absent_examples": list(self.absent_examples),
                "saved_busy": self.saved_busy}


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
    busy_retries: int = 2
    latency_baseline: LatencyBaseline | None = None
    #: pytest-benchmark's --benchmark-compare-fail judges the latency cases instead (suite/plugin.py
    #: _take_benchmark_regressions, which also makes a case its compared run lacks not judged, no-baseline)
    benchmark_compares: bool = False
    results_baseline: ResultsBaseline | None = None
    latency: list[LatencyOutcome] = field(default_factory=list)
    drift_results: list[DriftOutcome] = field(default_factory=list)
    no_accuracy_baseline: list[str] = field(default_factory=list)
    coverage: dict[str, Coverage] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)
    saved_busy: list[str] = field(default_factory=list)
    #: (source, saved_fingerprint) of each run --benchmark-compare loaded (pytest_benchmark_compare_machine_info)
    compared: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    imported: bool = False  # holds comparisons sent by xdist workers (suite/fleet.py)
    _drift_seen: set[int] = field(default_factory=set)

    def finish(self, records: list[dict[str, Any]]) -> None:
        """Compare, for the tables only, the records whose test failed before reaching gate.check(). (Under
        xdist each worker does this before sending its comparisons; the controller's records are theirs.)"""
        if self.imported:
            return
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

    def baseline_fingerprints(self) -> list[tuple[str, dict[str, Any]]]:
        """(source, saved fingerprint) of every baseline run this run is compared with, latency runs oldest first:
        the baseline side of the difference that opens the report (suite/baseline_environment.py)."""
        runs: list[tuple[str, dict[str, Any]]] = []
        if self.latency_baseline is not None:
            base = self.latency_baseline
            runs += [(str(s), f or {}) for s, f in itertools.zip_longest(base.sources, base.fingerprints)]
        runs += self.compared
        if self.results_baseline is not None:
            runs.append((str(self.results_baseline.source), self.results_baseline.fingerprint))
        return runs

    # ---- coverage ----------------------------------------------------------------------------------
    def set_coverage(self, nodeids: list[str], models: dict[str, Any]) -> None:
        """From the collected test ids: which cases have a baseline counterpart. Raises BaselineError when
        a baseline was given and matches none of the run's cases (it would gate nothing)."""
        if self.latency_baseline is not None:
            keys = {k for n in nodeids if (k := latency_key_of_nodeid(n)) is not None}
            base = set(self.latency_baseline.samples)
            self.coverage["latency"] = _coverage(keys, base, key_label)
            self.coverage["latency"].saved_busy = sum(
                1 for k in keys & base if self.latency_baseline.interference.get(k, 0.0) > self.busy_limit)
            if not keys & base:
                raise BaselineError(
                    f"--latency-baseline {self.latency_baseline.source}: none of this run's {len(keys)} latency cases "
                    f"has a counterpart among its {len(base)} cases, so it would gate nothing (e.g. run: "
                    f"{_examples(keys, key_label)}; baseline: {_examples(base, key_label)})")
        if self.results_baseline is not None:
            keys = {k for n in nodeids for k in record_keys_of_nodeid(n, models)}
            base = set(self.results_baseline.records)
            self.coverage["accuracy"] = _coverage(keys, base, " / ".join)
            if not keys & base:
                raise BaselineError(
                    f"--accuracy-baseline {self.results_baseline.source}: none of this run's {len(keys)} accuracy/"
                    f"parity records has a counterpart among its {len(base)} records, so it would gate nothing "
                    f"(e.g. run: {_examples(keys, ' / '.join)}; baseline: {_examples(base, ' / '.join)})")

    def ungated(self) -> int:
        """Latency cases timed in a run given no latency baseline: not judged (no-baseline), counted apart from a
        given baseline's missing cases, so that the verdict says how many were timed and nothing more."""
        return sum(1 for o in self.latency if o.status == "no-baseline" and not o.baseline_given)

    def gated(self, which: str) -> int:
        """Cases the gate judged: compared and decided (busy, inconclusive and no-baseline are not)."""
        if which == "latency":
            return sum(1 for o in self.latency if _STATE[o.status] != verdict.NOT_JUDGED)
        # A case may hold several records (a cell's generated:batches parity: one per batch): count the case once,
        # by its test and its label without the batch and seed (cell / dataset / output).
        return len({(o.nodeid, " / ".join(o.label.split(" / ")[:3])) for o in self.drift_results})

    # ---- latency -----------------------------------------------------------------------------------
    def compare(self, record: dict[str, Any]) -> LatencyComparison | None:
        key = latency_key(record)
        if key is None or self.latency_baseline is None or key not in self.latency_baseline.samples:
            return None
        return compare_latency(self.latency_baseline.samples[key], record["samples_s"], self.max_slowdown,
                               self.confidence)

    def busy_matters(self, record: dict[str, Any], interference: float | None, saving: bool) -> bool:
        """Whether a re-measurement could change this case's outcome: the current run was busy, the case's
        time is not the device's, and either a baseline is being saved or the comparison is not 'unchanged'."""
        if interference is None or interference <= self.busy_limit or record.get("bound") == "device":
            return False
        if self.latency_baseline is None:
            return saving
        comparison = self.compare(record)
        return comparison is None or comparison.verdict != "unchanged"

    def check_latency(self, record: dict[str, Any], nodeid: str, interference: float | None,
                      attempts: int = 1) -> tuple[LatencyOutcome | None, str | None]:
        """The case's outcome and a failure message for a regression. A case timed with no baseline to compare
        with, given or in the given one, is not judged (no-baseline): timing alone judges nothing. None where
        pytest-benchmark's --benchmark-compare-fail judges the case instead."""
        key = latency_key(record)
        if key is None or (self.latency_baseline is None and self.benchmark_compares):
            return None, None
        label = key_label(key)
        comparison = self.compare(record)
        if comparison is None:
            outcome = LatencyOutcome(label, nodeid, "no-baseline", interference=interference, attempts=attempts,
                                     baseline_given=self.latency_baseline is not None)
            self.latency.append(outcome)
            return outcome, None
        assert self.latency_baseline is not None
        comparison = bound.gate_rule(record, comparison)  # a class's rule (suite/bound.py)
        base_busy = self.latency_baseline.interference.get(key)
        device_bound = record.get("bound") == "device"
        current_busy = not device_bound and interference is not None and interference > self.busy_limit
        baseline_busy = not device_bound and base_busy is not None and base_busy > self.busy_limit
        status, side = comparison.verdict, None
        # Busy excuses only what the difference in interference can explain (load_can_explain): a slowdown
        # measured at the baseline's interference, or beyond what the CPU time others took can account for, is
        # a regression however busy both runs were.
        if status == "regression" and current_busy and comparison.ratio <= load_can_explain(base_busy, interference):
            status, side = "busy", "current"
        elif status in ("improvement", "inconclusive") and current_busy:
            status, side = "busy", "current"  # a neighbour's burst moves a case either way: no finding
        elif (status in ("improvement", "unchanged", "inconclusive") and baseline_busy
              and load_can_explain(interference, base_busy) >= 1.0 + self.max_slowdown / 2):
            # A slow, busy baseline hides a real slowdown as "unchanged" or an "improvement" when it was busier than
            # this run by enough to hide one the gate must catch; only a regression over it is then a finding.
            status, side = "busy", "baseline"
        outcome = LatencyOutcome(label, nodeid, status, comparison, interference, base_busy, side, attempts)
        self.latency.append(outcome)
        if status == "regression":
            return outcome, f"{label}: {comparison.explain()}{self._env_note('latency')}"
        return outcome, None

    # ---- peak GPU memory ---------------------------------------------------------------------------
    def check_memory(self, record: dict[str, Any]) -> tuple[verdict.Component | None, str | None]:
        """A cell's peak GPU memory (suite/lifetime.py) against the accuracy baseline's record of the same cell:
        a component only where both runs measured it (a CPU run, or a baseline from before the figure existed,
        judges nothing here and makes no check not judged); a failure message where it grew beyond
        ``--accuracy-drift memory=``."""
        if self.results_baseline is None or record.get("kind") != "gpu_memory":
            return None, None
        baseline = self.results_baseline.gpu_memory.get(str(record.get("cell")))
        comparisons = compare_memory(baseline, record, self.drift.memory_factor) if baseline else []
        if not comparisons:
            return None, None
        grew = [c for c in comparisons if c.failed]
        label = f"gpu memory drift gate {record.get('cell')}"
        figures = "; ".join(c.describe() for c in comparisons)
        component = verdict.Component(label, verdict.FAILED if grew else verdict.PASSED, None, figures)
        if not grew:
            return component, None
        return component, (f"{record.get('cell')}: peak GPU memory grew: {'; '.join(c.describe() for c in grew)}"
                           f"{self._env_note('accuracy')}")

    # ---- accuracy / parity -------------------------------------------------------------------------
    def check_drift(self, record: dict[str, Any], nodeid: str) -> tuple[verdict.Component | None, str | None]:
        """The record's comparison as a verdict component (None without an accuracy baseline) and a failure
        message when it drifted beyond tolerance."""
        key = record_key(record)
        if key is None or self.results_baseline is None or id(record) in self._drift_seen:
            return None, None
        self._drift_seen.add(id(record))
        label = " / ".join(key[1:])
        baseline = self.results_baseline.records.counterpart(key)
        if baseline is None:
            self.no_accuracy_baseline.append(f"{key[0]} {label}")
            return verdict.Component(f"{key[0]} drift gate {label}", verdict.NOT_JUDGED, "no-baseline",
                                     "the accuracy baseline has no such record"), None
        if key[0] == "accuracy":
            comparison = compare_accuracy(baseline, record, self.drift.top1_pts / 100, self.drift.top5_pts / 100)
        else:
            comparison = compare_parity(baseline, record, self.drift.isclose_pts, self.drift.mae_factor)
        self.drift_results.append(DriftOutcome(label, nodeid, comparison))
        figures = "; ".join(f.describe() for f in comparison.figures)
        component = verdict.Component(f"{key[0]} drift gate {label}",
                                      verdict.FAILED if comparison.failed else verdict.PASSED, None, figures)
        if comparison.failed:
            return component, f"{label}: {comparison.explain()}{self._env_note('accuracy')}"
        return component, None

    def _env_note(self, which: str) -> str:
        diff = self.environment_differences().get(which)
        if not diff:
            return ""
        items = "; ".join(f"{k}: {b} -> {c}" for k, (b, c) in diff[1].items())
        return f"\n  NOTE: the baseline comes from a different environment ({items})"

    def as_dict(self) -> dict[str, Any]:
        """Plain data for the HTML report."""
        coverage = {k: {**c.as_dict(), "gated": self.gated(k)} for k, c in self.coverage.items()}
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
                         "baseline_interference": o.baseline_interference, "busy_side": o.busy_side,
                         "attempts": o.attempts,
                         **({} if o.comparison is None else o.comparison.as_dict())} for o in self.latency],
            "drift": [{"label": o.label, **o.comparison.as_dict()} for o in self.drift_results],
            "no_accuracy_baseline": list(self.no_accuracy_baseline),
            "coverage": coverage,
            "warnings": list(self.warnings) + self.saved_busy_warning(),
            "injected": {"slowdown": self.inject_slowdown, "accuracy_drop": self.inject_accuracy_drop},
        }

    def export_outcomes(self) -> dict[str, Any]:
        """This process's comparisons as plain data, for the controller of an xdist run (suite/fleet.py)."""
        return {"latency": [{**{k: v for k, v in vars(o).items() if k != "comparison"},
                             "comparison": None if o.comparison is None else dataclasses.asdict(o.comparison)}
                            for o in self.latency],
                "drift": [{"label": o.label, "nodeid": o.nodeid, "kind": o.comparison.kind,
                           "figures": [f.as_dict() for f in o.comparison.figures], "notes": list(o.comparison.notes)}
                          for o in self.drift_results],
                "no_accuracy_baseline": list(self.no_accuracy_baseline), "saved_busy": list(self.saved_busy)}

    def import_outcomes(self, data: dict[str, Any]) -> None:
        """Add a worker's comparisons (``export_outcomes``) to this process's tables."""
        self.imported = True
        for o in data.get("latency", []):
            comparison = None if o["comparison"] is None else LatencyComparison(**o["comparison"])
            self.latency.append(LatencyOutcome(**{**o, "comparison": comparison}))
        for d in data.get("drift", []):
            figures = tuple(DriftFigure(**f) for f in d["figures"])
            self.drift_results.append(DriftOutcome(d["label"], d["nodeid"],
                                                   DriftComparison(d["kind"], figures, tuple(d["notes"]))))
        self.no_accuracy_baseline.extend(data.get("no_accuracy_baseline", []))
        self.saved_busy.extend(data.get("saved_busy", []))

    def saved_busy_warning(self) -> list[str]:
        if not self.saved_busy:
            return []
        return [f"{len(self.saved_busy)} case(s) were saved to the baseline while other processes used more than "
                f"{self.busy_limit * 100:g}% of the CPUs ({', '.join(self.saved_busy[:4])}"
                + (" ..." if len(self.saved_busy) > 4 else "") + "): as a baseline they cannot judge a later run "
                "except a regression; save the baseline again on a quiet machine"]


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{x * 100:.0f}%"


def _coverage(keys: set[Any], base: set[Any], label: Callable[[Any], str]) -> Coverage:
    absent = sorted(base - keys)
    return Coverage(cases=len(keys), with_baseline=len(keys & base), absent_from_run=len(absent),
                    absent_examples=tuple(label(k) for k in absent[:8]))


def _examples(keys: set[Any], label: Callable[[Any], str]) -> str:
    shown = [label(k) for k in sorted(keys)[:3]]
    return ", ".join(shown) + (" ..." if len(keys) > 3 else "") if shown else "none"


def latency_key_of_nodeid(nodeid: str) -> tuple[str, str, str, str, str] | None:
    """The (model, engine, precision, shape, path) a test_latency id measures (ids: plugin.latency_case_id)."""
    match = _LATENCY_ID.search(nodeid)
    if not match:
        return None
    return (match["model"], match["engine"], match["precision"], match["shape"], match["path"] or "all")


def record_keys_of_nodeid(nodeid: str, models: dict[str, Any]) -> list[tuple[str, ...]]:
    """The accuracy/parity record keys (suite.baselines.record_key) a test will produce, from its id."""
    for pattern, kind in ((_ACCURACY_ID, "accuracy"), (_PARITY_ID, "parity"), (_GENERATED_ID, "generated"),
                          (_BATCHES_ID, "batches")):
        match = pattern.search(nodeid)
        if match is None or match["model"] not in models:
            continue
        model = models[match["model"]]
        cell = f"{match['model']}-{match['engine']}-{match['precision']}"
        if kind == "accuracy":
            return [("accuracy", cell, str(model.accuracy_dataset))]
        dataset = {"parity": str(model.parity_dataset), "batches": "generated:batches"}.get(
            kind, f"generated:{match.groupdict().get('distribution')}")
        return [("parity", cell, dataset, name) for name in model.outputs]
    return []


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
            busy_retries=int(config.getoption("--latency-busy-retries")),
            benchmark_compares=bool(config.getoption("benchmark_compare_fail", None)),
        )
        if not (0.0 < gate.max_slowdown < 10.0):
            raise BaselineError("--latency-regression must be above 0%")
        if not (0.5 <= gate.confidence < 1.0):
            raise BaselineError("--latency-confidence must be in [50%, 100%)")
        if gate.busy_retries < 0:
            raise BaselineError("--latency-busy-retries must be >= 0")
        accept_incomplete = bool(config.getoption("--accept-incomplete-baseline"))
        spec = config.getoption("--latency-baseline")
        if spec:
            storage = benchmark_storage_dir(config.getoption("benchmark_storage", None))
            paths = resolve_latency_baselines(spec, storage)
            gate.latency_baseline = load_latency_baselines(paths, accept_incomplete)
            gate.warnings.extend(_runs_shortfall(spec, len(paths), gate.confidence))
        spec = config.getoption("--accuracy-baseline")
        if spec:
            gate.results_baseline = load_results_baseline(Path(spec), accept_incomplete)
    except BaselineError as exc:
        raise pytest.UsageError(str(exc)) from exc
    config.stash[GATE_KEY] = gate


def self_test_knobs(config: pytest.Config) -> dict[str, float]:
    """The self-test knobs this run is made with, by option: written into every file the run saves (results,
    pytest-benchmark's JSON and storage), where suite.baselines refuses such a file as a baseline."""
    gate = gate_of(config)
    if gate is None:
        return {}
    knobs = {"--inject-slowdown": gate.inject_slowdown, "--inject-accuracy-drop": gate.inject_accuracy_drop}
    return {k: v for k, v in knobs.items() if v}


def pytest_benchmark_compare_machine_info(config: pytest.Config, benchmarksession: Any, machine_info: Any,
                                          compared_benchmark: dict[str, Any]) -> None:
    """``--benchmark-compare`` loads the run it compares with itself: it is refused on the same grounds as a
    --latency-baseline (a run that did not end, a run made with a self-test knob)."""
    try:
        _refuse_incomplete_compared(compared_benchmark, bool(config.getoption("--accept-incomplete-baseline")))
        refuse_self_test_run(Path(str(config.getoption("benchmark_compare"))), compared_benchmark,
                             "--benchmark-compare's run")
    except BaselineError as exc:
        raise pytest.UsageError(str(exc)) from exc
    gate = gate_of(config)
    if gate is not None:
        spec = config.getoption("benchmark_compare")
        gate.compared.append((f"--benchmark-compare {'latest' if spec is True else spec}",
                              saved_fingerprint(compared_benchmark)))


def _refuse_incomplete_compared(data: dict[str, Any], accept: bool) -> None:
    why = incompleteness(data)
    if why and not accept:
        raise BaselineError(f"--benchmark-compare: the compared run did not end ({why}): the cases it never reached "
                            "would compare with nothing; compare with a complete run, or pass "
                            "--accept-incomplete-baseline")


def _runs_shortfall(spec: str, found: int, confidence: float) -> list[str]:
    """``last:K`` with fewer than K saved runs: say what protection is lost."""
    asked = [int(m) for m in re.findall(r"(?:last|latest):(\d+)", spec)]
    if not asked or found >= sum(asked):
        return []
    k = sum(asked)
    if found == 1:
        lost = ("with one run there is no run-to-run spread at all, so a shift of the whole run (thread placement, "
                "clocks, a neighbour) is judged on within-run noise alone and can fail as a regression")
    else:
        t = student_t_quantile(0.5 + confidence / 2, found - 1)
        lost = (f"the run-to-run interval rests on {found} runs (t factor {t:.1f} at {confidence * 100:g}%, against "
                f"{student_t_quantile(0.5 + confidence / 2, k - 1):.1f} with {k}), so many cases come out inconclusive")
    return [f"--latency-baseline {spec}: asked for {k} saved runs, found {found}: {lost}; keep saving runs "
            "(--benchmark-autosave or --benchmark-save)"]


def pytest_sessionstart(session: pytest.Session) -> None:
    """The accuracy knob wraps the session's ``run_batched`` (every accuracy/parity output goes through it)."""
    gate = gate_of(session.config)
    if gate is None or not gate.inject_accuracy_drop:
        return
    suite = suite_session(session.config)
    original = suite.run_batched
    fraction = gate.inject_accuracy_drop

    def run_batched(cell: Any, feeds: dict[str, Any]) -> dict[str, Any]:
        outputs = original(cell, feeds)
        return outputs if cell.is_reference else inject.flip_top1(outputs, fraction)

    suite.run_batched = run_batched  # type: ignore[method-assign]


def set_coverage(config: pytest.Config, nodeids: list[str]) -> None:
    """Called once the run's test ids are known (suite/plugin.py note_collected)."""
    _benchmark_compare_coverage(config, nodeids)
    gate = gate_of(config)
    if gate is None or (gate.latency_baseline is None and gate.results_baseline is None):
        return
    try:
        gate.set_coverage(nodeids, dict(suite_session(config).config.models))
    except BaselineError as exc:
        raise pytest.UsageError(str(exc)) from exc
    reporter = config.pluginmanager.get_plugin("terminalreporter")
    if reporter is not None:
        for which, coverage in gate.coverage.items():
            reporter.write_line(f"{which} gate coverage: {coverage.describe()}",
                                yellow=bool(coverage.without_baseline or coverage.absent_from_run))


def benchmark_compared(bench: Any) -> set[str]:
    """The case names pytest-benchmark's session found in the compared run(s) (``--benchmark-compare``)."""
    return set().union(*(m.keys() for m in (bench.compared_mapping or {}).values()))


def _benchmark_compare_coverage(config: pytest.Config, nodeids: list[str]) -> None:
    """pytest-benchmark's --benchmark-compare-fail matches cases by test id. A compared run that has none of
    this run's latency cases would compare nothing and pass: a usage error, as for --latency-baseline."""
    bench = getattr(config, "_benchmarksession", None)
    if bench is None or not getattr(bench, "compare_fail", None) or not bench.compared_mapping:
        return
    cases = [n for n in nodeids if "::test_latency[" in n]
    compared = benchmark_compared(bench)
    if cases and not compared & set(cases):
        raise pytest.UsageError(
            f"--benchmark-compare {config.getoption('benchmark_compare')}: none of this run's {len(cases)} latency "
            f"cases is in the compared run's {len(compared)} (pytest-benchmark matches test ids, e.g. run: "
            f"{sorted(cases)[0]}; compared: {sorted(compared)[0] if compared else '-'}), so "
            "--benchmark-compare-fail would compare nothing")


def pytest_report_header(config: pytest.Config) -> list[str]:
    gate = gate_of(config)
    if gate is None:
        return []
    lines = []
    if gate.latency_baseline is not None:
        b = gate.latency_baseline
        busy = sum(1 for v in b.interference.values() if v > gate.busy_limit)
        lines.append(f"latency gate: baseline {b.source} ({b.datetime or 'undated'}, {len(b.samples)} cases"
                     + (f", {busy} saved busy" if busy else "") + f"), fails at a significant slowdown >= "
                     f"{gate.max_slowdown * 50:g}% (--latency-regression {gate.max_slowdown * 100:g}%)")
    if gate.results_baseline is not None:
        lines.append(f"drift gate: baseline {gate.results_baseline.source} "
                     f"({len(gate.results_baseline.records)} records), tolerances {gate.drift.describe()}")
    lines.extend(f"WARNING: {w}" for w in gate.warnings)
    for which, (source, diff) in gate.environment_differences().items():
        lines.append(f"WARNING: {which} baseline {source} comes from a DIFFERENT ENVIRONMENT:")
        lines.extend(f"WARNING:   {k}: {b} -> {c}" for k, (b, c) in diff.items())
    if config.getoption("benchmark_compare_fail", None):
        lines.append(f"NOTE: {BENCHMARK_COMPARE_NOTE}")
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
    """What the ``gate`` fixture gives a test: ``settle_latency`` re-measures a busy case, ``check()``
    compares the records the test appended and reports each comparison into the run's verdict."""

    def __init__(self, request: pytest.FixtureRequest) -> None:
        self._request = request
        self._suite = suite_session(request.config)
        self._first = len(self._suite.records)
        config, gate = request.config, gate_of(request.config)
        self._saving = bool(config.getoption("benchmark_save", None) or config.getoption("benchmark_autosave", None))
        # Pad short cases' CPU windows only where the figure is used: gating now, or a saved baseline.
        self._pad = bool((gate is not None and gate.latency_baseline is not None) or self._saving)

    def settle_latency(self, record: dict[str, Any], remeasure: Callable[[], list[float]]) -> list[dict[str, Any]]:
        """Measure the CPU share others used during the case; while it was busy and that could change the
        outcome, re-measure (at most --latency-busy-retries times), updating ``record["samples_s"]``.
        Returns one entry per attempt: the share and the median."""
        node, gate = self._request.node, gate_of(self._request.config)
        meter = node.stash.get(_METER_KEY, None)
        share = meter.stop(pad=self._pad) if meter is not None else None
        attempts = [{"interference": share, "median_ms": statistics.median(record["samples_s"]) * 1e3}]
        while (gate is not None and len(attempts) <= gate.busy_retries
               and gate.busy_matters(record, share, self._saving)):
            meter = CpuMeter()
            record["samples_s"] = list(remeasure())
            share = meter.stop(pad=self._pad)
            attempts.append({"interference": share, "median_ms": statistics.median(record["samples_s"]) * 1e3})
        node.stash[_INTERFERENCE_KEY] = share
        if self._saving and gate is not None and share is not None and share > gate.busy_limit \
                and record.get("bound") != "device":
            key = latency_key(record)
            gate.saved_busy.append(key_label(key) if key else node.name)
        return attempts

    def _check_precision(self) -> None:
        """A cell whose engine computes nothing, or almost nothing, in its precision never passes as a check of
        that precision (suite.verdict reason 'precision-not-run'); its failures still fail."""
        from suite.session import Cell

        cells = {(r["model"], r["engine"], r["precision"]) for r in self._suite.records[self._first:] if "engine" in r}
        for model, engine, precision in sorted(cells):
            said = self._suite.precision_check(Cell(model, engine, precision))
            if said is not None and not said[0]:
                verdict.report_component(self._request.node, verdict.Component(
                    f"precision census {model}-{engine}-{precision}", verdict.NOT_JUDGED, "precision-not-run",
                    said[1]))

    def smoke(self, cell: Any, shape: str, path: str) -> None:
        """A latency case run once with --benchmark-disable: nothing timed, so a latency gate cannot judge it."""
        gate = gate_of(self._request.config)
        if gate is not None and gate.latency_baseline is not None:
            label = key_label((cell.model, cell.engine, cell.precision, shape, path))
            verdict.report_component(self._request.node, verdict.Component(
                f"latency gate {label}", verdict.NOT_JUDGED, "benchmark-disabled",
                "--benchmark-disable ran the case once, untimed"))

    def check(self) -> None:
        request, gate = self._request, gate_of(self._request.config)
        self._check_precision()
        if gate is None:
            return
        node = request.node
        failures = []
        for record in self._suite.records[self._first:]:
            if record.get("kind") == "latency":
                interference = node.stash.get(_INTERFERENCE_KEY, None)
                outcome, message = gate.check_latency(record, node.nodeid, interference,
                                                      attempts=len(record.get("attempts") or [1]))
                _annotate_benchmark(request, interference, outcome)
                component = outcome.component() if outcome is not None else None
            else:
                component, message = gate.check_drift(record, node.nodeid)
            if component is not None:
                verdict.report_component(node, component)
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


def verdict_lines(config: pytest.Config) -> list[tuple[str, dict[str, bool]]]:
    """The gate's part of the verdict block (suite/summary.py): coverage, regressions with their figures,
    and what weakens the comparison."""
    gate = gate_of(config)
    if gate is None:
        return []
    lines: list[tuple[str, dict[str, bool]]] = []
    if config.getoption("benchmark_compare_fail", None):
        lines.append((f"NOTE: {BENCHMARK_COMPARE_NOTE}", {"yellow": True}))
    for which, coverage in gate.coverage.items():
        lines.append((f"{which} gate: {coverage.describe(gate.gated(which))}",
                      {"yellow": bool(coverage.without_baseline or coverage.absent_from_run)}))
    ungated = gate.ungated()
    if ungated:
        lines.append((f"latency gate: no baseline given ({NO_BASELINE_OPTIONS}): gated 0 of {ungated} cases; "
                      f"{ungated} timed, not judged (no-baseline)", {"yellow": True}))
    for o in gate.latency:
        if o.status == "regression" and o.comparison is not None:
            c = o.comparison
            lines.append((f"  REGRESSION {o.label}: {c.baseline_median_s * 1e3:.4g} -> "
                          f"{c.current_median_s * 1e3:.4g} ms ({c.change_pct:+.2f}%), CI {c.interval_text}",
                          {"red": True}))
    for o in gate.drift_results:
        if o.comparison.failed:
            figures = "; ".join(f.describe() for f in o.comparison.failures)
            lines.append((f"  DRIFT {o.label}: {figures}", {"red": True}))
    for warning in gate.warnings + gate.saved_busy_warning():
        lines.append((f"WARNING: {warning}", {"yellow": True}))
    return lines


def pytest_terminal_summary(terminalreporter: Any, exitstatus: int, config: pytest.Config) -> None:
    gate = gate_of(config)
    if gate is None:
        return
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
        tr.write_line(f"{'case':<52}{'baseline':>11}{'current':>11}{'change':>9}  {'CI of ratio':<18}"
                      f"{'others CPU now / base':>22}  verdict")
        for o in shown:
            c = o.comparison
            assert c is not None
            others = f"{_pct(o.interference)} / {_pct(o.baseline_interference)}"
            status = o.status + (f" ({o.busy_side})" if o.busy_side else "")
            tr.write_line(f"{o.label:<52}{c.baseline_median_s * 1e3:>9.4g}ms{c.current_median_s * 1e3:>9.4g}ms"
                          f"{c.change_pct:>+8.2f}%  {c.interval_text:<18}{others:>22}  {status}",
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

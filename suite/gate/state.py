"""The gate's state: the Gate (options, baselines, every comparison of the run), under ``config.stash[GATE_KEY]``,
and the few functions the suite's other plugins call to reach it (suite/plugin.py, fleet.py, report/plugin.py).

Its own module, below the hooks (suite/gate/plugin.py), so that what reads the gate never imports the hooks.
"""

from __future__ import annotations

import dataclasses
import itertools
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from metrics.drift import DriftComparison, DriftFigure, DriftTolerances
from metrics.kernel_profile import explain_kernels, same_kernels
from metrics.node_profile import explain_nodes
from metrics.regression import LatencyComparison
from metrics.structure import explain, structural_changes
from suite import verdict
from suite.environment import fingerprint
from suite.gate import bound
from suite.gate.baselines import (
    BaselineError,
    LatencyBaseline,
    ResultsBaseline,
    benchmark_storage_dir,
    load_latency_baselines,
    load_results_baseline,
    parse_drift,
    parse_fraction,
    profiles_of,
    resolve_latency_baselines,
)
from suite.gate.coverage import Coverage, CoverageChecks, benchmark_compare_coverage
from suite.gate.drift import DriftChecks, DriftOutcome
from suite.gate.latency import STATE, LatencyChecks, LatencyOutcome, runs_shortfall
from suite.gate.wall_bound import DEFAULT_FACTOR, parse_factor
from suite.options import options_of
from suite.state import suite_session

GATE_KEY = pytest.StashKey["Gate"]()


@dataclass
class Gate(LatencyChecks, DriftChecks, CoverageChecks):
    """Options, baselines and everything compared during the session: the latency gate's checks
    (suite/gate/latency.py), the drift gate's (drift.py) and coverage (coverage.py) are its bases."""

    max_slowdown: float
    confidence: float
    busy_limit: float
    drift: DriftTolerances
    inject_slowdown: float | None
    inject_accuracy_drop: float | None
    environment: dict[str, Any]
    busy_retries: int = 2
    #: a latency case may take this many times its first attempt, re-measures included (suite/gate/wall_bound.py)
    case_bound: float = DEFAULT_FACTOR
    latency_baseline: LatencyBaseline | None = None
    #: each class's between-night half-width, learned from the kept nights (suite/gate/bound.py class_noise)
    noise: dict[tuple[str, ...], tuple[float, int]] = field(default_factory=dict)
    #: pytest-benchmark's --benchmark-compare-fail judges the latency cases instead (suite/hooks/verdict_wiring.py
    #: _take_benchmark_regressions, which also makes a case its compared run lacks not judged, no-baseline)
    benchmark_compares: bool = False
    results_baseline: ResultsBaseline | None = None
    latency: list[LatencyOutcome] = field(default_factory=list)
    #: every group's drift, judged at the run's end (suite/gate/latency.py take_group_drifts)
    groups: list[Any] = field(default_factory=list)
    drift_results: list[DriftOutcome] = field(default_factory=list)
    no_accuracy_baseline: list[str] = field(default_factory=list)
    coverage: dict[str, Coverage] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)
    saved_busy: list[str] = field(default_factory=list)
    #: cases whose re-measures their bound stopped (case label -> what it says), for the run's busy line
    stopped: dict[str, str] = field(default_factory=dict)
    #: (source, saved_fingerprint) of each run --benchmark-compare loaded (pytest_benchmark_compare_machine_info)
    compared: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    imported: bool = False  # holds comparisons sent by xdist workers (suite/fleet/plugin.py)
    #: self-test knobs a plugin loaded with ``-p`` brings (tools/seeded_dup_conv.py): name -> what it does
    plugin_knobs: dict[str, Any] = field(default_factory=dict)
    _drift_seen: set[int] = field(default_factory=set)

    def finish(self, records: list[dict[str, Any]]) -> None:
        """Compare, for the tables only, the records whose test failed before reaching gate.check(). (Under
        xdist each worker does this before sending its comparisons; the controller's records are theirs.)"""
        if self.imported:
            return
        for record in records:
            if record.get("kind") in ("accuracy", "parity"):
                self.check_drift(record, "")

    def gated(self, which: str) -> int:
        """Cases the gate judged: compared and decided (busy, inconclusive and no-baseline are not)."""
        if which == "latency":
            return sum(1 for o in self.latency if STATE[o.status] != verdict.NOT_JUDGED)
        # A case may hold several records (a cell's generated:batches parity: one per batch): count the case once,
        # by its test and its label without the batch and seed (cell / dataset / output).
        return len({(o.nodeid, " / ".join(o.label.split(" / ")[:3])) for o in self.drift_results})

    def structure(self, engines: dict[str, dict[str, Any]],
                  records: list[dict[str, Any]] | None = None) -> dict[str, Any] | None:
        """Each engine's structural changes against the accuracy baseline's (metrics/structure.py), and for every case
        that moved (a latency regression or improvement, a record that drifted or moved) the change behind it, or that
        none was found. None without an accuracy baseline (the run file that records the engines' facts)."""
        if self.results_baseline is None:
            return None
        base = self.results_baseline.engines
        changes = structural_changes(base, engines)
        moved = [o.label for o in self.latency if o.status in ("regression", "improvement")]
        moved += [o.label.split(" / ")[0] for o in self.drift_results
                  if o.comparison.failed or o.comparison.changed]
        cells = sorted(set(base) | set(engines), key=len, reverse=True)
        explained = {}
        nodes_now, nodes_then = profiles_of(records or [], "node_times_us"), self.results_baseline.node_times
        kernels_now, kernels_then = profiles_of(records or [], "kernels"), self.results_baseline.kernels
        layers = {o.label.split(" / ")[0]: o.layers for o in reversed(self.drift_results) if o.layers}
        for label in dict.fromkeys(moved):
            cell = next((c for c in cells if label == c or label.startswith(c + "-")), label)
            explained[label] = explain(cell, changes, compared=cell in base and cell in engines)
            if label in layers:  # both runs localized the record (--localize)
                explained[label] += "; " + str(layers[label])
            if label in nodes_now and label in nodes_then:  # both runs profiled the case (--node-profile)
                explained[label] += "; " + explain_nodes(nodes_then[label], nodes_now[label])
            if label in kernels_now and label in kernels_then:  # both runs listed its kernels (--kernel-profile)
                explained[label] += "; " + explain_kernels(kernels_then[label], kernels_now[label])
        both = set(kernels_now) & set(kernels_then)
        return {"compared": len(set(base) & set(engines)), "changes": changes, "moved": explained,
                **({"kernels": {"profiled": len(both), "other_kernels": sorted(
                    c for c in both if not same_kernels(kernels_then[c], kernels_now[c]))}} if both else {})}

    def as_dict(self, engines: dict[str, dict[str, Any]] | None = None,
                records: list[dict[str, Any]] | None = None) -> dict[str, Any]:
        """Plain data for the HTML report; ``engines`` (this run's engine facts) adds the structural comparison."""
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
                         "attempts": o.attempts, **({"clocks": o.clocks} if o.clocks else {}),
                         **({"other_host": h} if (h := self.other_host(o.label)) else {}),
                         **({} if o.comparison is None else o.comparison.as_dict())} for o in self.latency],
            "groups": [{"group": list(g.group), "cases": g.cases, "nights": g.nights, "change_pct": g.change_pct,
                        "verdict": g.verdict, "line": g.explain()} for g in self.groups],
            "other_hosts": dict(zip(("cases", "compared", "hosts"), self.other_hosts(), strict=True)),
            "drift": [{"label": o.label, **o.comparison.as_dict(), **({"layers": o.layers} if o.layers else {})}
                      for o in self.drift_results],
            "no_accuracy_baseline": list(self.no_accuracy_baseline),
            "coverage": coverage,
            "warnings": list(self.warnings) + self.saved_busy_warning(),
            "injected": {"slowdown": self.inject_slowdown, "accuracy_drop": self.inject_accuracy_drop},
            "structure": None if engines is None else self.structure(engines, records),
        }

    def export_outcomes(self) -> dict[str, Any]:
        """This process's comparisons as plain data, for the controller of an xdist run (suite/fleet/plugin.py)."""
        return {"latency": [{**{k: v for k, v in vars(o).items() if k != "comparison"},
                             "comparison": None if o.comparison is None else dataclasses.asdict(o.comparison)}
                            for o in self.latency],
                "drift": [{"label": o.label, "nodeid": o.nodeid, "kind": o.comparison.kind,
                           "figures": [f.as_dict() for f in o.comparison.figures], "notes": list(o.comparison.notes),
                           "layers": o.layers} for o in self.drift_results],
                "no_accuracy_baseline": list(self.no_accuracy_baseline), "saved_busy": list(self.saved_busy),
                "stopped": dict(self.stopped)}

    def import_outcomes(self, data: dict[str, Any]) -> None:
        """Add a worker's comparisons (``export_outcomes``) to this process's tables."""
        self.imported = True
        for o in data.get("latency", []):
            comparison = None if o["comparison"] is None else LatencyComparison(**o["comparison"])
            self.latency.append(LatencyOutcome(**{**o, "comparison": comparison}))
        for d in data.get("drift", []):
            figures = tuple(DriftFigure(**f) for f in d["figures"])
            self.drift_results.append(DriftOutcome(d["label"], d["nodeid"],
                                                   DriftComparison(d["kind"], figures, tuple(d["notes"])),
                                                   d.get("layers")))
        self.no_accuracy_baseline.extend(data.get("no_accuracy_baseline", []))
        self.saved_busy.extend(data.get("saved_busy", []))
        self.stopped.update(data.get("stopped", {}))

    def baseline_fingerprints(self) -> list[tuple[str, dict[str, Any]]]:
        """(source, saved fingerprint) of every baseline run this run is compared with, latency runs oldest first:
        the baseline side of the difference that opens the report (suite/gate/baseline_environment.py)."""
        runs: list[tuple[str, dict[str, Any]]] = []
        if self.latency_baseline is not None:
            base = self.latency_baseline
            runs += [(str(s), f or {}) for s, f in itertools.zip_longest(base.sources, base.fingerprints)]
        runs += self.compared
        if self.results_baseline is not None:
            runs.append((str(self.results_baseline.source), self.results_baseline.fingerprint))
        return runs

    def saved_busy_warning(self) -> list[str]:
        if not self.saved_busy:
            return []
        return [f"{len(self.saved_busy)} case(s) were saved to the baseline while other processes used more than "
                f"{self.busy_limit * 100:g}% of the CPUs ({', '.join(self.saved_busy[:4])}"
                + (" ..." if len(self.saved_busy) > 4 else "") + "): as a baseline they cannot judge a later run "
                "except a regression; save the baseline again on a quiet machine"]


def gate_of(config: pytest.Config) -> Gate | None:
    return config.stash.get(GATE_KEY, None)


def gate_from_options(config: pytest.Config) -> Gate:
    """The run's Gate, from its options and the baselines they name; a bad option or baseline is a
    usage error."""
    given = options_of(config)
    try:
        inject_slow, inject_drop = given.inject_slowdown, given.inject_accuracy_drop
        gate = Gate(
            max_slowdown=parse_fraction(given.latency_regression, "--latency-regression"),
            confidence=parse_fraction(given.latency_confidence, "--latency-confidence"),
            busy_limit=parse_fraction(given.latency_busy_limit, "--latency-busy-limit"),
            drift=parse_drift(given.accuracy_drift),
            inject_slowdown=None if inject_slow is None else parse_fraction(inject_slow, "--inject-slowdown"),
            inject_accuracy_drop=None if inject_drop is None else parse_fraction(inject_drop, "--inject-accuracy-drop"),
            environment=fingerprint(given.device), busy_retries=int(given.latency_busy_retries),
            case_bound=_case_bound(given.latency_case_bound), benchmark_compares=bool(given.benchmark_compare_fail),
        )
        if not (0.0 < gate.max_slowdown < 10.0):
            raise BaselineError("--latency-regression must be above 0%")
        if not (0.5 <= gate.confidence < 1.0):
            raise BaselineError("--latency-confidence must be in [50%, 100%)")
        if not (0.0 <= gate.busy_limit <= 1.0):  # a share of the CPUs: above 100 % would silently judge every case
            raise BaselineError(f"--latency-busy-limit {given.latency_busy_limit}: a share of the "
                                "CPUs must be in [0%, 100%] (100% judges every case)")
        if gate.busy_retries < 0:
            raise BaselineError("--latency-busy-retries must be >= 0")
        accept_incomplete = bool(given.accept_incomplete_baseline)
        spec = given.latency_baseline
        if spec:
            storage = benchmark_storage_dir(given.benchmark_storage)
            paths = resolve_latency_baselines(spec, storage)
            gate.latency_baseline = load_latency_baselines(paths, accept_incomplete)
            gate.noise = bound.class_noise(gate.latency_baseline, gate.confidence)
            gate.warnings.extend(runs_shortfall(spec, len(paths), gate.confidence))
        spec = given.accuracy_baseline
        if spec:
            gate.results_baseline = load_results_baseline(Path(spec), accept_incomplete)
    except BaselineError as exc:
        raise pytest.UsageError(str(exc)) from exc
    return gate


def _case_bound(text: str) -> float:
    try:
        return parse_factor(text)
    except ValueError as exc:
        raise BaselineError(f"--latency-case-bound {exc}") from exc


def self_test_knobs(config: pytest.Config) -> dict[str, Any]:
    """The self-test knobs this run is made with, by option, and those a self-test plugin recorded
    (``Gate.plugin_knobs``): written into every file the run saves (results, pytest-benchmark's JSON and storage),
    where suite.gate.baselines refuses such a file as a baseline."""
    gate = gate_of(config)
    if gate is None:
        return {}
    knobs = {"--inject-slowdown": gate.inject_slowdown, "--inject-accuracy-drop": gate.inject_accuracy_drop,
             **gate.plugin_knobs}
    return {k: v for k, v in knobs.items() if v}


def set_coverage(config: pytest.Config, nodeids: list[str]) -> None:
    """Called once the run's test ids are known (suite/hooks/startup_check.py note_collected)."""
    benchmark_compare_coverage(config, nodeids)
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

"""The drift gate: a run's accuracy and parity records, and each cell's peak GPU memory, against the same records
of a --suite-results baseline (``--accuracy-baseline``), within ``--accuracy-drift``'s tolerances."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from metrics.drift import (
    DriftComparison,
    DriftTolerances,
    compare_accuracy,
    compare_memory,
    compare_parity,
    has_memory_figure,
)
from metrics.layer_drift import explain_layers
from suite import verdict
from suite.gate.baselines import record_key
from suite.gate.environment import BaselineEnvironment


@dataclass
class DriftOutcome:
    label: str
    nodeid: str
    comparison: DriftComparison
    layers: str | None = None  # where the move began: the localizer's tables of both runs joined (--localize)


class DriftChecks(BaselineEnvironment):
    """The drift half of the Gate (suite/gate/state.py): compares a record and keeps its outcome. The fields are
    the Gate's."""

    drift: DriftTolerances
    drift_results: list[DriftOutcome]
    no_accuracy_baseline: list[str]
    _drift_seen: set[int]

    # ---- peak GPU memory ---------------------------------------------------------------------------
    def check_memory(self, record: dict[str, Any]) -> tuple[verdict.Component | None, str | None]:
        """A cell's GPU memory (suite/lifetime.py; what it added over its window's start, metrics.drift
        MEMORY_FIGURES) against the accuracy baseline's record of the same cell; a failure message where it grew
        beyond ``--accuracy-drift memory=``. Without an accuracy baseline, nothing (None). A cell either side has no
        figure for is not judged for memory, and says which side: no-baseline (the baseline has no record of the
        cell, or one without a figure: a baseline from before the figure existed), unavailable (this run measured
        none). It was skipped without a word (issue 43). A CPU run makes no such record (suite/lifetime.py)."""
        if self.results_baseline is None or record.get("kind") != "gpu_memory":
            return None, None
        label = f"gpu memory drift gate {record.get('cell')}"
        baseline = self.results_baseline.gpu_memory.get(str(record.get("cell")))
        comparisons = compare_memory(baseline, record, self.drift.memory_factor) if baseline else []
        if not comparisons:
            if not has_memory_figure(record):
                return verdict.Component(label, verdict.NOT_JUDGED, "unavailable",
                                         "this run measured no GPU memory figure for the cell (NVML and torch's "
                                         "allocator gave none)"), None
            why = "no GPU memory record of the cell" if baseline is None else "no GPU memory figure of the cell"
            return verdict.Component(label, verdict.NOT_JUDGED, "no-baseline", f"the accuracy baseline has {why}"), None
        grew = [c for c in comparisons if c.failed]
        figures = "; ".join(c.describe() for c in comparisons)
        component = verdict.Component(label, verdict.FAILED if grew else verdict.PASSED, None, figures)
        if not grew:
            return component, None
        return component, (f"{record.get('cell')}: GPU memory grew: {'; '.join(c.describe() for c in grew)}"
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
        layers = _layers_note(baseline, record) if comparison.failed or comparison.changed else None
        self.drift_results.append(DriftOutcome(label, nodeid, comparison, layers))
        figures = "; ".join(f.describe() for f in comparison.figures)
        component = verdict.Component(f"{key[0]} drift gate {label}",
                                      verdict.FAILED if comparison.failed else verdict.PASSED, None, figures)
        if comparison.failed:
            return component, (f"{label}: {comparison.explain()}" + (f"; {layers}" if layers else "")
                               + self._env_note("accuracy"))
        return component, None


def _layers_note(baseline: dict[str, Any], record: dict[str, Any]) -> str | None:
    """Both runs localized this record (--localize): where, layer by layer, its error against the reference moved
    between them (metrics/layer_drift.py). None where either has no per-layer table."""
    tables = [((r.get("localization") or {}).get("layers")) for r in (baseline, record)]
    if not all(isinstance(t, list) and t for t in tables):
        return None
    return explain_layers(tables[0], tables[1])

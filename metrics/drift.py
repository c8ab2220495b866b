"""Accuracy, parity and peak GPU memory drift against a baseline: tolerances, not statistics.

Why a module of its own: the same engine on the same data is deterministic, so these need no
statistics, only tolerances: ``compare_accuracy`` (top-1/top-5 drop in points), ``compare_parity``
(isclose % drop in points, MAE growth) and ``compare_memory`` (a cell's GPU memory, what it added or its peak,
growing beyond a factor and a slack). The latency gate, which does need statistics, is metrics/regression.py.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

__all__ = [
    "DriftComparison",
    "DriftFigure",
    "DriftTolerances",
    "MemoryComparison",
    "compare_accuracy",
    "compare_memory",
    "has_memory_figure",
    "compare_parity",
]


@dataclass(frozen=True)
class DriftFigure:
    """One figure against its baseline: ``limit`` is the worst allowed current value (None: not gated)."""

    name: str
    baseline: float | None
    current: float | None
    limit: float | None
    unit: str
    failed: bool

    def describe(self) -> str:
        if self.baseline is None or self.current is None:
            return f"{self.name}: baseline {_num(self.baseline, self.unit)}, current {_num(self.current, self.unit)}"
        text = (f"{self.name} {_num(self.baseline, self.unit)} -> {_num(self.current, self.unit)} "
                f"({_delta(self.current - self.baseline, self.unit)})")
        if self.limit is not None:
            text += f", limit {_num(self.limit, self.unit)}"
        return text + (" FAILED" if self.failed else "")

    def as_dict(self) -> dict[str, Any]:
        return {"name": self.name, "baseline": self.baseline, "current": self.current, "limit": self.limit,
                "unit": self.unit, "failed": self.failed}


@dataclass(frozen=True)
class DriftComparison:
    """Accuracy or parity figures of one cell (and output) against the same cell in the baseline."""

    kind: str
    figures: tuple[DriftFigure, ...]
    notes: tuple[str, ...] = ()

    @property
    def failures(self) -> tuple[DriftFigure, ...]:
        return tuple(f for f in self.figures if f.failed)

    @property
    def failed(self) -> bool:
        return bool(self.failures)

    @property
    def changed(self) -> bool:
        """Any figure moved at all (reported in 'changed since baseline' even when within tolerance)."""
        return any(f.baseline is not None and f.current is not None and f.baseline != f.current
                   for f in self.figures)

    def explain(self) -> str:
        head = f"{self.kind} drift against the baseline: {'FAILED' if self.failed else 'within tolerance'}"
        lines = [head] + [f"  {f.describe()}" for f in self.figures] + [f"  note: {n}" for n in self.notes]
        return "\n".join(lines)

    def as_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "failed": self.failed, "figures": [f.as_dict() for f in self.figures],
                "notes": list(self.notes)}


@dataclass(frozen=True)
class DriftTolerances:
    """``--accuracy-drift``: allowed change against the baseline, per figure (the option's value, here below both
    suite/options.py, whose default it is, and the gate that parses and applies it: suite/gate/baselines.py)."""

    top1_pts: float = 0.5
    top5_pts: float = 0.5
    isclose_pts: float = 1.0
    mae_factor: float = 2.0
    #: a cell's GPU memory may grow by this factor, and by MEMORY_SLACK_MIB at least, before it drifted
    memory_factor: float = 1.5

    def describe(self) -> str:
        return (f"top1={self.top1_pts:g}pt,top5={self.top5_pts:g}pt,isclose={self.isclose_pts:g}pt,"
                f"mae={self.mae_factor:g}x,memory={self.memory_factor:g}x")


def compare_accuracy(
    baseline: Mapping[str, Any],
    current: Mapping[str, Any],
    max_top1_drop: float = 0.005,
    max_top5_drop: float = 0.005,
) -> DriftComparison:
    """Top-1/top-5 (fractions, as in AccuracyVerdict.as_dict) against the baseline's: fail on a drop
    larger than the tolerance (fractions: 0.005 = half a point). A figure absent on either side is
    listed, not gated. A different row count is noted: the figures are then not like for like."""
    figures = []
    for key, label, tol in (("top1", "top-1", max_top1_drop), ("top5", "top-5", max_top5_drop)):
        base, cur = _opt_float(baseline.get(key)), _opt_float(current.get(key))
        limit = None if base is None else base - tol
        failed = base is not None and cur is not None and not (cur >= base - tol - _EPS)
        figures.append(DriftFigure(label, base, cur, limit, "pct", failed))
    return DriftComparison("accuracy", tuple(figures), _row_notes(baseline, current))


def compare_parity(
    baseline: Mapping[str, Any],
    current: Mapping[str, Any],
    max_isclose_drop: float = 1.0,
    max_mae_factor: float = 2.0,
    mae_floor: float | None = None,
) -> DriftComparison:
    """isclose % (points) and MAE against the baseline's (ParityReport.as_dict records).

    MAE fails when it grows by more than ``max_mae_factor`` times AND by more than ``mae_floor``
    (default: the record's own atol), so that 1e-8 -> 3e-8 at fp32 is not a failure while a real
    loss of precision is. A NaN/None figure in the current run when the baseline had a number fails.
    """
    if max_mae_factor < 1.0:
        raise ValueError(f"max_mae_factor must be >= 1, got {max_mae_factor!r}")
    base_iso, cur_iso = _opt_float(baseline.get("isclose_pct")), _opt_float(current.get("isclose_pct"))
    iso_limit = None if base_iso is None else base_iso - max_isclose_drop
    iso_failed = base_iso is not None and (cur_iso is None or not (cur_iso >= base_iso - max_isclose_drop - _EPS))
    base_mae, cur_mae = _opt_float(baseline.get("mae")), _opt_float(current.get("mae"))
    floor = mae_floor
    if floor is None:
        tol = current.get("tolerance") or {}
        floor = float(tol.get("atol", 0.0)) if isinstance(tol, Mapping) else 0.0
    mae_limit = None if base_mae is None else max(base_mae * max_mae_factor, base_mae + floor)
    mae_failed = mae_limit is not None and (cur_mae is None or not (cur_mae <= mae_limit * (1 + 1e-12)))
    figures = (DriftFigure("isclose", base_iso, cur_iso, iso_limit, "pct_points", iso_failed),
               DriftFigure("MAE", base_mae, cur_mae, mae_limit, "abs", mae_failed))
    return DriftComparison("parity", figures, _row_notes(baseline, current, key="n_elements"))


_EPS = 1e-12


def _opt_float(v: Any) -> float | None:
    if v is None:
        return None
    f = float(v)
    return f if math.isfinite(f) else None


def _row_notes(baseline: Mapping[str, Any], current: Mapping[str, Any], key: str = "n") -> tuple[str, ...]:
    nb, nc = baseline.get(key), current.get(key)
    if nb is not None and nc is not None and nb != nc:
        return (f"{key} differs (baseline {nb}, current {nc}): the data set changed, figures are not like for like",)
    return ()


def _num(v: float | None, unit: str) -> str:
    if v is None:
        return "-"
    if unit == "pct":
        return f"{v * 100:.2f}%"
    if unit == "pct_points":
        return f"{v:.2f}%"
    return f"{v:.3g}"


def _delta(d: float, unit: str) -> str:
    if unit == "pct":
        return f"{d * 100:+.2f} pt"
    if unit == "pct_points":
        return f"{d:+.2f} pt"
    return f"{d:+.3g}"


#: A GPU memory figure must grow by more than this, besides the factor, to have drifted: what a cell's figure holds
#: or not by where it ran, not by what it is. The figures are what the cell added over its window's start (the CUDA
#: context and the cells before it are not in them); what remains is whether the cell is the first to run cuBLAS and
#: cuBLASLt on its stream (a CUDA-graph capture runs on a stream of its own), which then allocate a workspace each:
#: 32 MiB on Hopper, NVIDIA's recommended size (cublasSetWorkspace), 64 MiB together. It was 256 MiB (the CUDA
#: context's size, from when the figures were peaks), under which a cell adding 100 MiB could add 350 (issue 43).
MEMORY_SLACK_MIB = 64.0


@dataclass(frozen=True)
class MemoryComparison:
    """One cell's GPU memory figure (MiB) against its baseline's: ``failed`` when it grew beyond ``factor``
    times the baseline and by more than ``MEMORY_SLACK_MIB``."""

    figure: str
    baseline_mib: float
    current_mib: float
    factor: float
    #: why the figure is shown but not judged (None: judged); see ``compare_memory``
    unjudged: str | None = None

    @property
    def ratio(self) -> float:
        return self.current_mib / self.baseline_mib if self.baseline_mib > 0 else math.inf

    @property
    def failed(self) -> bool:
        return self.unjudged is None and memory_grew(self.baseline_mib, self.current_mib, self.factor)

    def describe(self) -> str:
        if self.unjudged is not None:
            return (f"{self.figure} {self.baseline_mib:.0f} -> {self.current_mib:.0f} MiB ({self.ratio:.2f}x; "
                    f"not judged: {self.unjudged})")
        return (f"{self.figure} {self.baseline_mib:.0f} -> {self.current_mib:.0f} MiB ({self.ratio:.2f}x; "
                f"allowed {self.factor:g}x and +{MEMORY_SLACK_MIB:.0f} MiB)")


def memory_grew(baseline_mib: float, current_mib: float, factor: float) -> bool:
    """The memory gate's rule, a function of its own so that tools/mutation.sh mutates it (mutmut leaves a
    property alone): beyond ``factor`` times the baseline and by more than ``MEMORY_SLACK_MIB``."""
    return current_mib > baseline_mib * factor and current_mib - baseline_mib > MEMORY_SLACK_MIB


#: The figures compared, NVML's and the allocator's, each by what the cell added over its window's start where
#: both records have it, else by its peak (a baseline from before the added figures existed). A peak also counts
#: what the process still held from before the cell (the model's reference engine, the cells before it, in an
#: order that changes from night to night): between two identical one-GPU runs on an H200 (docs/gpu.md, the
#: thirteenth sitting) 3 and 18 of 51 cells' peaks moved beyond 1.5x, with the cells in another order.
MEMORY_FIGURES: tuple[tuple[str, str], ...] = (("nvml_added_mib", "nvml_peak_mib"),
                                               ("allocator_added_mib", "allocator_peak_mib"))


#: Engines whose device memory is torch's caching allocator's: their cells take what they need from the blocks the
#: process already holds before NVML sees any growth, so NVML's figure for them is shown, not judged, where the
#: allocator's own figure is judged on both sides. On one H200 (2026-11-29, four unchanged one-GPU nights)
#: resnet18-torch-fp16's NVML figure read 2880, 4, 2638 and 4 MiB added, the allocator's 1196, 1151, 1196 and 1151.
ALLOCATOR_ENGINES = frozenset({"torch", "inductor"})
ALLOCATOR_HELD = ("torch's caching allocator serves this engine from blocks the process already held, so what NVML "
                  "sees it add depends on the cells before it; the allocator's figure is judged")


def compare_memory(baseline: Mapping[str, Any], current: Mapping[str, Any], factor: float) -> list[MemoryComparison]:
    """Each figure both records have (MEMORY_FIGURES: NVML's and the allocator's; what the cell added where both
    have it, else the peak), compared; NVML's shown but not judged for an engine of ALLOCATOR_ENGINES (the current
    record's ``engine``) where the allocator's figure is compared too."""
    out = []
    for figures in MEMORY_FIGURES:
        for figure in figures:
            base, now = _mib(baseline, figure), _mib(current, figure)
            if base is not None and now is not None:
                out.append(MemoryComparison(figure, base, now, factor))
                break
    allocator = any(c.figure.startswith("allocator_") for c in out)
    if allocator and current.get("engine") in ALLOCATOR_ENGINES:
        out = [replace(c, unjudged=ALLOCATOR_HELD) if c.figure.startswith("nvml_") else c for c in out]
    return out


def has_memory_figure(record: Mapping[str, Any]) -> bool:
    """Whether the record holds any GPU memory figure (MEMORY_FIGURES) at all."""
    return any(_mib(record, figure) is not None for figures in MEMORY_FIGURES for figure in figures)


def _mib(record: Mapping[str, Any], figure: str) -> float | None:
    value = record.get(figure)
    return float(value) if isinstance(value, int | float) and math.isfinite(value) else None

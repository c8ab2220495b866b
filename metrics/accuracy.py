"""Task accuracy (top-k against labels) and the accuracy-drop verdict.

Parity checks compare engine and reference outputs; these check what users
care about in the end: does the engine still classify as well as the
reference (absolute floor, absolute drop, or the MLPerf-style ratio rule).

Tie rule (used everywhere here): classes are ranked by a stable descending
sort of the logits, so among equal logits the lower class index ranks first,
the same choice ``np.argmax`` makes. A label is in the top-k when its rank is
< k. Rows containing any NaN/Inf are always counted as wrong.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

__all__ = [
    "AccuracyThreshold",
    "AccuracyVerdict",
    "judge_accuracy",
    "topk_accuracy",
    "topk_correct",
]

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]
BoolArray = npt.NDArray[np.bool_]

#: Slack on drop/ratio comparisons so that float rounding of k/n fractions
#: (e.g. 0.76 - 0.755 = 0.005000000000000004) cannot flip a verdict.
_EPS = 1e-12


def topk_correct(logits: npt.ArrayLike, labels: npt.ArrayLike, k: int) -> BoolArray:
    """Per-row: is the label among the k highest logits (k capped at #classes)?

    Raises ValueError unless logits are 2-D non-empty, labels are 1-D
    integers of the same length, and every label is a valid class index.
    """
    kk = _positive_int(k, "k")
    x, y = _validate(logits, labels, "logits")
    rank, finite = _label_rank(x, y)
    return np.asarray((rank < min(kk, x.shape[1])) & finite, dtype=np.bool_)


def topk_accuracy(logits: npt.ArrayLike, labels: npt.ArrayLike, ks: Sequence[int] = (1, 5)) -> dict[int, float]:
    """Fraction (0..1) of rows whose label is in the top-k, for each requested k.

    Keys are the requested ks; each k is capped at the number of classes.
    """
    if len(ks) == 0:
        raise ValueError("ks must not be empty")
    kk = [_positive_int(k, "k") for k in ks]
    x, y = _validate(logits, labels, "logits")
    rank, finite = _label_rank(x, y)
    return {k: _fraction(rank, finite, min(k, x.shape[1])) for k in kk}


@dataclass(frozen=True)
class AccuracyThreshold:
    """Accuracy requirements; ``None`` disables a check. All values are fractions.

    ``min_top1`` / ``min_top5`` are absolute floors on the engine's own
    accuracy; ``max_top1_drop`` / ``max_top5_drop`` are absolute drops from the
    reference (0.005 = half a percentage point); ``min_top1_ratio`` is the
    MLPerf rule ``engine_top1 >= ratio * reference_top1`` (e.g. 0.99).
    """

    min_top1: float | None = None
    max_top1_drop: float | None = None
    min_top1_ratio: float | None = None
    max_top5_drop: float | None = None
    min_top5: float | None = None

    def __post_init__(self) -> None:
        for name in ("min_top1", "min_top5", "max_top1_drop", "max_top5_drop"):
            v = getattr(self, name)
            if v is not None and not (0.0 <= v <= 1.0):
                raise ValueError(f"{name} must be a fraction in [0, 1], got {v!r}")
        if self.min_top1_ratio is not None and not (0.0 < self.min_top1_ratio <= 1.0):
            raise ValueError(f"min_top1_ratio must be in (0, 1], got {self.min_top1_ratio!r}")

    @property
    def needs_reference(self) -> bool:
        """True when some check is relative to the reference accuracy."""
        return any(v is not None for v in (self.max_top1_drop, self.min_top1_ratio, self.max_top5_drop))

    def as_dict(self) -> dict[str, object]:
        """Plain dict for JSON reports."""
        return dict(asdict(self))


@dataclass(frozen=True)
class AccuracyVerdict:
    """Measured accuracies (fractions 0..1), the thresholds and what failed.

    ``ref_top1``/``ref_top5`` are None when no reference logits were given.
    ``top5`` is top-min(5, classes).
    """

    top1: float
    top5: float
    ref_top1: float | None
    ref_top5: float | None
    n: int
    failures: tuple[str, ...]
    nonfinite_rows: int = 0
    ref_nonfinite_rows: int = 0
    threshold: AccuracyThreshold = field(default_factory=AccuracyThreshold)

    @property
    def passed(self) -> bool:
        """True when no check failed."""
        return not self.failures

    def explain(self) -> str:
        """Multi-line message with all accuracies and thresholds (pytest assert message)."""
        th = self.threshold
        verdict = "; ".join(self.failures) if self.failures else "passed"
        lines = [f"accuracy over n={self.n}: {verdict}"]
        lines.append(
            f"  top-1 {_pct(self.top1)} (reference {_pct_opt(self.ref_top1)}); "
            f"top-5 {_pct(self.top5)} (reference {_pct_opt(self.ref_top5)})"
        )
        parts = [
            f"min top-1 {_pct_opt(th.min_top1)}",
            f"max top-1 drop {_pts_opt(th.max_top1_drop)}",
            f"min top-1 ratio {'-' if th.min_top1_ratio is None else f'{th.min_top1_ratio:g}'}",
            f"max top-5 drop {_pts_opt(th.max_top5_drop)}",
            f"min top-5 {_pct_opt(th.min_top5)}",
        ]
        lines.append("  thresholds: " + ", ".join(parts))
        lines.append(
            f"  rows with NaN/Inf (counted wrong): engine {self.nonfinite_rows}, reference {self.ref_nonfinite_rows}"
        )
        return "\n".join(lines)

    def as_dict(self) -> dict[str, object]:
        """JSON-serialisable dict."""
        return {
            "top1": self.top1,
            "top5": self.top5,
            "ref_top1": self.ref_top1,
            "ref_top5": self.ref_top5,
            "n": self.n,
            "nonfinite_rows": self.nonfinite_rows,
            "ref_nonfinite_rows": self.ref_nonfinite_rows,
            "threshold": self.threshold.as_dict(),
            "failures": list(self.failures),
            "passed": self.passed,
        }


def judge_accuracy(
    logits: npt.ArrayLike,
    labels: npt.ArrayLike,
    ref_logits: npt.ArrayLike | None,
    threshold: AccuracyThreshold,
) -> AccuracyVerdict:
    """Measure engine (and reference) top-1/top-5 and apply ``threshold``.

    ``ref_logits`` may be None only when no relative check is set. Any
    NaN/Inf row, in engine or reference logits, is a failure of its own.
    """
    x, y = _validate(logits, labels, "logits")
    n, n_cls = x.shape
    k5 = min(5, n_cls)
    rank, finite = _label_rank(x, y)
    top1, top5 = _fraction(rank, finite, 1), _fraction(rank, finite, k5)
    nonfinite_rows = int(n - np.count_nonzero(finite))

    ref_top1: float | None = None
    ref_top5: float | None = None
    ref_nonfinite_rows = 0
    if ref_logits is not None:
        rx, _ = _validate(ref_logits, labels, "ref_logits")
        if rx.shape != x.shape:
            raise ValueError(f"shape mismatch: engine logits {x.shape} vs reference logits {rx.shape}")
        rrank, rfinite = _label_rank(rx, y)
        ref_top1, ref_top5 = _fraction(rrank, rfinite, 1), _fraction(rrank, rfinite, k5)
        ref_nonfinite_rows = int(n - np.count_nonzero(rfinite))
    elif threshold.needs_reference:
        raise ValueError("threshold has relative checks but ref_logits is None")

    failures: list[str] = []
    if nonfinite_rows:
        failures.append(f"engine logits have {nonfinite_rows} rows with NaN/Inf (counted wrong)")
    if ref_nonfinite_rows:
        failures.append(f"reference logits have {ref_nonfinite_rows} rows with NaN/Inf (counted wrong)")
    if threshold.min_top1 is not None and not (top1 >= threshold.min_top1 - _EPS):
        failures.append(f"top-1 {_pct(top1)} < {_pct(threshold.min_top1)} required")
    if threshold.min_top5 is not None and not (top5 >= threshold.min_top5 - _EPS):
        failures.append(f"top-5 {_pct(top5)} < {_pct(threshold.min_top5)} required")
    if ref_top1 is not None and threshold.max_top1_drop is not None:
        drop = ref_top1 - top1
        if not (drop <= threshold.max_top1_drop + _EPS):
            failures.append(
                f"top-1 drop {_pts(drop)} (reference {_pct(ref_top1)} -> engine "
                f"{_pct(top1)}) > {_pts(threshold.max_top1_drop)} allowed"
            )
    if ref_top1 is not None and threshold.min_top1_ratio is not None:
        need = threshold.min_top1_ratio * ref_top1
        if not (top1 >= need - _EPS):
            failures.append(
                f"top-1 {_pct(top1)} < {threshold.min_top1_ratio:g} x reference "
                f"{_pct(ref_top1)} = {_pct(need)} required"
            )
    if ref_top5 is not None and threshold.max_top5_drop is not None:
        drop5 = ref_top5 - top5
        if not (drop5 <= threshold.max_top5_drop + _EPS):
            failures.append(
                f"top-5 drop {_pts(drop5)} (reference {_pct(ref_top5)} -> engine "
                f"{_pct(top5)}) > {_pts(threshold.max_top5_drop)} allowed"
            )

    return AccuracyVerdict(
        top1=top1,
        top5=top5,
        ref_top1=ref_top1,
        ref_top5=ref_top5,
        n=int(n),
        failures=tuple(failures),
        nonfinite_rows=nonfinite_rows,
        ref_nonfinite_rows=ref_nonfinite_rows,
        threshold=threshold,
    )


# --------------------------------------------------------------------------- helpers


def _positive_int(k: Any, what: str) -> int:
    if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or k < 1:
        raise ValueError(f"{what} must be an int >= 1, got {k!r}")
    return int(k)


def _validate(logits: npt.ArrayLike, labels: npt.ArrayLike, what: str) -> tuple[FloatArray, IntArray]:
    x = np.asarray(logits)
    if x.ndim != 2:
        raise ValueError(f"{what} must be 2-D (rows, classes), got shape {x.shape}")
    if x.shape[0] == 0 or x.shape[1] == 0:
        raise ValueError(f"{what} is empty: shape {x.shape}")
    if np.iscomplexobj(x):
        raise ValueError(f"{what}: complex dtype {x.dtype} is not supported")
    y = np.asarray(labels)
    if y.ndim != 1:
        raise ValueError(f"labels must be 1-D, got shape {y.shape}")
    if y.shape[0] != x.shape[0]:
        raise ValueError(f"{what} has {x.shape[0]} rows but labels has {y.shape[0]} entries")
    if y.dtype.kind not in "iu":
        raise ValueError(f"labels must be integers, got dtype {y.dtype}")
    bad = (y < 0) | (y >= x.shape[1])
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        raise ValueError(
            f"{int(np.count_nonzero(bad))} labels out of range [0, {x.shape[1]}), first at row {i}: {int(y[i])}"
        )
    return x.astype(np.float64), y.astype(np.int64)


def _label_rank(x: FloatArray, y: IntArray) -> tuple[IntArray, BoolArray]:
    """0-based rank of each row's label under the stable descending order, and row finiteness.

    rank = #classes with a larger logit + #lower-index classes with an equal one.
    """
    rows = np.arange(x.shape[0])
    lab = x[rows, y][:, None]
    greater = np.count_nonzero(x > lab, axis=1)
    tie_before = np.count_nonzero((x == lab) & (np.arange(x.shape[1])[None, :] < y[:, None]), axis=1)
    finite: BoolArray = np.asarray(np.isfinite(x).all(axis=1), dtype=np.bool_)
    rank: IntArray = np.asarray(greater + tie_before, dtype=np.int64)
    return rank, finite


def _fraction(rank: IntArray, finite: BoolArray, k: int) -> float:
    return int(np.count_nonzero((rank < k) & finite)) / int(rank.shape[0])


def _pct(x: float) -> str:
    return "n/a" if math.isnan(x) else f"{100.0 * x:.2f}%"


def _pct_opt(x: float | None) -> str:
    return "-" if x is None else _pct(x)


def _pts(x: float) -> str:
    return f"{100.0 * x:.2f} pts"


def _pts_opt(x: float | None) -> str:
    return "-" if x is None else _pts(x)

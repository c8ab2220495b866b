"""What a parity comparison reports: the tolerance it is judged against, its figures, and how it reads.

Why a module of its own: the report is what everything above reads (the test's failure message, the
--suite-results record, the drift gate, the known failures that name its figures), while the
comparator (metrics/parity.py) is what computes it; the names of the figures (``PARITY_METRICS``)
and of the failures (``failed_metric``) are the report's vocabulary, shared by both.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

__all__ = [
    "NONFINITE",
    "PARITY_METRICS",
    "ParityReport",
    "RankStat",
    "Tolerance",
]

#: The figures a parity check judges, named as in ``ParityReport`` and its ``as_dict``: what a failure says
#: failed, and what a known failure may declare (suite/config/known_failures.py). NaN/Inf is no figure
#: (``NONFINITE``): nothing may excuse it.
PARITY_METRICS: tuple[str, ...] = ("isclose_pct", "max_abs_error", "cosine", "top1_agreement_pct",
                                   "worst_row_cosine", "retrieval_agreement_pct", "exact_match_pct",
                                   "worst_row_rel_error")
NONFINITE = "nonfinite"
#: How each entry of ``ParityReport.failures`` starts (metrics/parity.py's compare_arrays writes them), and the
#: figure it is about.
_FAILURE_STARTS: tuple[tuple[str, str], ...] = (
    ("reference has ", NONFINITE),
    ("engine output has ", NONFINITE),
    ("isclose ", "isclose_pct"),
    ("max abs error ", "max_abs_error"),
    ("cosine ", "cosine"),
    ("top-1 agreement ", "top1_agreement_pct"),
    ("worst row cosine ", "worst_row_cosine"),
    ("retrieval agreement ", "retrieval_agreement_pct"),
    ("exact match ", "exact_match_pct"),
    ("worst row relative error ", "worst_row_rel_error"),
)


def failed_metric(failure: str) -> str | None:
    """The figure one entry of ``ParityReport.failures`` is about (one of PARITY_METRICS, or NONFINITE); None
    for text compare_arrays does not write."""
    return next((metric for start, metric in _FAILURE_STARTS if failure.startswith(start)), None)


@dataclass(frozen=True)
class Tolerance:
    """Pass/fail thresholds for one output; ``None`` disables an optional check.

    ``min_top1_agreement_pct`` is only applied to 2-D ``(batch, classes)``
    outputs with at least two columns, where "top-1" is meaningful.
    ``min_row_cosine`` bounds the worst row's cosine (outputs of 2 or more
    dimensions; a global cosine dilutes one bad row among many good ones).
    ``min_retrieval_agreement_pct`` marks a 2-D output as an embedding
    ``(rows, dims)``: the rows' k nearest neighbours (metrics.embedding) must
    agree this much with the reference's; an embedding's largest coordinate
    is no decision, so top-1/top-k agreement and the rank table are not
    computed for it.
    ``max_row_rel_error`` bounds the worst row's relative error, ``|t - r| /
    |r|`` over the row (L2 norms, the denominator at least atol per element):
    scaling one row by 1.05 keeps its direction (its cosine) and, among many
    rows, the isclose %, but not this figure.
    Integer and boolean outputs (the reference's dtype) are compared exactly
    (``exact_match_pct`` must be 100): rtol x a token id of 30000 would let
    every row be one id off. ``approximate_outputs`` names the outputs of those
    kinds to compare within rtol/atol instead, as floats are.
    """

    rtol: float = 1e-3
    atol: float = 1e-5
    min_isclose_pct: float = 99.0
    max_abs_error: float | None = None
    min_cosine: float | None = None
    min_top1_agreement_pct: float | None = None
    min_row_cosine: float | None = None
    min_retrieval_agreement_pct: float | None = None
    max_row_rel_error: float | None = None
    approximate_outputs: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        # Written as `not (lo <= x)` so that NaN thresholds are rejected too.
        if not (0.0 <= self.rtol < math.inf):
            raise ValueError(f"rtol must be finite and >= 0, got {self.rtol!r}")
        if not (0.0 <= self.atol < math.inf):
            raise ValueError(f"atol must be finite and >= 0, got {self.atol!r}")
        if not (0.0 <= self.min_isclose_pct <= 100.0):
            raise ValueError(f"min_isclose_pct must be in [0, 100], got {self.min_isclose_pct!r}")
        if self.max_abs_error is not None and not (0.0 <= self.max_abs_error < math.inf):
            raise ValueError(f"max_abs_error must be finite and >= 0, got {self.max_abs_error!r}")
        if self.min_cosine is not None and not (-1.0 <= self.min_cosine <= 1.0):
            raise ValueError(f"min_cosine must be in [-1, 1], got {self.min_cosine!r}")
        if self.min_top1_agreement_pct is not None and not (0.0 <= self.min_top1_agreement_pct <= 100.0):
            raise ValueError(f"min_top1_agreement_pct must be in [0, 100], got {self.min_top1_agreement_pct!r}")
        if self.min_row_cosine is not None and not (-1.0 <= self.min_row_cosine <= 1.0):
            raise ValueError(f"min_row_cosine must be in [-1, 1], got {self.min_row_cosine!r}")
        if self.min_retrieval_agreement_pct is not None and not (0.0 <= self.min_retrieval_agreement_pct <= 100.0):
            raise ValueError(f"min_retrieval_agreement_pct must be in [0, 100], "
                             f"got {self.min_retrieval_agreement_pct!r}")
        if self.max_row_rel_error is not None and not (0.0 <= self.max_row_rel_error < math.inf):
            raise ValueError(f"max_row_rel_error must be finite and >= 0, got {self.max_row_rel_error!r}")
        names = self.approximate_outputs
        if isinstance(names, str) or not all(isinstance(n, str) and n for n in names):
            raise ValueError(f"approximate_outputs must be a list of output names, got {names!r}")
        object.__setattr__(self, "approximate_outputs", tuple(names))

    def as_dict(self) -> dict[str, object]:
        """Plain dict for JSON reports; the embedding thresholds only where set, so that the tolerance of every
        other output reads as it always did."""
        out = dict(asdict(self))
        for key in ("min_row_cosine", "min_retrieval_agreement_pct", "max_row_rel_error"):
            if out[key] is None:
                del out[key]
        if out["approximate_outputs"]:
            out["approximate_outputs"] = list(out["approximate_outputs"])
        else:
            del out["approximate_outputs"]
        return out


@dataclass(frozen=True)
class RankStat:
    """One row of the "top-10 ranks" table.

    ``mae``: mean over rows of ``|ref - test|`` at the column the *reference*
    ranks r-th (so it measures how well the engine reproduces the value of
    the reference's r-th best class).
    ``disagreement_pct``: % of rows whose r-th ranked column differs between
    reference and engine.
    """

    rank: int
    mae: float
    disagreement_pct: float

    def as_dict(self) -> dict[str, object]:
        """Plain dict for JSON reports (NaN -> None)."""
        return {
            "rank": self.rank,
            "mae": _json_float(self.mae),
            "disagreement_pct": _json_float(self.disagreement_pct),
        }


@dataclass(frozen=True)
class ParityReport:
    """Everything measured for one output, plus the verdict.

    Statistics are computed over the elements that are finite in *both*
    arrays (row-wise statistics over the rows that are entirely finite in
    both); any NaN/Inf is itself listed in ``failures``, so a report with
    non-finite values can never pass. A statistic with nothing to be
    computed over is NaN (``None`` in ``as_dict``).

    ``worst_row_cosine``: the smallest per-row cosine (outputs of 2 or more
    dimensions, over rows finite in both; None for 1-D outputs).
    ``retrieval_agreement_pct`` / ``retrieval_k``: for embeddings (see
    Tolerance) of at least metrics.embedding.RETRIEVAL_MIN_ROWS rows, the
    share of each row's ``retrieval_k`` nearest neighbours the engine finds
    among the reference's; None otherwise.
    ``exact_match_pct``: for an integer or boolean output compared exactly
    (Tolerance), the share of elements equal to the reference's; None otherwise.
    ``worst_row_rel_error`` / ``worst_row``: the largest relative error of a
    row (Tolerance.max_row_rel_error) and that row's index; None for an empty output.
    An empty output (``n_elements`` 0, e.g. ``(B, 0)``) is compared by its
    shape alone: its figures are NaN and it passes when the shapes agree.
    """

    name: str
    shape: tuple[int, ...]
    n_elements: int
    nonfinite_ref: int
    nonfinite_test: int
    isclose_pct: float
    mae: float
    max_abs_error: float
    max_rel_error: float
    cosine: float
    top1_agreement_pct: float | None
    topk_agreement_pct: dict[int, float]
    ranks: tuple[RankStat, ...]
    tolerance: Tolerance
    failures: tuple[str, ...]
    worst_row_cosine: float | None = None
    retrieval_agreement_pct: float | None = None
    retrieval_k: int | None = None
    exact_match_pct: float | None = None
    worst_row_rel_error: float | None = None
    worst_row: int | None = None

    @property
    def passed(self) -> bool:
        """True when no check failed."""
        return not self.failures

    def explain(self) -> str:
        """Multi-line message with every figure and the tolerances (pytest assert message)."""
        tol = self.tolerance
        verdict = "; ".join(self.failures) if self.failures else "passed"
        lines = [f"output {self.name!r} {self.shape}: {verdict}"]
        if self.n_elements == 0:
            lines.append("  an empty output: compared by its shape alone (no element to compare)")
            return "\n".join(lines)

        isclose = (
            f"isclose {_fmt_pct(self.isclose_pct)} (>= {_fmt_pct(tol.min_isclose_pct)} "
            f"required, rtol={tol.rtol:g}, atol={tol.atol:g})"
        )
        max_abs = f"max abs {_fmt_sci(self.max_abs_error)}"
        if tol.max_abs_error is not None:
            max_abs += f" (<= {_fmt_sci(tol.max_abs_error)} allowed)"
        cosine = f"cosine {_fmt_cos(self.cosine)}"
        if tol.min_cosine is not None:
            cosine += f" (>= {_fmt_cos(tol.min_cosine)} required)"
        if self.worst_row_cosine is not None:
            cosine += f"; worst row cosine {_fmt_cos(self.worst_row_cosine)}"
            if tol.min_row_cosine is not None:
                cosine += f" (>= {_fmt_cos(tol.min_row_cosine)} required)"
        lines.append(
            f"  {isclose}; MAE {_fmt_sci(self.mae)}; {max_abs}; "
            f"max rel {_fmt_sci(self.max_rel_error)} (where |ref| > atol); {cosine}"
        )
        if self.exact_match_pct is not None:
            lines.append(f"  exact match {_fmt_pct(self.exact_match_pct)} (integer/boolean output: 100% required)")
        if self.worst_row_rel_error is not None:
            row_rel = f"  worst row relative error {_fmt_sci(self.worst_row_rel_error)}"
            row_rel += "" if self.worst_row is None else f" (row {self.worst_row})"
            if tol.max_row_rel_error is not None and self.exact_match_pct is None:
                row_rel += f" (<= {_fmt_sci(tol.max_row_rel_error)} allowed)"
            lines.append(row_rel)
        lines.append(
            f"  non-finite values: reference {self.nonfinite_ref}, "
            f"engine {self.nonfinite_test} (of {self.n_elements} elements)"
        )

        agreement: list[str] = []
        if self.retrieval_k is not None:
            retrieval = (f"retrieval agreement {_fmt_pct(self.retrieval_agreement_pct)} "
                         f"({self.retrieval_k} nearest rows)")
            if tol.min_retrieval_agreement_pct is not None:
                retrieval += f" (>= {_fmt_pct(tol.min_retrieval_agreement_pct)} required)"
            agreement.append(retrieval)
        if self.top1_agreement_pct is not None:
            top1 = f"top-1 agreement {_fmt_pct(self.top1_agreement_pct)}"
            if tol.min_top1_agreement_pct is not None:
                top1 += f" (>= {_fmt_pct(tol.min_top1_agreement_pct)} required)"
            agreement.append(top1)
        agreement.extend(
            f"top-{k} overlap {_fmt_pct(v)}"
            for k, v in self.topk_agreement_pct.items()
            if not (k == 1 and self.top1_agreement_pct is not None)
        )
        if agreement:
            lines.append("  " + "; ".join(agreement))
        if self.ranks:
            cells = ", ".join(f"r{s.rank} {_fmt_sci(s.mae)}/{_fmt_pct(s.disagreement_pct)}" for s in self.ranks)
            lines.append(f"  rank MAE/disagreement: {cells}")
        return "\n".join(lines)

    def as_dict(self) -> dict[str, object]:
        """JSON-serialisable dict (NaN/Inf -> None, int keys -> str)."""
        return {
            "name": self.name,
            "shape": list(self.shape),
            "n_elements": self.n_elements,
            "nonfinite_ref": self.nonfinite_ref,
            "nonfinite_test": self.nonfinite_test,
            "isclose_pct": _json_float(self.isclose_pct),
            "mae": _json_float(self.mae),
            "max_abs_error": _json_float(self.max_abs_error),
            "max_rel_error": _json_float(self.max_rel_error),
            "cosine": _json_float(self.cosine),
            "top1_agreement_pct": (None if self.top1_agreement_pct is None else _json_float(self.top1_agreement_pct)),
            "topk_agreement_pct": {str(k): _json_float(v) for k, v in self.topk_agreement_pct.items()},
            "ranks": [s.as_dict() for s in self.ranks],
            "tolerance": self.tolerance.as_dict(),
            "failures": list(self.failures),
            "passed": self.passed,
            "worst_row_cosine": None if self.worst_row_cosine is None else _json_float(self.worst_row_cosine),
            "retrieval_agreement_pct": (None if self.retrieval_agreement_pct is None
                                        else _json_float(self.retrieval_agreement_pct)),
            "retrieval_k": self.retrieval_k,
            "exact_match_pct": None if self.exact_match_pct is None else _json_float(self.exact_match_pct),
            "worst_row_rel_error": (None if self.worst_row_rel_error is None
                                    else _json_float(self.worst_row_rel_error)),
            "worst_row": self.worst_row,
        }



# --------------------------------------------------------------------------- formatting


def _json_float(x: float) -> float | None:
    return float(x) if math.isfinite(x) else None


def _fmt_pct(x: float) -> str:
    return "n/a" if math.isnan(x) else f"{x:.2f}%"


def _fmt_pct_pair(measured: float, threshold: float) -> tuple[str, str]:
    """Format two percentages with enough decimals that they visibly differ."""
    if math.isnan(measured):
        return "n/a (no finite values)", f"{threshold:.2f}%"
    for digits in range(2, 11):
        m, th = f"{measured:.{digits}f}", f"{threshold:.{digits}f}"
        if m != th:
            break
    return f"{m}%", f"{th}%"


def _fmt_sci(x: float) -> str:
    return "n/a" if math.isnan(x) else f"{x:.3e}"


def _fmt_cos(x: float) -> str:
    return "n/a" if math.isnan(x) else f"{x:.9g}"

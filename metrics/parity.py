"""Numerical parity between a reference output (PyTorch) and an engine output.

This is the single comparator every parity test goes through, so that a
failure always carries the same numbers (isclose %, MAE, max abs/rel error,
cosine, top-k agreement, rank table) and the tolerance it was judged against.

Everything is computed in float64 whatever the input dtype (float16,
bfloat16 already widened to float32, ints), so the metric itself never adds
rounding error of the order of the tolerances being checked.

The report it returns (``ParityReport``, ``Tolerance``, ``RankStat``) and the names of its figures are
metrics/parity_report.py's.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from typing import Any, NamedTuple

import numpy as np
import numpy.typing as npt

from .embedding import retrieval_agreement, row_cosines
from .parity_report import ParityReport, RankStat, Tolerance, _fmt_cos, _fmt_pct_pair, _fmt_sci

__all__ = [
    "compare_arrays",
    "compare_outputs",
    "rank_table",
]

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.intp]

#: k values reported in ``ParityReport.topk_agreement_pct`` (capped at #columns).
TOPK_AGREEMENT_KS: tuple[int, ...] = (1, 5)
#: Depth of the rank table attached to 2-D reports (capped at #columns).
RANK_TABLE_DEPTH = 10


def compare_arrays(name: str, ref: npt.ArrayLike, test: npt.ArrayLike, tol: Tolerance) -> ParityReport:
    """Compare one engine output against its reference and judge it against ``tol``.

    Raises ValueError on a shape mismatch: a harness bug, not numerical
    drift, never to be reported as a percentage. An empty output (``(B, 0)``)
    of the reference's shape is compared by that shape alone and passes.
    An integer or boolean reference output is compared exactly, unless
    ``tol.approximate_outputs`` names it.
    """
    r = _as_float64(ref, f"reference output {name!r}")
    t = _as_float64(test, f"engine output {name!r}")
    if r.shape != t.shape:
        raise ValueError(f"output {name!r}: shape mismatch: reference {r.shape} vs engine {t.shape}")
    if r.size == 0:
        return _empty_report(name, r.shape, tol)
    kind = np.asarray(ref).dtype
    exact = kind.kind in ("b", "i", "u") and name not in tol.approximate_outputs

    finite_r = np.isfinite(r)
    finite_t = np.isfinite(t)
    nonfinite_ref = int(r.size - np.count_nonzero(finite_r))
    nonfinite_test = int(t.size - np.count_nonzero(finite_t))
    both = finite_r & finite_t

    isclose_pct, mae, max_abs, max_rel, cosine = _elementwise_stats(r[both], t[both], tol)

    exact_pct = _exact_match_pct(ref, test) if exact else None
    worst_rel, worst_rel_row = _worst_row_rel_error(r, t, both, tol.atol) if r.ndim >= 1 else (None, None)

    rows = _row_figures(r, t, both, tol)
    report = ParityReport(
        name=name,
        shape=tuple(int(d) for d in r.shape),
        n_elements=int(r.size),
        nonfinite_ref=nonfinite_ref,
        nonfinite_test=nonfinite_test,
        isclose_pct=isclose_pct,
        mae=mae,
        max_abs_error=max_abs,
        max_rel_error=max_rel,
        cosine=cosine,
        top1_agreement_pct=rows.top1,
        topk_agreement_pct=rows.topk,
        ranks=rows.ranks,
        tolerance=tol,
        failures=(),
        worst_row_cosine=rows.worst_row,
        retrieval_agreement_pct=rows.retrieval,
        retrieval_k=rows.retrieval_k,
        exact_match_pct=exact_pct,
        worst_row_rel_error=worst_rel,
        worst_row=worst_rel_row,
    )
    return dataclasses.replace(report, failures=_failures(report, kind))


class _RowFigures(NamedTuple):
    """The figures of an output's rows (2 or more dimensions): None, empty or NaN where they do not apply."""

    worst_row: float | None
    top1: float | None
    topk: dict[int, float]
    ranks: tuple[RankStat, ...]
    retrieval: float | None
    retrieval_k: int | None


def _row_figures(r: FloatArray, t: FloatArray, both: npt.NDArray[np.bool_], tol: Tolerance) -> _RowFigures:
    """Over the rows finite in both: the worst row cosine (2 or more dimensions); for a 2-D embedding (the
    tolerance judges retrieval) the retrieval agreement, for other 2-D outputs (logits) the top-k agreement,
    the rank table and, with 2 or more columns, top-1."""
    top1: float | None = None
    topk: dict[int, float] = {}
    ranks: tuple[RankStat, ...] = ()
    worst_row: float | None = None
    retrieval: float | None = None
    retrieval_k: int | None = None
    if r.ndim >= 2:
        rows_ok = both.reshape(r.shape[0], -1).all(axis=1)
        cosines = row_cosines(r[rows_ok], t[rows_ok]) if rows_ok.any() else np.array([math.nan])
        worst_row = float(np.min(cosines))
    embedding = r.ndim == 2 and tol.min_retrieval_agreement_pct is not None
    if embedding:
        rows_ok = both.all(axis=1)
        retrieval, retrieval_k = retrieval_agreement(r[rows_ok], t[rows_ok])
        if retrieval_k == 0:  # too few finite rows for neighbours to mean anything: not judged
            retrieval, retrieval_k = None, None
    elif r.ndim == 2:
        n_cols = r.shape[1]
        rows_ok = both.all(axis=1)
        rr, tt = r[rows_ok], t[rows_ok]
        ks = sorted({min(k, n_cols) for k in TOPK_AGREEMENT_KS})
        if rr.shape[0] > 0:
            ref_order = _descending_order(rr)
            test_order = _descending_order(tt)
            topk = {k: _topk_overlap_pct(ref_order, test_order, k) for k in ks}
            ranks = _rank_stats(rr, tt, ref_order, test_order, RANK_TABLE_DEPTH)
        else:
            topk = {k: math.nan for k in ks}
        if n_cols >= 2:
            top1 = topk[1]
    return _RowFigures(worst_row, top1, topk, ranks, retrieval, retrieval_k)


def _failures(report: ParityReport, kind: np.dtype) -> tuple[str, ...]:
    """Every check of ``report``'s figures against its tolerance that fails, one line each."""
    tol = report.tolerance
    failures: list[str] = []
    if report.nonfinite_ref:
        failures.append(f"reference has {report.nonfinite_ref} NaN/Inf values")
    if report.nonfinite_test:
        failures.append(f"engine output has {report.nonfinite_test} NaN/Inf values")
    # Every check is written as `not (measured OK threshold)` so a NaN figure fails.
    if not (report.isclose_pct >= tol.min_isclose_pct):
        m, th = _fmt_pct_pair(report.isclose_pct, tol.min_isclose_pct)
        failures.append(f"isclose {m} < {th} required (rtol={tol.rtol:g}, atol={tol.atol:g})")
    if tol.max_abs_error is not None and not (report.max_abs_error <= tol.max_abs_error):
        failures.append(f"max abs error {_fmt_sci(report.max_abs_error)} > {_fmt_sci(tol.max_abs_error)} allowed")
    if tol.min_cosine is not None and not (report.cosine >= tol.min_cosine):
        failures.append(f"cosine {_fmt_cos(report.cosine)} < {_fmt_cos(tol.min_cosine)} required")
    top1 = report.top1_agreement_pct
    if tol.min_top1_agreement_pct is not None and top1 is not None and not (top1 >= tol.min_top1_agreement_pct):
        m, th = _fmt_pct_pair(top1, tol.min_top1_agreement_pct)
        failures.append(f"top-1 agreement {m} < {th} required")
    worst_row = report.worst_row_cosine
    if tol.min_row_cosine is not None and worst_row is not None and not (worst_row >= tol.min_row_cosine):
        failures.append(f"worst row cosine {_fmt_cos(worst_row)} < {_fmt_cos(tol.min_row_cosine)} required")
    retrieval = report.retrieval_agreement_pct
    if (tol.min_retrieval_agreement_pct is not None and retrieval is not None
            and not (retrieval >= tol.min_retrieval_agreement_pct)):
        m, th = _fmt_pct_pair(retrieval, tol.min_retrieval_agreement_pct)
        failures.append(f"retrieval agreement {m} < {th} required ({report.retrieval_k} nearest rows)")
    exact_pct = report.exact_match_pct
    if exact_pct is not None and not (exact_pct >= 100.0):
        m, th = _fmt_pct_pair(exact_pct, 100.0)
        failures.append(f"exact match {m} < {th} required ({kind} output: integers and booleans are compared "
                        "exactly; [precision.P] parity.approximate_outputs names those to compare within rtol/atol)")
    worst_rel = report.worst_row_rel_error
    if (tol.max_row_rel_error is not None and exact_pct is None and worst_rel is not None
            and not (worst_rel <= tol.max_row_rel_error)):
        failures.append(f"worst row relative error {_fmt_sci(worst_rel)} > {_fmt_sci(tol.max_row_rel_error)} "
                        f"allowed (row {report.worst_row})")
    return tuple(failures)


def _empty_report(name: str, shape: tuple[int, ...], tol: Tolerance) -> ParityReport:
    """An output with no element (``(B, 0)``): its shape, equal to the reference's, is all there is to compare; every
    figure is NaN (None in JSON), and nothing fails."""
    nan = math.nan
    return ParityReport(name=name, shape=tuple(int(d) for d in shape), n_elements=0, nonfinite_ref=0,
                        nonfinite_test=0, isclose_pct=nan, mae=nan, max_abs_error=nan, max_rel_error=nan, cosine=nan,
                        top1_agreement_pct=None, topk_agreement_pct={}, ranks=(), tolerance=tol, failures=())


def compare_outputs(
    ref: Mapping[str, npt.ArrayLike],
    test: Mapping[str, npt.ArrayLike],
    tol: Tolerance,
) -> dict[str, ParityReport]:
    """Compare every named output; the output sets must match exactly.

    A missing or unexpected output is a ValueError (an export/binding bug),
    never a silently skipped comparison. Result is in the reference's order.
    """
    missing = [k for k in ref if k not in test]
    extra = [k for k in test if k not in ref]
    if missing or extra:
        raise ValueError(
            "engine outputs do not match reference outputs: "
            f"missing from engine {sorted(missing)}, not in reference {sorted(extra)}"
        )
    return {k: compare_arrays(k, ref[k], test[k], tol) for k in ref}


def rank_table(ref: npt.ArrayLike, test: npt.ArrayLike, k: int = RANK_TABLE_DEPTH) -> tuple[RankStat, ...]:
    """Per-rank MAE and index disagreement for 2-D ``(rows, classes)`` outputs.

    Ranks follow a stable descending sort, so ties go to the lower column
    index (same rule as ``np.argmax``). Ranks 1..min(k, classes). Needs
    finite values: drop non-finite rows first (``compare_arrays`` does).
    """
    k = _positive_int(k, "k")
    r = _as_float64(ref, "reference")
    t = _as_float64(test, "engine output")
    if r.shape != t.shape:
        raise ValueError(f"shape mismatch: reference {r.shape} vs engine {t.shape}")
    if r.ndim != 2:
        raise ValueError(f"rank_table needs 2-D (rows, classes) arrays, got {r.shape}")
    if r.size == 0:
        raise ValueError(f"rank_table got an empty array {r.shape}")
    if not (np.isfinite(r).all() and np.isfinite(t).all()):
        raise ValueError("rank_table needs finite values; drop non-finite rows first")
    return _rank_stats(r, t, _descending_order(r), _descending_order(t), k)


# --------------------------------------------------------------------------- helpers


def _as_float64(a: npt.ArrayLike, what: str) -> FloatArray:
    """Widen to float64; reject complex (casting would drop the imaginary part)."""
    arr = np.asarray(a)
    if np.iscomplexobj(arr):
        raise ValueError(f"{what}: complex dtype {arr.dtype} is not supported")
    try:
        return arr.astype(np.float64)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"{what}: cannot convert dtype {arr.dtype} to float64") from exc


def _exact_match_pct(ref: npt.ArrayLike, test: npt.ArrayLike) -> float:
    """% of elements equal to the reference's, compared as given (an int64 id beyond 2**53 is not rounded)."""
    equal = np.asarray(ref) == np.asarray(test)
    return 100.0 * int(np.count_nonzero(equal)) / equal.size


def _worst_row_rel_error(r: FloatArray, t: FloatArray, both: npt.NDArray[np.bool_],
                         atol: float) -> tuple[float, int | None]:
    """(the largest ``|t - r| / |r|`` of a row, L2 norms over the row, and that row's index) over the rows finite in
    both; NaN, None when none is. The denominator is at least atol per element (``atol x sqrt(columns)``), so a row
    of near-zero values is judged by atol, as isclose judges its elements. Each row is scaled by its largest
    magnitude first: the norms of huge values do not overflow (scaling does not change the ratio)."""
    n = r.shape[0]
    rr, tt = r.reshape(n, -1), t.reshape(n, -1)
    rows = np.flatnonzero(both.reshape(n, -1).all(axis=1))
    if rows.size == 0:
        return math.nan, None
    rr, tt = rr[rows], tt[rows]
    scale = np.maximum(np.max(np.abs(rr), axis=1), np.max(np.abs(tt), axis=1))
    zero = scale == 0.0
    scale[zero] = 1.0
    rs, ts = rr / scale[:, None], tt / scale[:, None]
    err = np.linalg.norm(ts - rs, axis=1)
    den = np.maximum(np.linalg.norm(rs, axis=1), atol * math.sqrt(rr.shape[1]) / scale)
    with np.errstate(divide="ignore", invalid="ignore"):
        rel = np.where(err == 0.0, 0.0, err / den)
    worst = int(np.argmax(rel))
    return float(rel[worst]), int(rows[worst])


def _positive_int(k: Any, what: str) -> int:
    if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or k < 1:
        raise ValueError(f"{what} must be an int >= 1, got {k!r}")
    return int(k)


def _elementwise_stats(r: FloatArray, t: FloatArray, tol: Tolerance) -> tuple[float, float, float, float, float]:
    """(isclose %, MAE, max abs, max rel, cosine) over already-finite 1-D arrays."""
    if r.size == 0:
        return (math.nan,) * 5
    abs_diff = np.abs(t - r)
    abs_ref = np.abs(r)
    # numpy.isclose semantics with the reference as the "b" argument.
    n_close = int(np.count_nonzero(abs_diff <= tol.atol + tol.rtol * abs_ref))
    isclose_pct = 100.0 * n_close / r.size
    max_abs = float(np.max(abs_diff))
    # A mean cannot exceed the maximum; summation rounding can push it one ulp above (found by hypothesis).
    mae = min(float(np.mean(abs_diff)), max_abs)
    # Relative error only where |ref| > atol (and > the smallest normal
    # float64 when atol == 0): near zero the ratio is meaningless and
    # unbounded, and those elements are governed by atol / max abs anyway.
    # 0.0 when no element qualifies.
    rel_mask = abs_ref > max(tol.atol, float(np.finfo(np.float64).tiny))
    max_rel = float(np.max(abs_diff[rel_mask] / abs_ref[rel_mask])) if rel_mask.any() else 0.0
    return isclose_pct, mae, max_abs, max_rel, _cosine(r, t)


def _cosine(r: FloatArray, t: FloatArray) -> float:
    """Cosine similarity; 1.0 if both are all-zero, 0.0 if exactly one is.

    Both vectors are scaled by the largest magnitude first so huge values
    cannot overflow the dot product (scaling does not change the cosine).
    """
    scale = max(float(np.max(np.abs(r))), float(np.max(np.abs(t))))
    if scale == 0.0:
        return 1.0
    rs, ts = r / scale, t / scale
    # Every sum by the same np.dot, so identical vectors read exactly 1.0 (dot(r, r) / sqrt(dot(r, r) ** 2)):
    # np.linalg.norm sums another way, and on an AVX2-only CPU identical outputs read 0.9999999999999999,
    # failing a min_cosine of 1.0.
    nr2, nt2 = float(np.dot(rs, rs)), float(np.dot(ts, ts))
    if nr2 == 0.0 or nt2 == 0.0:
        return 0.0
    cos = float(np.dot(rs, ts)) / math.sqrt(nr2 * nt2)
    return min(1.0, max(-1.0, cos))


def _descending_order(x: FloatArray) -> IntArray:
    """Column indices of each row, largest first; ties -> lower index first."""
    return np.argsort(-x, axis=1, kind="stable")


def _topk_overlap_pct(ref_order: IntArray, test_order: IntArray, k: int) -> float:
    """Mean over rows of |topk(ref) ∩ topk(test)| / k, in percent."""
    a = ref_order[:, :k]
    b = test_order[:, :k]
    hits = int(np.count_nonzero(a[:, :, None] == b[:, None, :]))
    return 100.0 * hits / (k * int(a.shape[0]))


def _rank_stats(
    r: FloatArray, t: FloatArray, ref_order: IntArray, test_order: IntArray, k: int
) -> tuple[RankStat, ...]:
    depth = min(k, r.shape[1])
    n_rows = r.shape[0]
    rows = np.arange(n_rows)[:, None]
    idx = ref_order[:, :depth]
    mae = np.mean(np.abs(r[rows, idx] - t[rows, idx]), axis=0)
    n_disagree = np.count_nonzero(idx != test_order[:, :depth], axis=0)
    return tuple(
        RankStat(
            rank=i + 1,
            mae=float(mae[i]),
            disagreement_pct=100.0 * int(n_disagree[i]) / n_rows,
        )
        for i in range(depth)
    )

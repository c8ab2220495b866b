"""Agreement of two sets of embeddings of the same rows, as people who use embeddings judge it.

Why not only the elementwise figures: an embedding is used through cosine similarity, for search and
clustering. Two questions decide whether an engine's embeddings are as good as the reference's: is each
row's vector pointing the same way (``row_cosines``: the worst row, which a global cosine over all rows
dilutes), and does a search over the rows find the same neighbours (``retrieval_agreement``: for each row,
how many of the k nearest other rows the engine finds are among the reference's k nearest).

Pure numpy, float64 throughout; rows with a NaN/Inf in either array are the caller's to drop (the parity
comparator counts and fails them).
"""

from __future__ import annotations

import math

import numpy as np
import numpy.typing as npt

__all__ = ["RETRIEVAL_K", "RETRIEVAL_MIN_ROWS", "RETRIEVAL_TIE", "cosine_matrix", "nearest_neighbours",
           "retrieval_agreement", "row_cosines"]

#: Neighbours compared per row.
RETRIEVAL_K = 5
#: Fewest rows for a retrieval figure: with few rows, k neighbours are most of the others (5 of 7 in a batch of
#: 8 agree on at least 3 whatever the engine does), and the figure says nothing.
RETRIEVAL_MIN_ROWS = 4 * RETRIEVAL_K
#: Reference similarities this close to the k-th nearest one tie with it. Identical rows (a batch of the same
#: short sentence, or generated ones) give equal similarities, and which of them is "k-th" is arbitrary. On
#: the suite's sentences the reference's k-th and (k+1)-th similarities are 3.7e-4 apart at the least, where
#: fp16 moves a similarity by about 1e-6.
RETRIEVAL_TIE = 1e-6

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.intp]


def _rows(a: npt.ArrayLike, what: str) -> FloatArray:
    arr = np.asarray(a, dtype=np.float64)
    if arr.ndim < 2:
        raise ValueError(f"{what}: need rows of vectors (2-D or more), got shape {arr.shape}")
    return arr.reshape(arr.shape[0], -1)


def _unit(x: FloatArray) -> FloatArray:
    """Rows scaled to unit length (each first by its largest magnitude, so no square overflows); a zero row
    stays zero."""
    scale = np.max(np.abs(x), axis=1, keepdims=True)
    scaled = np.divide(x, scale, out=np.zeros_like(x), where=scale > 0)
    norms = np.linalg.norm(scaled, axis=1, keepdims=True)
    return np.divide(scaled, norms, out=np.zeros_like(scaled), where=norms > 0)


def row_cosines(ref: npt.ArrayLike, test: npt.ArrayLike) -> FloatArray:
    """Cosine similarity of each row of ``test`` with the same row of ``ref``; 1.0 where both rows are zero,
    0.0 where exactly one is."""
    r, t = _rows(ref, "reference"), _rows(test, "engine output")
    if r.shape != t.shape:
        raise ValueError(f"shape mismatch: reference {r.shape} vs engine {t.shape}")
    ur, ut = _unit(r), _unit(t)
    cos = np.sum(ur * ut, axis=1)
    both_zero = ~np.any(r, axis=1) & ~np.any(t, axis=1)
    return np.where(both_zero, 1.0, np.clip(cos, -1.0, 1.0))


def cosine_matrix(x: npt.ArrayLike) -> FloatArray:
    """Cosine similarity of every row with every row."""
    u = _unit(_rows(x, "embeddings"))
    return u @ u.T


def nearest_neighbours(x: npt.ArrayLike, k: int) -> IntArray:
    """For each row, the indices of its ``k`` most similar other rows (cosine), most similar first; ties go
    to the lower index. Needs ``1 <= k < rows``."""
    sim = cosine_matrix(x)
    n = sim.shape[0]
    if not 1 <= k < n:
        raise ValueError(f"nearest_neighbours: k={k} needs 1 <= k < rows ({n})")
    np.fill_diagonal(sim, -np.inf)  # a row is not its own neighbour
    return np.argsort(-sim, axis=1, kind="stable")[:, :k]


def retrieval_agreement(ref: npt.ArrayLike, test: npt.ArrayLike, k: int = RETRIEVAL_K,
                        min_rows: int = RETRIEVAL_MIN_ROWS) -> tuple[float, int]:
    """(percent, k used): for each row, the share of the k nearest other rows in the engine's space (cosine)
    that are among the k nearest in the reference's, averaged over rows. A row counts as among them when its
    reference similarity reaches the k-th one (less RETRIEVAL_TIE): ties at the k-th place are not
    disagreement. With fewer than ``max(min_rows, 2)`` rows the figure would mean nothing: the result is
    (NaN, 0). ``k`` is capped at rows - 1."""
    r, t = _rows(ref, "reference"), _rows(test, "engine output")
    if r.shape != t.shape:
        raise ValueError(f"shape mismatch: reference {r.shape} vs engine {t.shape}")
    if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or k < 1:
        raise ValueError(f"k must be an int >= 1, got {k!r}")
    n = r.shape[0]
    if n < max(int(min_rows), 2):
        return math.nan, 0
    k = min(int(k), n - 1)
    sim = cosine_matrix(r)
    np.fill_diagonal(sim, -np.inf)
    kth = -np.sort(-sim, axis=1)[:, k - 1]  # the reference's k-th nearest similarity, per row
    found = nearest_neighbours(t, k)
    hits = int(np.count_nonzero(np.take_along_axis(sim, found, axis=1) >= (kth - RETRIEVAL_TIE)[:, None]))
    return 100.0 * hits / (k * n), k

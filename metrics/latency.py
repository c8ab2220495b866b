"""Latency summary for benchmark samples (seconds in, milliseconds out).

One summariser so that every engine's numbers are computed the same way:
same warm-up drop, same percentile method (numpy's default, linear), same
throughput definition (batch_size / median latency).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from statistics import NormalDist

import numpy as np
import numpy.typing as npt

__all__ = ["LatencySummary", "PairedOverhead", "TwoModes", "paired_overhead", "summarize_latency", "two_modes"]


@dataclass(frozen=True)
class LatencySummary:
    """Latency statistics in milliseconds over the samples kept after warm-up.

    ``n`` is the number of samples kept, ``warmup_dropped`` the number
    dropped. ``std_ms`` is the population standard deviation (ddof=0, so it
    is defined for a single sample). ``throughput_per_s`` is items per
    second, ``batch_size / median``; inf if the median is exactly 0.
    """

    n: int
    warmup_dropped: int
    mean_ms: float
    median_ms: float
    p90_ms: float
    p99_ms: float
    min_ms: float
    max_ms: float
    std_ms: float
    batch_size: int
    throughput_per_s: float

    def as_dict(self) -> dict[str, object]:
        """JSON-serialisable dict (an infinite throughput becomes None)."""
        d: dict[str, object] = dict(asdict(self))
        if not math.isfinite(self.throughput_per_s):
            d["throughput_per_s"] = None
        return d


def summarize_latency(
    samples_s: Sequence[float] | npt.NDArray[np.floating],
    batch_size: int,
    warmup_fraction: float = 0.0,
) -> LatencySummary:
    """Summarise per-call latencies given in seconds.

    Drops the first ``ceil(warmup_fraction * len(samples))`` samples (the
    usual "10% warm-up"; a 1e-9 slack keeps 0.1 * 30 from rounding up to 4).
    Raises ValueError when a sample is negative or non-finite (a timing bug,
    checked over all samples, warm-up included), batch_size < 1, the
    fraction is outside [0, 1], or no sample is left.
    """
    if isinstance(batch_size, bool) or not isinstance(batch_size, (int, np.integer)) or batch_size < 1:
        raise ValueError(f"batch_size must be an int >= 1, got {batch_size!r}")
    if not (0.0 <= warmup_fraction <= 1.0):
        raise ValueError(f"warmup_fraction must be in [0, 1], got {warmup_fraction!r}")
    arr = np.asarray(samples_s, dtype=np.float64)
    if arr.ndim != 1:
        raise ValueError(f"samples_s must be 1-D, got shape {arr.shape}")
    if not np.isfinite(arr).all():
        raise ValueError(f"{int(np.count_nonzero(~np.isfinite(arr)))} samples are NaN/Inf")
    if (arr < 0).any():
        raise ValueError(f"{int(np.count_nonzero(arr < 0))} samples are negative")

    dropped = min(arr.size, max(0, math.ceil(warmup_fraction * arr.size - 1e-9)))
    kept = arr[dropped:]
    if kept.size == 0:
        raise ValueError(f"no samples left: {arr.size} given, {dropped} dropped as warm-up")

    median_s = float(np.median(kept))
    p90_s, p99_s = (float(v) for v in np.percentile(kept, [90.0, 99.0]))
    throughput = batch_size / median_s if median_s > 0.0 else math.inf
    return LatencySummary(
        n=int(kept.size),
        warmup_dropped=int(dropped),
        mean_ms=float(np.mean(kept)) * 1e3,
        median_ms=median_s * 1e3,
        p90_ms=p90_s * 1e3,
        p99_ms=p99_s * 1e3,
        min_ms=float(np.min(kept)) * 1e3,
        max_ms=float(np.max(kept)) * 1e3,
        std_ms=float(np.std(kept)) * 1e3,
        batch_size=int(batch_size),
        throughput_per_s=throughput,
    )


@dataclass(frozen=True)
class TwoModes:
    """A case's rounds fall in two separate groups, a fast and a slow one, each a fair share of them: their median
    is neither group's figure (with half the rounds slow it lands between the two), so the case is not measured.

    Seen on the H200s (docs/gpu.md, the twelfth sitting): one to four latency cases a run whose slow rounds recur every
    7.6-8.0 ms of rounds, or that step from slow to fast rounds midway. ``every_ms`` is the median time from one slow
    round's end to the next's (None with one slow round)."""

    rounds: int
    slow_rounds: int
    fast_ms: float
    slow_ms: float
    every_ms: float | None

    def explain(self) -> str:
        every = f", one every {self.every_ms:.2f} ms of rounds" if self.every_ms is not None else ""
        return (f"rounds in two modes: {self.slow_rounds} of {self.rounds} at {self.slow_ms:.3g} ms, the rest at "
                f"{self.fast_ms:.3g} ms{every}")

    def as_dict(self) -> dict[str, object]:
        return dict(asdict(self))


def two_modes(
    samples_s: Sequence[float] | npt.NDArray[np.floating],
    min_ratio: float = 1.25,
    min_gap: float = 1.15,
    min_share: float = 0.2,
) -> TwoModes | None:
    """The rounds' two modes, or None: sorted, the rounds split where the next one is at least ``min_gap`` times the
    one before (the widest such step), each side holding at least ``min_share`` of them, and the slow side's median at
    least ``min_ratio`` times the fast side's. A tail of a few slow rounds (a share below ``min_share``) is noise the
    median already ignores; a continuum of times has no step. Fewer than 6 rounds, or a sample that is not a finite
    positive time, gives None (summarize_latency reports bad samples)."""
    x = np.asarray(samples_s, dtype=np.float64)
    if x.ndim != 1 or x.size < 6 or not np.all(np.isfinite(x)) or np.any(x <= 0):
        return None
    n = x.size
    ordered = np.sort(x)
    k = max(1, math.ceil(min_share * n))
    if n - k < k:
        return None
    steps = ordered[k:n - k + 1] / ordered[k - 1:n - k]  # splitting before ordered[i], for i in k..n-k
    i = int(np.argmax(steps)) + k
    fast, slow = float(np.median(ordered[:i])), float(np.median(ordered[i:]))
    if steps[i - k] < min_gap or slow < min_ratio * fast:
        return None
    slow_at = np.flatnonzero(x > ordered[i - 1])
    ends = np.cumsum(x)[slow_at]
    every = float(np.median(np.diff(ends))) * 1e3 if slow_at.size > 1 else None
    return TwoModes(rounds=int(n), slow_rounds=int(slow_at.size), fast_ms=fast * 1e3, slow_ms=slow * 1e3,
                    every_ms=every)


@dataclass(frozen=True)
class PairedOverhead:
    """How much slower call A is than call B, from rounds that ran both (fractions: 0.02 is 2 %).

    ``overhead`` is the median over rounds of ``a_i / b_i`` minus 1; ``low``/``high`` bound that median
    at ``confidence`` (distribution-free, from order statistics of the ratios). ``ratio_of_medians`` is
    ``median(a) / median(b) - 1``, the unpaired figure, kept for comparison.
    """

    n: int
    overhead: float
    low: float
    high: float
    ratio_of_medians: float
    confidence: float


def paired_overhead(
    a_s: Sequence[float] | npt.NDArray[np.floating],
    b_s: Sequence[float] | npt.NDArray[np.floating],
    confidence: float = 0.95,
) -> PairedOverhead:
    """Overhead of A over B from paired rounds (a_s[i] and b_s[i] ran back to back).

    Why per-round ratios: where a call is launch-bound its time is the host's launch speed, which
    drifts between blocks of rounds; a ratio within each round cancels that drift, while two medians
    taken over the whole run keep it. Raises ValueError on unequal lengths, an empty or non-1-D input,
    or a sample that is not a finite positive number.
    """
    if not (0.0 < confidence < 1.0):
        raise ValueError(f"confidence must be in (0, 1), got {confidence!r}")
    a = np.asarray(a_s, dtype=np.float64)
    b = np.asarray(b_s, dtype=np.float64)
    if a.ndim != 1 or a.shape != b.shape or a.size == 0:
        raise ValueError(f"need two 1-D sample lists of one non-zero length, got shapes {a.shape} and {b.shape}")
    for name, x in (("a", a), ("b", b)):
        bad = ~np.isfinite(x) | (x <= 0)
        if bad.any():
            raise ValueError(f"{int(np.count_nonzero(bad))} samples of {name} are not finite positive times")
    ratios = np.sort(a / b)
    n = ratios.size
    # The median lies between order statistics j and k with probability >= confidence (Binomial(n, 1/2),
    # normal approximation with a continuity margin); clipped to the sample for small n.
    half = NormalDist().inv_cdf(0.5 + confidence / 2) * math.sqrt(n) / 2
    j = max(0, math.floor(n / 2 - half) - 1)
    k = min(n - 1, math.ceil(n / 2 + half))
    return PairedOverhead(
        n=int(n),
        overhead=float(np.median(ratios)) - 1.0,
        low=float(ratios[j]) - 1.0,
        high=float(ratios[k]) - 1.0,
        ratio_of_medians=float(np.median(a) / np.median(b)) - 1.0,
        confidence=float(confidence),
    )

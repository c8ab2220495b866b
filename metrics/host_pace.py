"""Host-paced latency: a host-bound case's rounds put at one host speed (issue 42).

Why: on the GPU VMs a launch-bound case's median moved up to 2.8x between nights while nothing changed, because the
host goes in and out of a slow mode for seconds at a time (docs/nightly.md). A fixed piece of pure-Python work timed
just before every round (suite/timing.py ``host_reference_s``) slows with it: on one H200, over 8 fresh processes,
resnet18 eager bs1 windows of a second moved 40 % (90th percentile, any two windows) and 6.9 % once each was divided by
the reference's median over the same rounds (docs/nightly.md "Host-paced"). The reference is pure Python: no CUDA,
driver, torch or ONNX Runtime code runs in it, so an upgrade of those that slows the case does not slow it, and a
slower engine stays slower once paced. Pure arithmetic; suite/gate/bound.py says which cases are paced.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence


def _usable(refs: Sequence[float] | None, rounds: int) -> bool:
    """One positive, finite reference per round."""
    return (refs is not None and len(refs) == rounds and rounds > 0
            and all(isinstance(r, (int, float)) and 0.0 < r < math.inf for r in refs))


def pace(samples: Sequence[float], refs: Sequence[float] | None, scale: float) -> list[float] | None:
    """The rounds at host speed ``scale`` (seconds of the reference): each round times ``scale`` over the
    reference's median over the same rounds. None where the rounds have no usable reference each."""
    if not _usable(refs, len(samples)) or not scale > 0:
        return None
    assert refs is not None
    factor = scale / statistics.median(refs)
    return [s * factor for s in samples]


def paced_runs(runs: Sequence[Sequence[float]],
               refs: Sequence[Sequence[float] | None] | None) -> tuple[list[list[float]], float] | None:
    """Every baseline run paced to one host speed (the median of the runs' reference medians), and that speed; None
    unless every run has a usable reference for each round. The current rounds are paced to the same speed
    (``pace``), or the comparison is raw on both sides."""
    if not runs or refs is None or len(refs) != len(runs):
        return None
    if not all(_usable(refs[i], len(runs[i])) for i in range(len(runs))):
        return None
    scale = statistics.median(statistics.median(r) for r in refs if r is not None)
    paced = [pace(runs[i], refs[i], scale) for i in range(len(runs))]
    return [p for p in paced if p is not None], scale

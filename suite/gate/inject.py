"""Self-test knobs: a known slowdown (``--inject-slowdown``) and a known accuracy drop
(``--inject-accuracy-drop``), so that the gates can be shown to fire on a real run. Never on by default.

Why a busy-wait proportional to each call, after the call: the slowdown is then exactly the asked
fraction of *that* call whatever the call's own noise (a fixed sleep would be a different fraction
for every batch size, and ``time.sleep`` overshoots by tens of microseconds). The wrapper adds the
measured busy-wait to the round's sample, so the recorded latency is what an engine that much slower
would have shown, and pytest-benchmark's own timer sees the same extra time.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import numpy as np


def busy_wait(seconds: float) -> float:
    """Spin for ``seconds`` (no sleep: exact to a microsecond or so); returns the time actually spent."""
    start = time.perf_counter()
    if seconds <= 0.0:
        return 0.0
    # Compare the elapsed time, not the clock with start + seconds: that sum rounds, and the loop could
    # then end an ulp short of ``seconds`` (a CI run saw 0.0019999999999527 for 0.002).
    now = start
    while now - start < seconds:
        now = time.perf_counter()
    return now - start


class SlowedCall:
    """A timed callable that takes ``fraction`` longer per call than ``inner``.

    ``inner`` is either a plain callable or one that records its own per-call seconds in
    ``samples_s`` (the suite's ``timed_call``). In the first case the wrapper times the call with
    ``perf_counter``; in the second it takes the call's own sample as the base, busy-waits
    ``fraction`` of it, and reports ``inner.samples_s[i] + waited[i]``. Other attributes pass through.
    """

    def __init__(self, inner: Callable[..., Any], fraction: float) -> None:
        if not (0.0 <= fraction < 10.0):
            raise ValueError(f"slowdown fraction must be in [0, 10), got {fraction!r}")
        self.inner = inner
        self.fraction = fraction
        self.waited_s: list[float] = []
        self._own_samples: list[float] = []

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        own = getattr(self.inner, "samples_s", None)
        before = len(own) if own is not None else 0
        start = time.perf_counter()
        result = self.inner(*args, **kwargs)
        wall = time.perf_counter() - start
        own = getattr(self.inner, "samples_s", None)
        base = own[-1] if own is not None and len(own) > before else wall
        waited = busy_wait(self.fraction * base)
        self.waited_s.append(waited)
        self._own_samples.append(wall + waited)
        return result

    @property
    def samples_s(self) -> list[float]:
        own = getattr(self.inner, "samples_s", None)
        if own is None:
            return list(self._own_samples)
        samples = [float(s) for s in own]
        # Align from the end: each call added one sample to inner and one wait here.
        offset = len(samples) - len(self.waited_s)
        for i, waited in enumerate(self.waited_s):
            if 0 <= offset + i < len(samples):
                samples[offset + i] += waited
        return samples

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


def flip_top1(outputs: dict[str, np.ndarray], fraction: float) -> dict[str, np.ndarray]:
    """Swap the largest and second-largest logit in a fixed, evenly spread ``fraction`` of the rows of
    every 2-D output: those rows' predictions change (top-1 drops by about ``fraction`` times the
    accuracy on them; top-5 does not move). Rows are chosen by index, so the same rows flip every run."""
    flipped = {}
    for name, value in outputs.items():
        arr = np.array(value, copy=True)
        if arr.ndim == 2 and arr.shape[1] >= 2 and fraction > 0.0:
            rows = np.flatnonzero(np.floor((np.arange(arr.shape[0]) + 1) * fraction)
                                  > np.floor(np.arange(arr.shape[0]) * fraction))
            order = np.argsort(-arr[rows], axis=1, kind="stable")
            first, second = order[:, 0], order[:, 1]
            top, runner_up = arr[rows, first].copy(), arr[rows, second].copy()
            arr[rows, first], arr[rows, second] = runner_up, top
        flipped[name] = arr
    return flipped

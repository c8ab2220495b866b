"""Student's t and beta distributions in pure Python (stdlib ``math``): the quantiles the gates need.

Why a module of its own: metrics/ is numpy only (no scipy), yet the latency gate needs t quantiles
(``student_t_quantile``: its Welch and prediction intervals) and the calibration tools need an exact
binomial interval (``binomial_interval``: how sure a measured false-alarm or detection rate is); both
rest on the regularized incomplete beta function computed here.
"""

from __future__ import annotations

import math
from typing import Any

__all__ = ["binomial_interval", "student_t_quantile"]


def _betacf(a: float, b: float, x: float) -> float:
    """Continued fraction of the regularized incomplete beta function (modified Lentz)."""
    tiny = 1e-300
    qab, qap, qam = a + b, a + 1.0, a - 1.0
    c, d = 1.0, 1.0 - qab * x / qap
    d = 1.0 / (d if abs(d) > tiny else tiny)
    h = d
    for m in range(1, 500):
        m2 = 2 * m
        aa = m * (b - m) * x / ((qam + m2) * (a + m2))
        d = 1.0 + aa * d
        d = 1.0 / (d if abs(d) > tiny else tiny)
        c = 1.0 + aa / c
        c = c if abs(c) > tiny else tiny
        h *= d * c
        aa = -(a + m) * (qab + m) * x / ((a + m2) * (qap + m2))
        d = 1.0 + aa * d
        d = 1.0 / (d if abs(d) > tiny else tiny)
        c = 1.0 + aa / c
        c = c if abs(c) > tiny else tiny
        delta = d * c
        h *= delta
        if abs(delta - 1.0) < 1e-15:
            break
    return h


def _betainc(a: float, b: float, x: float) -> float:
    """Regularized incomplete beta I_x(a, b)."""
    if x <= 0.0:
        return 0.0
    if x >= 1.0:
        return 1.0
    ln_front = math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x)
    if x < (a + 1.0) / (a + b + 2.0):
        return math.exp(ln_front) * _betacf(a, b, x) / a
    return 1.0 - math.exp(ln_front) * _betacf(b, a, 1.0 - x) / b


def _bisect(f: Any, lo: float, hi: float, target: float) -> float:
    """Root of the increasing function f(x) = target on [lo, hi]."""
    for _ in range(200):
        mid = 0.5 * (lo + hi)
        if f(mid) < target:
            lo = mid
        else:
            hi = mid
        if hi - lo <= 1e-14 * max(1.0, abs(mid)):
            break
    return 0.5 * (lo + hi)


def _t_cdf(t: float, dof: float) -> float:
    t2 = t * t
    if t2 < dof:
        # Near t = 0, dof / (dof + t^2) rounds to 1 and the tail form loses every digit (a quantile for
        # p = 0.5 + 1e-12 came out 1.7e-7 instead of 2.5e-12): use P(|T| < t) = I_{t^2/(dof+t^2)}(1/2, dof/2).
        central = 0.5 * _betainc(0.5, dof / 2.0, t2 / (dof + t2))
        return 0.5 + central if t >= 0 else 0.5 - central
    tail = 0.5 * _betainc(dof / 2.0, 0.5, dof / (dof + t2))
    return 1.0 - tail if t >= 0 else tail


def student_t_quantile(p: float, dof: float) -> float:
    """Quantile of Student's t with ``dof`` (real, > 0) degrees of freedom."""
    if not (0.0 < p < 1.0):
        raise ValueError(f"p must be in (0, 1), got {p!r}")
    if not (dof > 0.0):
        raise ValueError(f"dof must be > 0, got {dof!r}")
    if p < 0.5:
        return -student_t_quantile(1.0 - p, dof)
    if p == 0.5:
        return 0.0
    hi = 1.0
    while _t_cdf(hi, dof) < p:
        hi *= 2.0
    return _bisect(lambda x: _t_cdf(x, dof), 0.0, hi, p)


def binomial_interval(k: int, n: int, confidence: float = 0.95) -> tuple[float, float]:
    """Clopper-Pearson (exact) interval for a rate of k events in n trials: how sure a measured
    false-alarm or detection rate is (0 alarms in 300 trials still allows up to ~1.2 % at 95 %)."""
    if n <= 0 or not (0 <= k <= n):
        raise ValueError(f"need 0 <= k <= n and n > 0, got k={k!r}, n={n!r}")
    alpha = 1.0 - confidence
    lo = 0.0 if k == 0 else _bisect(lambda x: _betainc(k, n - k + 1, x), 0.0, 1.0, alpha / 2.0)
    hi = 1.0 if k == n else _bisect(lambda x: _betainc(k + 1, n - k, x), 0.0, 1.0, 1.0 - alpha / 2.0)
    return lo, hi

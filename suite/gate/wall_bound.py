"""How long a latency case may take, its re-measures included (issue 47): ``--latency-case-bound`` times its first
attempt. No pytest here, so its rule is unit-tested without timing anything (tests/selftest/test_wall_bound.py).

Why a bound: a case measured busy is timed again (``--latency-busy-retries``, suite/gate/check.py settle_latency),
and beside one busy neighbour on a 2-core machine a torch case's rounds ran up to 135x slower than quiet
(efficientnet fp16 bs1 28.7 -> 3889 ms): an `--inject-slowdown 50%` run took 30 minutes instead of ~1.5, silently.
Why relative to the first attempt: it is the one time every case has, baseline or not, measured on this machine a
moment ago; an attempt as long as the first three times over is what the default (4x) allows, and a re-measure that
would run past it is not started, or is stopped at its deadline, and the case ends ``busy``, saying so.
"""

from __future__ import annotations

from dataclasses import dataclass

#: The default bound: the first attempt and up to three as long again (--latency-busy-retries 2 at equal speed
#: fits with room for re-measures 1.5x slower than the first).
DEFAULT_FACTOR = 4.0


def parse_factor(text: str) -> float:
    """``4x`` or ``4`` -> 4.0; below 1 (shorter than the first attempt itself) is a ValueError."""
    try:
        value = float(text.strip().lower().removesuffix("x"))
    except ValueError:
        value = float("nan")
    if not value >= 1.0:  # also NaN
        raise ValueError(f"{text!r}: a case's bound is a factor of its first attempt's time, at least 1x (e.g. 4x)")
    return value


@dataclass(frozen=True)
class WallBound:
    """One case's bound: it began at ``start`` (a ``time.perf_counter`` reading), its first attempt took
    ``first_s``, and it may take ``factor`` times that in all."""

    start: float
    first_s: float
    factor: float

    @property
    def limit_s(self) -> float:
        return self.factor * self.first_s

    @property
    def deadline(self) -> float:
        """The ``perf_counter`` reading past which a re-measure stops."""
        return self.start + self.limit_s

    def refuses(self, now: float, last_s: float) -> bool:
        """Whether a re-measure begun at ``now``, as long as the last attempt (``last_s``), would end past the
        deadline: it is then not begun."""
        return now + last_s > self.deadline

    def explain(self, now: float, attempts: int, during: bool) -> str:
        """What the case says when its bound stopped it, after ``attempts`` complete attempts, ``during`` the next
        one or before it."""
        return (f"stopped re-measuring {'during' if during else 'before'} attempt {attempts + 1} at "
                f"{now - self.start:.1f} s: a case may take {self.factor:g}x its first attempt's {self.first_s:.1f} s "
                f"(--latency-case-bound {self.factor:g}x); the machine is too busy to time it")

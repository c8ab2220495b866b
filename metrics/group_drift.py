"""A slowdown of a whole group of latency cases (an engine's device-bound cases, or one model's): the median change
over the group against the kept nights, judged with the group's own between-night noise (issue 42).

Why: one case's interval must hold its own noise, so a 2 % slowdown of every case of an engine passes each case's
gate (device-bound replays moved up to 2.6 % between unchanged nights on one H200, 37 cases, Bonferroni) while the
median over the engine's cases moved 0.2 % at most over the same six nights (docs/nightly.md "Groups"). A driver, a
library or an engine option that slows every kernel a little is exactly such a change. The group's statistic is the
median over its cases of each case's log change against the mean of its kept nights (the number the case's own gate
compares); its noise is the same statistic for each kept night against the others (leave one out), so the model holds
what the nights held, whatever made them differ. Median, not mean: a case that moved alone (its own change, or its
own noise) does not move the group.

The decision mirrors the per-case rule (metrics/regression.py): a regression when the interval lies above 0 and the
change is at least ``min_effect``; an improvement the mirror image; else unchanged. The interval is Student's t with
the kept nights' degrees of freedom at the night's Bonferroni level over the groups judged, on the root mean square of
the leave-one-out changes, never under ``MIN_HALF``. A group is not judged with fewer than ``MIN_NIGHTS`` kept nights
or ``MIN_CASES`` cases that every kept night holds.

Pure stdlib, like the rest of metrics/.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from metrics.distributions import student_t_quantile

#: Kept nights a group needs before it is judged: with 3, t has 2 degrees of freedom and the interval is 4-30x the
#: noise it rests on; fewer is no estimate.
MIN_NIGHTS = 3
#: Cases (held by every kept night) a group needs: a median of fewer follows one case's noise.
MIN_CASES = 5
#: The narrowest half-width (log): six unchanged nights of device-bound torch groups on one H200 moved 0.0-0.5 %;
#: nights that happened to agree must not make the group fail on less.
MIN_HALF = math.log1p(0.005)


@dataclass(frozen=True)
class GroupCase:
    """One case of a group: its log change against the mean of its kept nights (``current``), and those nights' log
    medians, oldest first (paced where the case's gate paced them)."""

    label: str
    current: float
    nights: tuple[float, ...]


@dataclass(frozen=True)
class GroupDrift:
    group: tuple[str, ...]
    cases: int
    nights: int
    change: float  # log: median over the cases of each case's change
    half: float | None  # log half-width; None where not judged
    verdict: str  # "regression" | "improvement" | "unchanged" | "not-judged"
    why: str
    largest: tuple[tuple[str, float], ...] = ()  # the cases that moved most, (label, log change)

    @property
    def change_pct(self) -> float:
        return math.expm1(self.change) * 100.0

    def explain(self) -> str:
        """One line: the group, its median change, the interval, and the cases that moved most."""
        name = "/".join(self.group)
        if self.half is None:
            return f"{name}: {self.cases} case(s), not judged ({self.why})"
        moved = ", ".join(f"{label} {math.expm1(c) * 100:+.1f}%" for label, c in self.largest)  # a judged group has 5+
        return (f"{name}: median {self.change_pct:+.2f}% over {self.cases} cases, between-night interval "
                f"+-{math.expm1(self.half) * 100:.2f}% from {self.nights} kept nights: {self.verdict}"
                + (f" ({self.why})" if self.verdict == "regression" else "") + f"; most moved: {moved}")


def leave_one_out(nights: Sequence[float]) -> list[float]:
    """Each night's log median minus the mean of the other nights'."""
    total = sum(nights)
    return [v - (total - v) / (len(nights) - 1) for v in nights]


def judge_groups(groups: Mapping[tuple[str, ...], Sequence[GroupCase]], confidence: float,
                 min_effect: float) -> list[GroupDrift]:
    """Every group's drift, judged at the Bonferroni level over the groups that can be judged."""
    ready: dict[tuple[str, ...], list[GroupCase]] = {}
    drifts: dict[tuple[str, ...], GroupDrift] = {}
    for name, cases in groups.items():
        most = max((len(c.nights) for c in cases), default=0)
        full = [c for c in cases if len(c.nights) == most]
        if most < MIN_NIGHTS or len(full) < MIN_CASES:
            drifts[name] = GroupDrift(name, len(full), most, 0.0, None, "not-judged",
                                      f"needs {MIN_NIGHTS} kept nights and {MIN_CASES} cases every one holds")
            continue
        ready[name] = full
    level = 1.0 - (1.0 - confidence) / (2.0 * max(len(ready), 1))
    for name, full in ready.items():
        n = len(full[0].nights)
        per_case = [leave_one_out(c.nights) for c in full]
        loo = [statistics.median(devs[j] for devs in per_case) for j in range(n)]
        rms = math.sqrt(sum(d * d for d in loo) / n)
        half = max(student_t_quantile(level, n - 1) * rms * math.sqrt((1 + 1 / n) / (1 + 1 / (n - 1))), MIN_HALF)
        change = statistics.median(c.current for c in full)
        effect = math.log1p(min_effect)
        if change - half > 0.0 and change >= effect:
            verdict, why = "regression", f"the whole group slower by more than its interval and {min_effect:.1%}"
        elif change + half < 0.0 and change <= -effect:
            verdict, why = "improvement", f"the whole group faster by more than its interval and {min_effect:.1%}"
        else:
            verdict, why = "unchanged", "within its interval or under the effect that counts"
        largest = tuple(sorted(((c.label, c.current) for c in full), key=lambda x: -abs(x[1]))[:3])
        drifts[name] = GroupDrift(name, len(full), n, change, half, verdict, why, largest)
    return [drifts[name] for name in groups]

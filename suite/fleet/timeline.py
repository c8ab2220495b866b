"""Where a process's and a run's time went: the phase clock (each test's call, its engine builds taken out) and
the timeline (each test's setup, call and teardown in each worker, idle gaps included)."""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping
from typing import Any

import pytest

PHASES = ("building", "accuracy/parity", "latency", "other")


class PhaseClock:
    """Wall time per phase in one process: a test's call time, minus the engine builds inside it, goes to
    its kind (accuracy/parity, latency); the builds go to 'building'. Each unit's seconds, builds left out,
    are the next run's scheduling cost: after a cold night, a build-heavy cell is not scheduled as a long one."""

    def __init__(self) -> None:
        self.seconds = dict.fromkeys(PHASES, 0.0)
        self.per_unit: dict[str, float] = {}

    def add(self, kind: str, seconds: float, building: float, unit: str | None) -> None:
        self.seconds["building"] += building
        self.seconds[kind] += max(0.0, seconds - building)
        if unit:
            # the next run's cost of the unit: a warm run's, so the one-off builds are left out
            self.per_unit[unit] = self.per_unit.get(unit, 0.0) + max(0.0, seconds - building)

    @staticmethod
    def kind_of(item: pytest.Item) -> str:
        if item.get_closest_marker("latency"):
            return "latency"
        if item.get_closest_marker("accuracy") or item.get_closest_marker("parity"):
            return "accuracy/parity"
        return "other"


class Timeline:
    """When each test's setup, call and teardown ran, and in which worker (the controller's view, from the
    reports' start and stop): where a worker's wall time went, setup and teardown (engine loads, releases) and
    idle gaps included, which the phase clock (calls only) does not see."""

    def __init__(self) -> None:
        self.rows: list[tuple[str, str, str, float, float]] = []  # nodeid, worker, when, start, stop (epoch s)
        # milestones outside the tests (epoch s), first wins; a worker's own, sent when it ends, say "(own clock)"
        self.marks: dict[str, float] = {}

    def mark(self, name: str, when: float | None = None) -> None:
        """A milestone of the run outside its tests (a worker up, a collection in, the start-up check done, the
        last worker down): where the wall time that no worker span holds went."""
        self.marks.setdefault(name, time.time() if when is None else when)

    def outside_tests(self, started: float, ended: float) -> dict[str, float]:
        """Each milestone in seconds after the run started, with the first test's start and the last test's
        stop among them, and the run's end: the time before the first test and after the last, and what filled
        it."""
        marks = dict(self.marks)
        if self.rows:
            marks["first test started"] = min(r[3] for r in self.rows)
            marks["last test ended"] = max(r[4] for r in self.rows)
        marks["run ended"] = ended
        return {name: round(when - started, 2) for name, when in sorted(marks.items(), key=lambda kv: kv[1])}

    def add(self, report: pytest.TestReport) -> None:
        start, stop = getattr(report, "start", None), getattr(report, "stop", None)
        if start is None or stop is None:
            return
        gateway = getattr(getattr(report, "node", None), "gateway", None)
        self.rows.append((report.nodeid, str(getattr(gateway, "id", "main")), report.when, float(start), float(stop)))

    def per_worker(self) -> dict[str, dict[str, float]]:
        """Each worker's span (first start to last stop), its seconds in setup, call and teardown, and the rest
        of the span (idle: waiting for work, or between a test's phases)."""
        out: dict[str, dict[str, float]] = {}
        for worker in sorted({r[1] for r in self.rows}):
            rows = [r for r in self.rows if r[1] == worker]
            span = max(r[4] for r in rows) - min(r[3] for r in rows)
            spent = {when: sum(r[4] - r[3] for r in rows if r[2] == when) for when in ("setup", "call", "teardown")}
            out[worker] = {"span_s": round(span, 1), **{f"{k}_s": round(v, 1) for k, v in spent.items()},
                           "idle_s": round(span - sum(spent.values()), 1)}
        return out

    @staticmethod
    def outside_summary(milestones: dict[str, float]) -> str | None:
        """One line: the seconds before the first test and after the last, and the milestones between."""
        if "first test started" not in milestones or "last test ended" not in milestones:
            return None
        first, last = milestones["first test started"], milestones["last test ended"]
        before = ", ".join(f"{name} {at:.1f}" for name, at in milestones.items()
                           if at <= first and name != "first test started")
        after = ", ".join(f"{name} +{at - last:.1f}" for name, at in milestones.items()
                          if at >= last and name not in ("last test ended", "run ended"))
        total = milestones["run ended"]
        return (f"outside the tests: {first:.1f} s before the first (s after the start: {before or 'none'}), "
                f"{total - last:.1f} s after the last ({after or 'none'}); tests {last - first:.1f} s of "
                f"{total:.1f} s")

    def tests(self) -> list[list[Any]]:
        """One row per test phase: [nodeid, worker, when, start (s after the first), seconds]."""
        first = min((r[3] for r in self.rows), default=0.0)
        return [[n, w, when, round(a - first, 3), round(b - a, 4)] for n, w, when, a, b in self.rows]

    def summary(self) -> str | None:
        workers = self.per_worker()
        if not workers:
            return None
        return "worker time (span: setup, calls, teardown, idle): " + "; ".join(
            f"{w} {t['span_s']:.1f} s: {t['setup_s']:.1f}, {t['call_s']:.1f}, {t['teardown_s']:.1f}, "
            f"{t['idle_s']:.1f}" for w, t in workers.items())


def timed_call(item: pytest.Item, clock: PhaseClock, build_seconds: Any, unit: str | None) -> Any:
    """Context for pytest_runtest_call: how long the test took, and how much of it was building."""

    class _Timer:
        def __enter__(self) -> None:
            self.start, self.built = time.perf_counter(), build_seconds()

        def __exit__(self, *exc: object) -> None:
            clock.add(PhaseClock.kind_of(item), time.perf_counter() - self.start, build_seconds() - self.built,
                      unit)

    return _Timer()


def set_up_seconds(records: Iterable[Mapping[str, Any]]) -> dict[str, float]:
    """"engine path" -> seconds the latency cases' device paths took to set up (``prepare_s``: staging, a capture,
    ONNX Runtime's graph session), outside every round: a night's time that no sample shows."""
    totals: dict[str, float] = {}
    for r in records:
        if r.get("kind") == "latency" and r.get("prepare_s") is not None:
            key = f"{r.get('engine')} {r.get('path')}"
            totals[key] = totals.get(key, 0.0) + float(r["prepare_s"])
    return {k: round(v, 1) for k, v in sorted(totals.items(), key=lambda kv: -kv[1])}

"""What a test calls to be judged: ``gate.check()`` at its end compares every record the test appended to the
session with its baseline counterpart, reports each comparison into the run's verdict (suite/verdict.py) as a
component of the test, and fails the test with the numbers when a gate trips; ``settle_latency`` re-measures a
latency case measured busy."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from typing import Any

import pytest

from metrics.latency import two_modes
from suite import verdict
from suite.gate.baselines import key_label, latency_key
from suite.gate.cpu_meter import CpuMeter
from suite.gate.latency import LatencyOutcome, implausibly_fast, unproven_speedup
from suite.gate.state import gate_of
from suite.gate.wall_bound import WallBound
from suite.options import options_of
from suite.state import suite_session

#: The meter started when a latency case's timed callable is made (suite/gate/plugin.py latency_wrapper).
METER_KEY = pytest.StashKey["CpuMeter"]()
#: The share of the CPUs others used during the case's last attempt.
INTERFERENCE_KEY = pytest.StashKey["float | None"]()
#: What the case's bound said when it stopped its re-measures (suite/gate/wall_bound.py), or None.
STOPPED_KEY = pytest.StashKey["str | None"]()


class GateCheck:
    """What the ``gate`` fixture gives a test: ``settle_latency`` re-measures a busy case, ``check()``
    compares the records the test appended and reports each comparison into the run's verdict."""

    def __init__(self, request: pytest.FixtureRequest) -> None:
        self._request = request
        self._suite = suite_session(request.config)
        self._first = len(self._suite.records)
        given, gate = options_of(request.config), gate_of(request.config)
        self._saving = bool(given.benchmark_save or given.benchmark_autosave)
        # Pad short cases' CPU windows only where the figure is used: gating now, or a saved baseline.
        self._pad = bool((gate is not None and gate.latency_baseline is not None) or self._saving)

    def settle_latency(self, record: dict[str, Any],
                       remeasure: Callable[[float | None], list[float] | None]) -> list[dict[str, Any]]:
        """Measure the CPU share others used during the case; while the case must be timed again (measured busy
        where that could change the outcome, or device-bound with its rounds in two modes: Gate.remeasure_why),
        re-measure (at most --latency-busy-retries times), updating ``record["samples_s"]``. The case's bound
        (--latency-case-bound times its first attempt, suite/gate/wall_bound.py) ends the re-measures: one that would
        end past it is not begun, and ``remeasure(deadline)`` stops at the deadline, returning None; the case then
        ends busy, on its last complete attempt (``check``). Returns one entry per attempt: the share, the median,
        the rounds' two modes (or None), why it was timed again (or None) and what stopped it (or None)."""
        node, gate = self._request.node, gate_of(self._request.config)
        meter = node.stash.get(METER_KEY, None)
        share = meter.stop(pad=self._pad) if meter is not None else None
        now = time.perf_counter()  # each attempt's time includes its meter's window (padded to 0.2 s), the first too
        attempts = [_attempt(record, share)]
        bound = None if gate is None or meter is None else WallBound(meter.started, now - meter.started,
                                                                     gate.case_bound)
        last_s = now - meter.started if meter is not None else 0.0
        while gate is not None and len(attempts) <= gate.busy_retries:
            why = gate.remeasure_why(record, share, self._saving)
            if why is None:
                break
            attempts[-1]["remeasured_because"] = why
            if bound is not None and bound.refuses(time.perf_counter(), last_s):
                attempts[-1]["stopped"] = bound.explain(time.perf_counter(), len(attempts), during=False)
                break
            begun, meter = time.perf_counter(), CpuMeter()
            samples = remeasure(None if bound is None else bound.deadline)
            if samples is None:  # the bound stopped it: the record keeps its last complete attempt
                assert bound is not None
                attempts[-1]["stopped"] = bound.explain(time.perf_counter(), len(attempts), during=True)
                break
            record["samples_s"] = list(samples)
            share = meter.stop(pad=self._pad)
            last_s = time.perf_counter() - begun
            attempts.append(_attempt(record, share))
        node.stash[INTERFERENCE_KEY] = share
        node.stash[STOPPED_KEY] = attempts[-1].get("stopped")
        if self._saving and gate is not None and share is not None and share > gate.busy_limit \
                and record.get("bound") != "device":
            key = latency_key(record)
            gate.saved_busy.append(key_label(key) if key else node.name)
        return attempts

    def prove_speedup(self, record: dict[str, Any], attempts: list[dict[str, Any]],
                      prove: Callable[[], list[float]]) -> None:
        """A case more than IMPLAUSIBLE_SPEEDUP times faster than its baseline (suite/gate/latency.py) is timed once
        more by ``prove``: every round on a feed no other call ran, every timed round's outputs kept for the test's
        check. Its samples replace the record's, and ``attempts`` gains the attempt; the gate then judges that one
        (``unproven_speedup``: not judged where the proof could not be made)."""
        gate = gate_of(self._request.config)
        comparison = gate.compare(record) if gate is not None else None
        if comparison is None or not implausibly_fast(comparison) or attempts[-1].get("stopped"):
            return  # a case its bound stopped is busy: no proof could make it judged
        attempts[-1]["remeasured_because"] = (f"{1 / comparison.ratio:.1f}x faster than its baseline: every round "
                                              "timed again on a feed of its own, its outputs checked")
        meter = CpuMeter()
        record["samples_s"] = list(prove())
        share = meter.stop(pad=self._pad)
        self._request.node.stash[INTERFERENCE_KEY] = share
        attempts.append(_attempt(record, share))

    def smoke(self, cell: Any, shape: str, path: str) -> None:
        """A latency case run once with --benchmark-disable: nothing timed, so a latency gate cannot judge it."""
        gate = gate_of(self._request.config)
        if gate is not None and gate.latency_baseline is not None:
            label = key_label((cell.model, cell.engine, cell.precision, shape, path))
            verdict.report_component(self._request.node, verdict.Component(
                f"latency gate {label}", verdict.NOT_JUDGED, "benchmark-disabled",
                "--benchmark-disable ran the case once, untimed"))

    def check(self) -> None:
        request, gate = self._request, gate_of(self._request.config)
        if gate is None:
            return
        node = request.node
        failures = []
        for record in self._suite.records[self._first:]:
            if record.get("kind") == "latency":
                interference = node.stash.get(INTERFERENCE_KEY, None)
                outcome, message = gate.check_latency(record, node.nodeid, interference,
                                                      attempts=len(record.get("attempts") or [1]))
                component = outcome.component() if outcome is not None else None
                if outcome is not None:
                    component = unproven_speedup(outcome, record) or component
                _annotate_benchmark(request, interference, outcome)
            else:
                component, message = gate.check_drift(record, node.nodeid)
            stopped = node.stash.get(STOPPED_KEY, None) if record.get("kind") == "latency" else None
            components = [component] if component is not None else []
            if stopped:  # busy past its bound: not judged (busy), saying so first; a failure of the gate's still
                # fails, and a case with nothing to compare with (a run saving its first baseline) stays no-baseline
                key = latency_key(record)
                label = key_label(key) if key else node.name
                gate.stopped[label] = stopped
                bound = verdict.Component(f"latency bound {label}", verdict.NOT_JUDGED, "busy", stopped)
                no_baseline = component is not None and component.reason == "no-baseline"
                components = [*components, bound] if no_baseline else [bound, *components]
            for each in components:
                verdict.report_component(node, each)
            if message:
                failures.append(message)
        if failures:
            pytest.fail("\n".join(failures), pytrace=False)


def _attempt(record: dict[str, Any], share: float | None) -> dict[str, Any]:
    """One timing of a latency case, as its record keeps it."""
    modes = two_modes(record["samples_s"])
    return {"interference": share, "median_ms": statistics.median(record["samples_s"]) * 1e3,
            "two_modes": None if modes is None else modes.as_dict(), "remeasured_because": None}


def _annotate_benchmark(request: pytest.FixtureRequest, interference: float | None,
                        outcome: LatencyOutcome | None) -> None:
    """Saved benchmarks carry the interference figure, so they can serve as baselines that know it."""
    if "benchmark" not in request.fixturenames:
        return
    info: dict[str, Any] = {"interference": interference}
    if outcome is not None:
        info["verdict"] = outcome.status
        if outcome.comparison is not None:
            info["ratio"] = outcome.comparison.ratio
    request.getfixturevalue("benchmark").extra_info["gate"] = info

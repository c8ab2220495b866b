"""A latency case's wall-time bound (suite/gate/wall_bound.py, GateCheck.settle_latency, issue 47): re-measures under
load stop at --latency-case-bound times the case's first attempt, and the case ends busy saying so, never a silent
30-minute run. Every test here runs on a fake clock (no timing: the default marker); the one that times a real run
beside a busy loop is marked ``timing``."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from metrics.drift import DriftTolerances
from suite import verdict
from suite.gate import check as check_module
from suite.gate.baselines import LatencyBaseline
from suite.gate.check import INTERFERENCE_KEY, METER_KEY, STOPPED_KEY, GateCheck
from suite.gate.state import GATE_KEY, Gate
from suite.gate.tables import busy_run_line
from suite.gate.wall_bound import DEFAULT_FACTOR, WallBound, parse_factor
from suite.state import SESSION_KEY
from tests.selftest.fake_options import options_stash
from tests.selftest.suite_runs import ROOT, explain, run_suite

pytestmark = pytest.mark.selftest

KEY = ("m", "onnxruntime", "fp32", "bs1", "all")
RECORD = {"kind": "latency", "model": "m", "engine": "onnxruntime", "precision": "fp32", "batch_size": 1,
          "path": "all", "shape": "bs1", "bound": "host"}
QUIET = [0.010 + 0.0001 * (i % 3) for i in range(30)]
SLOW = [1.5 * x for x in QUIET]  # +50% measured busy (within what load explains): re-measured


@pytest.mark.parametrize("text,factor", [("4x", 4.0), ("4", 4.0), ("2.5X", 2.5), (" 1x ", 1.0)])
def test_the_bound_option_reads_a_factor(text, factor):
    assert parse_factor(text) == factor
    assert DEFAULT_FACTOR == 4.0


@pytest.mark.parametrize("text", ["0.99x", "0", "-2", "nan", "fast", ""])
def test_a_bound_below_the_first_attempt_is_refused(text):
    with pytest.raises(ValueError):
        parse_factor(text)


def test_a_bad_bound_is_one_usage_error(tmp_path):
    done = run_suite(tmp_path, "--latency-case-bound", "0.5x", "--collect-only")
    assert done.returncode == 4, explain(done)
    assert ("ERROR: --latency-case-bound '0.5x': a case's bound is a factor of its first attempt's time, at least 1x "
            "(e.g. 4x)") in done.stderr + done.stdout, explain(done)


def test_the_bound_refuses_a_re_measure_that_would_end_past_it_and_no_other():
    bound = WallBound(start=100.0, first_s=10.0, factor=4.0)
    assert bound.limit_s == 40.0 and bound.deadline == 140.0
    assert not bound.refuses(120.0, 20.0)  # ends exactly at the deadline
    assert bound.refuses(120.0, 20.001)
    assert not bound.refuses(110.0, 10.0) and not bound.refuses(120.0, 10.0)  # equal attempts: 3 fit in 4x
    assert bound.refuses(131.0, 10.0)
    assert bound.explain(141.25, 2, during=True) == (
        "stopped re-measuring during attempt 3 at 41.2 s: a case may take 4x its first attempt's 10.0 s "
        "(--latency-case-bound 4x); the machine is too busy to time it")
    assert bound.explain(135.0, 2, during=False).startswith("stopped re-measuring before attempt 3 at 35.0 s")


class Clock:
    """A fake ``time.perf_counter``: the tests move it."""

    def __init__(self, now: float) -> None:
        self.now = now

    def perf_counter(self) -> float:
        return self.now


class BusyMeter:
    """A CpuMeter that always finds others using 90% of the CPUs (``started`` on the fake clock)."""

    clock: Clock

    def __init__(self) -> None:
        self.started = self.clock.now

    def stop(self, pad: bool = False) -> float:
        self.clock.now += self.PAD_S if pad else 0.0
        return 0.9

    #: what CpuMeter.stop sleeps to measure a short case over 0.2 s (here: on every stop)
    PAD_S = 0.0


def _gate(retries: int = 2, factor: float = 4.0) -> Gate:
    gate = Gate(max_slowdown=0.05, confidence=0.99, busy_limit=0.2, drift=DriftTolerances(), inject_slowdown=None,
                inject_accuracy_drop=None, environment={}, busy_retries=retries, case_bound=factor)
    gate.latency_baseline = LatencyBaseline(sources=(Path("base.json"),), environment={}, datetime=None,
                                            samples={KEY: [QUIET]}, interference={KEY: 0.0})
    return gate


def _check(gate: Gate, node: Any, records: list[dict[str, Any]] | None = None) -> GateCheck:
    """The gate fixture of a test that appends ``records`` (after it starts: check() compares only those)."""
    session = SimpleNamespace(records=[], precision_check=lambda cell: None)
    config = SimpleNamespace(stash={GATE_KEY: gate, SESSION_KEY: session, **options_stash()})
    check = GateCheck(SimpleNamespace(config=config, node=node, fixturenames=[]))  # type: ignore[arg-type]
    session.records.extend(records or [])
    return check


def _node(stash: dict[Any, Any]) -> SimpleNamespace:
    return SimpleNamespace(stash=stash, name="t", nodeid="t::a", user_properties=[])


def _settle(monkeypatch, gate: Gate, attempt_s: list[float], stop_during: bool = False, first_s: float = 10.0,
            pad_s: float = 0.0):
    """A case whose first attempt took ``first_s`` (on the fake clock) and whose re-measures take ``attempt_s`` each,
    every one measured busy, each meter padding its window by ``pad_s``; ``stop_during``: a re-measure honours its
    deadline, as suite/checks/latency_protocol.py's does."""
    clock = Clock(100.0)
    BusyMeter.clock = clock
    monkeypatch.setattr(BusyMeter, "PAD_S", pad_s)
    monkeypatch.setattr(check_module, "time", clock)
    monkeypatch.setattr(check_module, "CpuMeter", BusyMeter)
    node = _node({METER_KEY: BusyMeter()})
    clock.now = 100.0 + first_s
    durations, deadlines = iter(attempt_s), []

    def remeasure(deadline: float | None) -> list[float] | None:
        deadlines.append(deadline)
        took = next(durations)
        if stop_during and deadline is not None and clock.now + took > deadline:
            clock.now = deadline + 0.5  # the round that crossed it
            return None
        clock.now += took
        return list(SLOW)

    record = {**RECORD, "samples_s": list(SLOW)}
    attempts = _check(gate, node).settle_latency(record, remeasure)
    return record, attempts, node, deadlines


def test_equal_attempts_all_fit_in_the_default_bound(monkeypatch):
    record, attempts, node, deadlines = _settle(monkeypatch, _gate(), [10.0, 10.0])
    assert len(attempts) == 3 and not any(a.get("stopped") for a in attempts)
    assert deadlines == [140.0, 140.0] and node.stash[STOPPED_KEY] is None


def test_a_short_case_is_not_stopped_by_its_meters_padding(monkeypatch):
    """A 0.1 s case: each attempt's meter pads its window to 0.2 s more; counted in every attempt, the first too, the
    three attempts fit in 4x (counted in the re-measures alone, the padding stopped such cases on a loaded VM)."""
    record, attempts, node, _ = _settle(monkeypatch, _gate(), [0.1, 0.1], first_s=0.1, pad_s=0.2)
    assert len(attempts) == 3 and not any(a.get("stopped") for a in attempts)


def test_a_slower_re_measure_stops_the_next_one_before_it_begins(monkeypatch):
    """First attempt 10 s, the first re-measure 25 s (load rose): a second one of 25 s would end at 60 s > 40 s."""
    record, attempts, node, _ = _settle(monkeypatch, _gate(), [25.0, 25.0])
    assert len(attempts) == 2
    assert attempts[-1]["remeasured_because"] == "busy: other processes used 90% of the CPUs"
    assert attempts[-1]["stopped"] == ("stopped re-measuring before attempt 3 at 35.0 s: a case may take 4x its first "
                                       "attempt's 10.0 s (--latency-case-bound 4x); the machine is too busy to time it")
    assert node.stash[STOPPED_KEY] == attempts[-1]["stopped"] and node.stash[INTERFERENCE_KEY] == 0.9


def test_a_runaway_re_measure_is_stopped_at_the_deadline_and_the_last_complete_attempt_kept(monkeypatch):
    """A re-measure 135x slower than the first attempt (what one busy loop did to a torch case) stops at 4x."""
    gate = _gate()
    record, attempts, node, deadlines = _settle(monkeypatch, gate, [1350.0], stop_during=True)
    assert deadlines == [140.0] and len(attempts) == 1
    assert attempts[0]["stopped"].startswith("stopped re-measuring during attempt 2 at 40.5 s")
    assert record["samples_s"] == SLOW


def test_a_bound_of_1x_re_measures_nothing(monkeypatch):
    record, attempts, node, deadlines = _settle(monkeypatch, _gate(factor=1.0), [10.0])
    assert deadlines == [] and len(attempts) == 1 and attempts[0]["stopped"].startswith("stopped re-measuring before")


def test_a_stopped_case_ends_busy_and_a_regression_beyond_load_still_fails():
    """check(): the bound's component is not judged (busy), beside the gate's own; a regression that load cannot
    explain (against a baseline measured as busy as this run) still fails the test."""
    said = "stopped re-measuring before attempt 3 at 35.0 s: ..."
    node = _node({INTERFERENCE_KEY: 0.9, STOPPED_KEY: said})
    gate = _gate()
    _check(gate, node, [{**RECORD, "samples_s": list(SLOW)}]).check()
    components = [verdict.Component(**c) for _, c in node.user_properties]
    assert [(c.label, c.state, c.reason) for c in components] == [  # the bound's first: the case's line says it
        ("latency bound m-onnxruntime-fp32-bs1-all", verdict.NOT_JUDGED, "busy"),
        ("latency gate m-onnxruntime-fp32-bs1-all", verdict.NOT_JUDGED, "busy")]
    assert components[0].detail == said and gate.stopped == {"m-onnxruntime-fp32-bs1-all": said}
    gate = _gate()
    gate.latency_baseline.interference[KEY] = 0.9  # as busy as this run: load explains nothing
    node = _node({INTERFERENCE_KEY: 0.9, STOPPED_KEY: said})
    with pytest.raises(pytest.fail.Exception, match="m-onnxruntime-fp32-bs1-all"):
        _check(gate, node, [{**RECORD, "samples_s": list(SLOW)}]).check()
    assert [c["state"] for _, c in node.user_properties] == [verdict.NOT_JUDGED, verdict.FAILED]
    ledger = verdict.Ledger()
    ledger.add("t::a", verdict.PASSED)
    for _, c in node.user_properties:
        ledger.add_component("t::a", verdict.Component(**c))
    assert ledger.checks["t::a"].state == verdict.FAILED  # the failure outranks the bound's not judged
    gate.latency_baseline = None  # a run saving its first baseline: nothing to compare with, no-baseline it stays
    node = _node({INTERFERENCE_KEY: 0.9, STOPPED_KEY: said})
    _check(gate, node, [{**RECORD, "samples_s": list(SLOW)}]).check()
    assert [c["reason"] for _, c in node.user_properties] == ["no-baseline", "busy"]


def test_the_run_says_when_its_cases_were_timed_busy():
    gate = _gate()
    quiet = [{**RECORD, "attempts": [{"interference": 0.05}]}, {"kind": "accuracy"}]
    assert busy_run_line(gate, quiet, 1.0, 2) is None
    busy = quiet + [{**RECORD, "attempts": [{"interference": 0.6}, {"interference": 0.1}]},
                    {**RECORD, "attempts": [{"interference": None}, {"interference": 0.3}]}]
    assert busy_run_line(gate, busy, 3.07, 2) == (
        "machine busy: other processes used more than 20% of the CPUs while 2 of 3 latency cases were timed (median "
        "60%), load average 3.1 on 2 cores at the end: this run's times are a busy machine's")
    gate.stopped["m-onnxruntime-fp32-bs1-all"] = "stopped ..."
    assert busy_run_line(gate, quiet, 3.07, 2).endswith(
        "while 0 of 1 latency cases were timed, load average 3.1 on 2 cores at the end: this run's times are a busy "
        "machine's; 1 case(s) stopped re-measuring at their bound (--latency-case-bound 4x), not judged (busy): "
        "m-onnxruntime-fp32-bs1-all")


@pytest.mark.timing
def test_beside_a_busy_loop_an_injected_slowdown_run_stops_its_re_measures_and_says_so(tmp_path):
    """A real run: a baseline saved, then --inject-slowdown 50% beside a busy loop, every case counted busy
    (--latency-busy-limit 0%) and bounded at 1x (no re-measure fits): each case says its bound stopped it, and the run
    says it was busy. Load-dependent (the meter must see the loop), hence ``timing``."""
    tests = (str(ROOT / "tests" / "latency" / "test_latency.py"),)
    base = run_suite(tmp_path, "--benchmark-save", "base", "--accept-not-judged", "no-data,no-baseline", tests=tests)
    assert base.returncode in (0, 75), explain(base)
    loop = subprocess.Popen([sys.executable, "-c", "while 1: pass"])
    try:
        done = run_suite(tmp_path, "--latency-baseline", "latest", "--inject-slowdown", "50%", "--latency-busy-limit",
                         "0%", "--latency-case-bound", "1x", tests=tests)
    finally:
        loop.kill()
        loop.wait()
    assert done.returncode in (1, 75), explain(done)
    busy = [line for line in done.stdout.splitlines() if line.startswith("machine busy: other processes used more "
                                                                          "than 0% of the CPUs while")]
    # a case re-measured (busy at 0%) stops before its second attempt; one the load cannot excuse still fails
    assert len(busy) == 1 and re.search(r"; [1-6] case\(s\) stopped re-measuring at their bound \(--latency-case-bound "
                                        r"1x\), not judged \(busy\): ", busy[0]), explain(done)
    busy_lines = re.findall(r"latency bound \S+: stopped re-measuring before attempt 2 at", done.stdout)
    assert busy_lines or "checks: 0 passed, 6 failed" in done.stdout, explain(done)

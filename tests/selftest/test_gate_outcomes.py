"""The latency gate's outcome mapping (suite/gate/latency.py: LatencyChecks.check_latency, LatencyOutcome.component,
STATE): which comparison becomes which verdict state. Three hand mutations of it lived through the earlier tests (issue
23): busy silently accepted, inconclusive turned into passed, and only busy regressions set aside while busy
improvements were judged. Fast and deterministic: the baselines are made in memory, nothing is timed.
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from metrics.drift import DriftTolerances
from suite import verdict
from suite.gate.baselines import LatencyBaseline, load_latency_baselines
from suite.gate.latency import LatencyOutcome
from suite.gate.state import Gate
from suite.verdict import FAILED, NOT_JUDGED, PASSED, Ledger

pytestmark = pytest.mark.selftest

KEY = ("m", "onnxruntime", "fp32", "bs1", "all")
RECORD = {"kind": "latency", "model": "m", "engine": "onnxruntime", "precision": "fp32", "batch_size": 1,
          "path": "all"}
BASE = list(1e-3 * np.random.default_rng(3).lognormal(0, 0.01, 100))
LIMIT = 0.2  # --latency-busy-limit


def _gate(baseline_interference: float = 0.01, environment: dict[str, str] | None = None) -> Gate:
    baseline = LatencyBaseline(sources=(Path("base.json"),), environment={"onnxruntime": "1.20"}, datetime=None,
                               samples={KEY: [BASE]}, interference={KEY: baseline_interference})
    return Gate(max_slowdown=0.05, confidence=0.99, busy_limit=LIMIT, drift=DriftTolerances(), inject_slowdown=None,
                inject_accuracy_drop=None, environment=environment or {"onnxruntime": "1.20"},
                latency_baseline=baseline)


def _samples(kind: str) -> list[float]:
    """Current samples that compare with BASE as ``kind``: 20 % slower, 20 % faster, the same, or too few rounds
    for an interval (inconclusive)."""
    return {"regression": [x * 1.2 for x in BASE], "improvement": [x * 0.8 for x in BASE], "unchanged": BASE,
            "inconclusive": [x * 1.2 for x in BASE[:4]]}[kind]


def _outcome(gate: Gate, kind: str, interference: float | None = 0.0, **record: Any) -> LatencyOutcome:
    outcome, _ = gate.check_latency({**RECORD, "samples_s": _samples(kind), **record}, "t::a", interference)
    assert outcome is not None
    return outcome


@pytest.mark.parametrize("kind", ["regression", "improvement", "unchanged", "inconclusive"])
def test_on_a_quiet_machine_the_comparison_is_the_outcome(kind: str) -> None:
    gate = _gate()
    outcome = _outcome(gate, kind)
    assert outcome.comparison is not None and outcome.comparison.verdict == kind
    assert (outcome.status, outcome.busy_side) == (kind, None)


def test_every_status_maps_to_its_verdict_state_and_reason() -> None:
    """regression fails; unchanged and improvement pass; busy, inconclusive and no-baseline are not judged, each
    under its own reason, and only the judged ones count as gated."""
    gate = _gate()
    outcomes = {kind: _outcome(gate, kind) for kind in ("regression", "improvement", "unchanged", "inconclusive")}
    outcomes["busy"] = _outcome(gate, "regression", interference=0.9)
    outcomes["no-baseline"] = _outcome(gate, "unchanged", batch_size=64)
    states = {kind: (o.status, o.component().state, o.component().reason) for kind, o in outcomes.items()}
    assert states == {
        "regression": ("regression", FAILED, None),
        "improvement": ("improvement", PASSED, None),
        "unchanged": ("unchanged", PASSED, None),
        "inconclusive": ("inconclusive", NOT_JUDGED, "inconclusive"),
        "busy": ("busy", NOT_JUDGED, "busy"),
        "no-baseline": ("no-baseline", NOT_JUDGED, "no-baseline"),
    }
    assert gate.gated("latency") == 3
    assert "CI" in outcomes["inconclusive"].component().detail
    assert outcomes["busy"].component().detail == "other processes used 90% of the CPUs in each of 1 attempt(s)"
    assert outcomes["no-baseline"].component().detail == "the latency baseline has no such case"
    assert outcomes["regression"].component().label == "latency gate m-onnxruntime-fp32-bs1-all"


@pytest.mark.parametrize("kind", ["inconclusive", "busy"])
def test_a_case_the_gate_could_not_judge_never_makes_a_green_run(kind: str) -> None:
    """Its component turns the passing test 'not judged', and the run is not green unless that reason is named."""
    gate = _gate()
    outcome = _outcome(gate, "inconclusive") if kind == "inconclusive" else _outcome(gate, "improvement", 0.9)
    for accepted, green in (((), False), (tuple(r for r in verdict.REASONS if r != kind), False), ((kind,), True)):
        ledger = Ledger(accepted=accepted)
        ledger.add("t::a", PASSED)
        ledger.add("t::b", PASSED)
        ledger.add_component("t::b", outcome.component())
        assert ledger.checks["t::b"].state == NOT_JUDGED and ledger.checks["t::b"].reason == kind
        assert (ledger.exit_status(0) == 0) is green, accepted


@pytest.mark.parametrize("kind", ["regression", "improvement", "inconclusive"])
def test_while_others_use_the_cpus_every_change_is_set_aside_not_only_a_regression(kind: str) -> None:
    """A neighbour's burst moves a case's time either way over a run (it may also have slowed the rounds the
    interval was made of), so on a busy machine a faster case is no more a finding than a slower one: busy."""
    gate = _gate()
    outcome = _outcome(gate, kind, interference=0.9)
    assert (outcome.status, outcome.busy_side) == ("busy", "current")
    assert outcome.component().state == NOT_JUDGED
    _, message = gate.check_latency({**RECORD, "samples_s": _samples(kind)}, "t::a", 0.9)
    assert message is None


def test_an_unchanged_case_is_judged_however_busy_and_busy_means_above_the_limit() -> None:
    gate = _gate()
    assert _outcome(gate, "unchanged", interference=0.9).status == "unchanged"
    assert _outcome(gate, "improvement", interference=LIMIT).status == "improvement"  # at the limit: not busy
    assert _outcome(gate, "improvement", interference=LIMIT + 1e-9).status == "busy"
    assert _outcome(gate, "improvement", interference=None).status == "improvement"  # not measured: judged


@pytest.mark.parametrize("kind", ["improvement", "unchanged", "inconclusive"])
def test_against_a_busy_baseline_only_a_regression_is_judged(kind: str) -> None:
    gate = _gate(baseline_interference=0.9)
    outcome = _outcome(gate, kind)
    assert (outcome.status, outcome.busy_side) == ("busy", "baseline")
    assert "save a new baseline on a quiet machine" in outcome.component().detail
    assert _outcome(gate, "regression").status == "regression"
    assert _outcome(_gate(baseline_interference=LIMIT), kind).status == kind  # at the limit: not busy


def test_a_device_bound_case_is_judged_whatever_the_cpus_did() -> None:
    for kind in ("improvement", "regression"):
        assert _outcome(_gate(), kind, interference=0.9, bound="device").status == kind
        assert _outcome(_gate(baseline_interference=0.9), kind, bound="device").status == kind


def test_a_regression_fails_with_its_figures_and_nothing_else_does() -> None:
    gate = _gate()
    _, message = gate.check_latency({**RECORD, "samples_s": _samples("regression")}, "t::a", 0.0)
    assert message is not None and message.startswith("m-onnxruntime-fp32-bs1-all: latency regression")
    for kind in ("improvement", "unchanged", "inconclusive"):
        assert gate.check_latency({**RECORD, "samples_s": _samples(kind)}, "t::a", 0.0)[1] is None
    assert [o.status for o in gate.latency] == ["regression", "improvement", "unchanged", "inconclusive"]


def test_a_remeasurement_is_asked_for_only_where_it_could_change_the_outcome() -> None:
    gate = _gate()
    slower = {**RECORD, "samples_s": _samples("regression")}
    assert gate.busy_matters(slower, 0.9, saving=False) is True
    assert gate.busy_matters(slower, LIMIT, saving=False) is False
    assert gate.busy_matters(slower, None, saving=False) is False
    assert gate.busy_matters({**slower, "bound": "device"}, 0.9, saving=False) is False
    assert gate.busy_matters({**RECORD, "samples_s": BASE}, 0.9, saving=False) is False
    assert gate.busy_matters({**slower, "batch_size": 64}, 0.9, saving=False) is True  # no counterpart
    no_baseline = _gate()
    no_baseline.latency_baseline = None
    assert no_baseline.busy_matters(slower, 0.9, saving=True) is True
    assert no_baseline.busy_matters(slower, 0.9, saving=False) is False


def test_an_outcome_keeps_its_case_its_test_and_what_the_cpus_did() -> None:
    gate = _gate(baseline_interference=0.05)
    judged = _outcome(gate, "improvement", interference=0.1)
    outcome, _ = gate.check_latency({**RECORD, "samples_s": _samples("regression"), "batch_size": 64}, "t::b", 0.9,
                                    attempts=3)
    assert outcome is not None
    assert (judged.label, judged.nodeid, judged.interference, judged.baseline_interference, judged.attempts) == (
        "m-onnxruntime-fp32-bs1-all", "t::a", 0.1, 0.05, 1)
    assert (outcome.label, outcome.nodeid, outcome.status, outcome.interference, outcome.attempts) == (
        "m-onnxruntime-fp32-bs64-all", "t::b", "no-baseline", 0.9, 3)
    assert gate.check_latency({**RECORD, "samples_s": BASE}, "t::c", 0.9, attempts=2)[0].attempts == 2  # type: ignore[union-attr]
    assert gate.check_latency({"model": "m", "samples_s": BASE}, "t::d", 0.0) == (None, None)  # not a latency case
    assert [o.nodeid for o in gate.latency] == ["t::a", "t::b", "t::c"]
    assert gate.gated("latency") == 2  # the improvement and the unchanged case; not the one without a baseline


def test_a_case_timed_without_any_baseline_is_not_judged_and_never_passes() -> None:
    """Timing alone judges nothing: with no --latency-baseline (and no --benchmark-compare-fail) every latency case
    is not judged (no-baseline), counted apart from the cases a given baseline lacks; a run of them is green only
    where no-baseline is accepted by name, and only beside something judged."""
    without = _gate()
    without.latency_baseline = None
    outcome, message = without.check_latency({**RECORD, "samples_s": BASE}, "t::a", 0.0)
    assert outcome is not None and message is None
    component = outcome.component()
    assert (outcome.status, outcome.baseline_given, component.state, component.reason) == (
        "no-baseline", False, NOT_JUDGED, "no-baseline")
    assert component.detail == ("no latency baseline given (--latency-baseline or --benchmark-compare-fail); timed, "
                                "not judged")
    assert (without.ungated(), without.gated("latency")) == (1, 0)
    for accepted, outcome_state in (((), NOT_JUDGED), (("no-data",), NOT_JUDGED), (("no-baseline",), PASSED)):
        ledger = Ledger(accepted=accepted)
        ledger.add("t::a", PASSED)
        ledger.add_component("t::a", component)
        ledger.add("t::b", PASSED)  # a judged check beside it: a run of latency alone judged nothing
        assert ledger.checks["t::a"].state == NOT_JUDGED and ledger.checks["t::a"].reason == "no-baseline"
        assert ledger.outcome()[0] == outcome_state and (ledger.exit_status(0) == 0) is (outcome_state == PASSED)
    # A given baseline that lacks the case: the same reason, its own words, and not counted as ungated.
    gate = _gate()
    missing = _outcome(gate, "unchanged", batch_size=64)
    assert (missing.baseline_given, missing.component().detail) == (True, "the latency baseline has no such case")
    assert gate.ungated() == 0
    # Under xdist the outcome travels from the worker to the controller as plain data: the distinction with it.
    controller = _gate()
    controller.import_outcomes(without.export_outcomes())
    assert controller.latency[0].component() == component and controller.ungated() == 1


def test_pytest_benchmarks_compare_fail_judges_a_case_the_gate_has_no_baseline_for() -> None:
    """With --benchmark-compare-fail and no --latency-baseline, pytest-benchmark compares the case
    (suite/hooks/verdict_wiring.py takes its findings, and makes a case its compared run lacks not judged); the gate
    adds nothing. With both options the gate compares as ever."""
    compares = _gate()
    compares.latency_baseline, compares.benchmark_compares = None, True
    assert compares.check_latency({**RECORD, "samples_s": BASE}, "t::a", 0.0) == (None, None)
    assert compares.latency == [] and compares.ungated() == 0
    both = _gate()
    both.benchmark_compares = True
    assert _outcome(both, "regression").status == "regression"


def test_a_components_detail_carries_the_figures() -> None:
    gate = _gate(baseline_interference=0.9)
    assert _outcome(gate, "unchanged").component().detail == (
        "the baseline was measured while other processes used 90% of the CPUs; save a new baseline on a quiet machine")
    quiet = _outcome(_gate(), "regression")
    assert quiet.component().detail == ("median 0.9996 -> 1.2 ms (+20.00%), CI [1.1945, 1.2056]; significantly "
                                        "slower, by more than half the threshold")


def test_a_regressions_message_notes_another_environment() -> None:
    _, same = _gate().check_latency({**RECORD, "samples_s": _samples("regression")}, "t::a", 0.0)
    _, other = _gate(environment={"onnxruntime": "1.31"}).check_latency(
        {**RECORD, "samples_s": _samples("regression")}, "t::a", 0.0)
    assert same is not None and other is not None and "NOTE" not in same
    assert other == same + "\n  NOTE: the baseline comes from a different environment (onnxruntime: 1.20 -> 1.31)"


def test_a_case_the_baseline_timed_another_way_is_not_compared() -> None:
    """A change of timing method (a CUDA-graph replay's launch hidden behind a spin, engines/launch_cover.py) moves
    the median without any engine changing: such a case is not judged, and says why; the same method is compared."""
    gate = _gate()
    gate.latency_baseline = replace(gate.latency_baseline, methods={KEY: ("cuda events (torch), CUDA graph replay",)})
    outcome = _outcome(gate, "regression", clock="cuda events (torch) around a replay queued behind a spin")
    assert (outcome.status, outcome.comparison) == ("no-baseline", None)
    assert outcome.component().state == NOT_JUDGED
    assert outcome.component().detail == ("the latency baseline timed this case another way (cuda events (torch), "
                                          "CUDA graph replay), so its samples are not comparable; save a new baseline")
    assert _outcome(gate, "regression", clock="cuda events (torch), CUDA graph replay").status == "regression"
    assert _outcome(gate, "regression").status == "regression"  # a record that does not say: compared as before
    # baseline runs timed both ways (last:K across the change): their samples pool two methods, so not compared
    gate.latency_baseline = replace(gate.latency_baseline, methods={KEY: ("old way", "new way")})
    mixed = _outcome(gate, "unchanged", clock="new way")
    assert mixed.status == "no-baseline" and mixed.timed_otherwise == ("old way",)


def test_the_baseline_keeps_how_each_run_timed_each_case(tmp_path: Path) -> None:
    def saved(name: str, clock: str) -> Path:  # each run its own rounds: a copy of one run is refused
        path = tmp_path / name
        rounds = BASE[int(name[:4]):int(name[:4]) + 10]
        bench = {"name": "b", "extra_info": {**RECORD, "path": "latency-all", "samples_s": rounds, "clock": clock}}
        path.write_text(json.dumps({"benchmarks": [bench], "machine_info": {}, "datetime": "now"}))
        return path

    base = load_latency_baselines([saved("0001_a.json", "host"), saved("0002_b.json", "host"),
                                   saved("0003_c.json", "events")])
    assert base.methods == {KEY: ("host", "events")}


@pytest.mark.parametrize("kind", ["regression", "improvement", "unchanged"])
def test_a_host_bound_gpu_case_is_judged_only_with_its_classs_model(kind: str) -> None:
    """Issue 42 (suite.gate.bound.gate_rule through check_latency): a host-bound GPU case whose class has no
    between-night model (the gate's ``noise``) is inconclusive whatever it read; with one, its comparison is the
    outcome. The pooled interval of a class the case belongs to is what judges it."""
    host = {"bound": "host", "device": "cuda:0"}
    assert _outcome(_gate(), kind, **host).status == "inconclusive"
    gate = _gate()
    gate.noise = {("cuda", "host", "onnxruntime", "all"): (0.01, 40)}
    outcome = _outcome(gate, kind, **host)
    assert outcome.status == kind and outcome.comparison is not None
    other = _gate()
    other.noise = {("cuda", "device"): (0.01, 40)}  # a model of another class judges nothing here
    assert _outcome(other, kind, **host).status == "inconclusive"
    assert _outcome(_gate(), kind, bound="host", device="cpu").status == kind  # the CPU tier: the plain rule


GPU = {"sm_clock_mhz": 1980.0, "sm_clock_mhz_min": 1755.0, "clock_limited_pct": 34.0, "clock_limits": ["SW power cap"]}
LIMITED = ("timed while the GPU limited its clocks (SW power cap) in 34% of samples, SM clock median 1980 MHz, "
           "lowest 1755")


def test_a_regressions_message_is_its_comparison_and_only_the_notes_that_apply() -> None:
    """Issue 43 (check_latency's message): no clock note and no two-mode note on a case that has neither; a
    device-bound case whose GPU limited its clocks carries both clock notes, joined by '; ', in its message and
    its component."""
    gate = _gate()
    outcome, message = gate.check_latency({**RECORD, "samples_s": _samples("regression")}, "t::a", 0.0)
    assert outcome is not None and outcome.comparison is not None and outcome.clocks is None
    assert message == f"m-onnxruntime-fp32-bs1-all: {outcome.comparison.explain()}"
    device = _gate()
    device.latency_baseline = replace(device.latency_baseline, sm_clock={KEY: 1980.0})
    outcome, message = device.check_latency({**RECORD, "samples_s": _samples("regression"), "bound": "device",
                                             "gpu": GPU}, "t::a", 0.0)
    assert outcome is not None and outcome.comparison is not None and outcome.status == "regression"
    clocks = f"{LIMITED}; SM clock 1980 -> 1980 MHz, clock-normalised change +20.00%"
    assert outcome.clocks == clocks
    assert message == f"m-onnxruntime-fp32-bs1-all: {outcome.comparison.explain()}; {clocks}"
    assert outcome.component().detail.endswith(f"; {clocks}")


def test_a_case_not_compared_still_says_its_gpu_limited_its_clocks() -> None:
    """Issue 43 (check_latency's no-baseline outcome): the limited-clock note of the record's own GPU, not
    judged but shown; none when the GPU did not limit them."""
    gate = _gate()
    outcome, message = gate.check_latency({**RECORD, "model": "other", "samples_s": BASE, "gpu": GPU}, "t::a", 0.0)
    assert outcome is not None and message is None
    assert (outcome.status, outcome.clocks) == ("no-baseline", LIMITED)
    assert outcome.component().detail == f"the latency baseline has no such case; {LIMITED}"
    quiet = {**GPU, "clock_limited_pct": 0.0}
    assert _gate().check_latency({**RECORD, "model": "other", "samples_s": BASE, "gpu": quiet},
                                 "t::a", 0.0)[0].clocks is None  # type: ignore[union-attr]


def test_a_baseline_timed_several_other_ways_names_each() -> None:
    """Issue 43 (component's detail): every way the baseline timed the case, joined by ' / '."""
    outcome = LatencyOutcome("m", "t::a", "no-baseline", timed_otherwise=("host timer", "cuda events"))
    assert outcome.component().detail == ("the latency baseline timed this case another way (host timer / cuda "
                                          "events), so its samples are not comparable; save a new baseline")


def test_a_slowdown_the_sm_clock_explains_says_so_and_is_not_judged() -> None:
    """Issue 43 (component's detail of 'slower-clock'): a device-bound case 20 % slower at a clock 19 % lower took
    fewer cycles; its component says so, with both clocks, and is not judged."""
    gate = _gate()
    gate.latency_baseline = replace(gate.latency_baseline, sm_clock={KEY: 1980.0})
    outcome, message = gate.check_latency({**RECORD, "samples_s": _samples("regression"), "bound": "device",
                                           "gpu": {"sm_clock_mhz": 1600.0}}, "t::a", 0.0)
    assert outcome is not None and message is None and outcome.status == "slower-clock"
    assert outcome.component().state == NOT_JUDGED
    assert outcome.component().detail == ("median 0.9996 -> 1.2 ms (+20.00%), CI [1.1945, 1.2056]; in "
                                          "clock-normalised time it did not get slower; SM clock 1980 -> 1600 MHz, "
                                          "clock-normalised change -3.03%")


def test_a_host_bound_gpu_case_is_judged_at_one_host_speed_and_says_so() -> None:
    """Issue 42: the host's slow mode makes a launch-bound case and the pure-Python reference timed before each of its
    rounds 1.4x slower together; the gate compares the rounds paced to one host speed (suite/gate/bound.py
    host_paced), so the case is unchanged, and its line names the pacing and the raw medians. A real 20 % slowdown with
    the host unchanged stays a regression; without references (an older baseline) the raw rounds are compared as
    before."""
    from metrics.regression import MIN_POOLED

    key = ("m", "torch", "fp16", "bs1", "model")
    runs = [BASE, [x * 1.01 for x in BASE]]
    refs = [[1e-4] * len(BASE), [1.01e-4] * len(BASE)]
    baseline = LatencyBaseline(sources=(Path("a.json"), Path("b.json")), environment={}, datetime=None,
                               samples={key: runs}, interference={}, classes={key: ("cuda", "host")},
                               host_refs={key: refs})
    gate = Gate(max_slowdown=0.05, confidence=0.99, busy_limit=LIMIT, drift=DriftTolerances(), inject_slowdown=None,
                inject_accuracy_drop=None, environment={}, latency_baseline=baseline,
                noise={("cuda", "host"): (0.01, MIN_POOLED)})  # a modelled class: the gate judges it
    record = {"kind": "latency", "model": "m", "engine": "torch", "precision": "fp16", "batch_size": 1,
              "path": "model", "device": "cuda:0", "bound": "host"}
    slow_host = {**record, "samples_s": [x * 1.4 for x in BASE], "host_ref_s": [1.4e-4] * len(BASE)}
    outcome, failure = gate.check_latency(slow_host, "t::a", 0.0)
    assert outcome is not None and failure is None and outcome.status == "unchanged", outcome.component().detail
    detail = outcome.component().detail
    assert "host-paced" in detail and "raw median" in detail
    slower = {**record, "samples_s": [x * 1.2 for x in BASE], "host_ref_s": [1e-4] * len(BASE)}
    outcome, failure = gate.check_latency(slower, "t::b", 0.0)
    assert outcome is not None and outcome.status == "regression" and failure and "host-paced" in failure
    unpaced = {**slow_host, "host_ref_s": None}
    outcome, _ = gate.check_latency(unpaced, "t::c", 0.0)
    assert outcome is not None and outcome.status == "regression"  # the raw 1.4x, as before pacing
    assert "host-paced" not in outcome.component().detail

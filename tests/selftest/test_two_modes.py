"""Rounds in two modes (metrics.latency.two_modes) and what the gate does with them (Gate.remeasure_why,
GateCheck.settle_latency): a device-bound case whose rounds fell in two modes is timed again, as a busy host-bound
case is; its median was neither mode's, and a latency gate read it as a regression. Samples below are the H200s'
(warm2.json.gz of docs/results/2026-11-27g-h200x2/ and warm1.json.gz of docs/results/2026-11-27f-h200x2/, in git
history: docs/results/README.md), in ms."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest

from metrics.drift import DriftTolerances
from metrics.latency import TwoModes, two_modes
from metrics.regression import compare_latency
from suite.gate.baselines import LatencyBaseline
from suite.gate.check import GateCheck
from suite.gate.state import GATE_KEY, Gate
from suite.state import SESSION_KEY
from tests.selftest.fake_options import options_stash

pytestmark = pytest.mark.selftest

#: mobilenet_v2 ORT fp16 bs32 graph on two GPUs: every other round slow, one slow round every 7.93 ms.
ALTERNATING = [5.68, 2.24, 5.43, 2.27, 5.65, 2.24, 5.69, 2.25, 5.68, 2.24, 5.69, 2.24, 5.70, 2.24, 5.71, 2.24, 5.71,
               2.24, 5.69, 2.25, 5.68, 2.25, 5.69, 2.24, 5.70, 2.24, 5.72, 2.24, 5.68, 2.25]
#: The same case on one GPU.
STEADY = [2.21, 2.21, 2.22, 2.21, 2.21, 2.22, 2.21, 2.21, 2.21, 2.21, 2.22, 2.21, 2.21, 2.22, 2.21, 2.21, 2.21, 2.22,
          2.21, 2.21, 2.22, 2.21, 2.21, 2.21, 2.22, 2.21, 2.21, 2.21, 2.22, 2.21]
#: minilm_l6_fused ORT fp16 bs64 model: one round in four slow.
ONE_IN_FOUR = [1.02, 8.95, 1.05, 1.03, 1.03, 4.83, 1.04, 1.03, 1.02, 4.87, 1.04, 1.03, 1.02, 4.87, 1.04, 1.03, 1.02,
               4.87, 1.04, 1.02, 1.02, 4.87, 1.04, 1.03, 1.02, 4.96, 1.04, 1.03, 1.02, 4.78]


def _s(ms: list[float]) -> list[float]:
    return [x / 1e3 for x in ms]


def test_alternating_rounds_are_two_modes_with_the_slow_ones_period():
    modes = two_modes(_s(ALTERNATING))
    assert modes is not None
    assert (modes.rounds, modes.slow_rounds) == (30, 15)
    assert modes.fast_ms == pytest.approx(2.24, abs=0.01) and modes.slow_ms == pytest.approx(5.69, abs=0.01)
    assert modes.every_ms == pytest.approx(7.93, abs=0.02)
    assert modes.explain() == ("rounds in two modes: 15 of 30 at 5.69 ms, the rest at 2.24 ms, one every 7.93 ms of "
                               "rounds")


def test_one_slow_round_in_four_is_two_modes_too():
    modes = two_modes(_s(ONE_IN_FOUR))
    assert modes is not None and modes.slow_rounds == 8 and modes.every_ms == pytest.approx(7.96, abs=0.02)


@pytest.mark.parametrize("ms", [
    STEADY,
    list(2.2 * np.random.default_rng(0).lognormal(0.0, 0.05, 30)),  # a continuum: no step between two groups
    list(np.linspace(2.0, 6.0, 30)),  # a wide continuum: slow rounds 2x the fast ones, but no step between them
    [2.21] * 26 + [5.7] * 4,  # a tail of 4 slow rounds in 30, under a fifth: the median already ignores it
    [2.21, 2.5] * 15,  # two groups, but 1.13x apart: within what the gate's interval is for
    [2.2, 5.7, 2.2, 5.7, 2.2],  # too few rounds to tell
])
def test_what_is_not_two_modes(ms):
    assert two_modes(_s(ms)) is None


def test_the_alternating_case_read_as_a_regression_by_the_gate():
    """Why it matters: against the one-GPU run's rounds the gate called the alternating case a regression of +74%."""
    comparison = compare_latency(_s(STEADY), _s(ALTERNATING))
    assert comparison.verdict == "regression" and comparison.ratio > 1.7


# ---- the gate -------------------------------------------------------------------------------------------------------

KEY = ("m", "onnxruntime", "fp16", "bs32", "graph")
RECORD = {"kind": "latency", "model": "m", "engine": "onnxruntime", "precision": "fp16", "batch_size": 32,
          "path": "graph", "shape": "bs32"}


def _gate(retries: int = 2, baseline: bool = True) -> Gate:
    gate = Gate(max_slowdown=0.05, confidence=0.99, busy_limit=0.2, drift=DriftTolerances(), inject_slowdown=None,
                inject_accuracy_drop=None, environment={}, busy_retries=retries)
    if baseline:
        gate.latency_baseline = LatencyBaseline(sources=(Path("base.json"),), environment={}, datetime=None,
                                                samples={KEY: [_s(STEADY)]}, interference={KEY: 0.0})
    return gate


@pytest.mark.parametrize("baseline", [True, False])
def test_a_device_bound_case_in_two_modes_is_timed_again_with_or_without_a_baseline(baseline):
    gate = _gate(baseline=baseline)
    why = gate.remeasure_why({**RECORD, "bound": "device", "samples_s": _s(ALTERNATING)}, 0.0, saving=False)
    assert why is not None and why.startswith("rounds in two modes: 15 of 30")
    assert gate.remeasure_why({**RECORD, "bound": "device", "samples_s": _s(STEADY)}, 0.0, saving=False) is None


def test_a_host_bound_case_in_two_modes_is_left_to_the_busy_rule():
    """Host-bound rounds fall in two modes often (4.5 % of the sittings' records: the host's own jitter), and the
    gate's interval widens with them; a host-bound case is timed again only when measured busy."""
    gate = _gate()
    record = {**RECORD, "bound": "host", "samples_s": _s(ALTERNATING)}
    assert gate.remeasure_why(record, 0.0, saving=False) is None
    assert gate.remeasure_why(record, 0.9, saving=False) == "busy: other processes used 90% of the CPUs"


def _check(gate: Gate) -> GateCheck:
    config = SimpleNamespace(stash={GATE_KEY: gate, SESSION_KEY: SimpleNamespace(records=[]), **options_stash()})
    return GateCheck(SimpleNamespace(config=config, node=SimpleNamespace(stash={}, name="t")))  # type: ignore[arg-type]


def _settle(gate: Gate, first: list[float], then: list[list[float]]) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    record = {**RECORD, "bound": "device", "samples_s": _s(first)}
    again = iter(then)
    attempts = _check(gate).settle_latency(record, lambda deadline: _s(next(again)))
    return record, attempts


def test_settle_times_a_two_mode_case_again_and_keeps_both_timings():
    record, attempts = _settle(_gate(), ALTERNATING, [STEADY])
    assert record["samples_s"] == _s(STEADY)
    assert len(attempts) == 2
    assert attempts[0]["two_modes"]["slow_rounds"] == 15
    assert attempts[0]["remeasured_because"].startswith("rounds in two modes")
    assert attempts[1]["two_modes"] is None and attempts[1]["remeasured_because"] is None
    assert attempts[1]["median_ms"] == pytest.approx(2.21, abs=0.01)


def test_settle_stops_after_the_retries_and_the_gate_then_says_what_it_judged():
    gate = _gate(retries=1)
    record, attempts = _settle(gate, ALTERNATING, [ALTERNATING, STEADY])
    assert len(attempts) == 2 and attempts[1]["two_modes"] is not None
    outcome, message = gate.check_latency(record, "t::a", 0.0, attempts=len(attempts))
    assert outcome is not None and outcome.status == "regression"
    assert message is not None and "rounds in two modes: 15 of 30" in message and "each of 2 attempt(s)" in message


def test_settle_leaves_a_steady_case_alone():
    record, attempts = _settle(_gate(), STEADY, [])
    assert len(attempts) == 1 and attempts[0]["remeasured_because"] is None and attempts[0]["two_modes"] is None


def test_each_line_of_two_modes_is_pinned_at_both_sides() -> None:
    """metrics.latency.two_modes's thresholds, each met exactly (two modes) and missed by a hair (None): 6 rounds, a
    step of exactly ``min_gap``, a slow median of exactly ``min_ratio`` times the fast one; the figures exact."""
    six = two_modes([1.0, 2.0] * 3)  # the fewest rounds it reads
    assert six == TwoModes(rounds=6, slow_rounds=3, fast_ms=1e3, slow_ms=2e3, every_ms=3e3)
    assert two_modes([1.0, 2.0] * 2 + [1.0]) is None
    # a step of 2x and a slow median 2x the fast one: two modes (below any doubled default)
    assert two_modes([1.0, 2.0] * 10) == TwoModes(rounds=20, slow_rounds=10, fast_ms=1e3, slow_ms=2e3, every_ms=3e3)
    # the widest step exactly min_gap (1.15), the slow side's median 1.3x: two modes; a hair under the gap: none
    assert two_modes([1.0] * 10 + [1.15] + [1.3] * 9) is not None
    assert two_modes([1.0] * 10 + [1.1499] + [1.3] * 9) is None
    # the slow side's median exactly min_ratio (1.25) times the fast side's: two modes; a hair under: none
    assert two_modes([1.0] * 10 + [1.25] * 10) is not None
    assert two_modes([1.0] * 10 + [1.2499] * 10) is None
    # not a finite positive time anywhere: None (a zero, a negative, NaN, infinity), however clear the two modes
    for bad in (0.0, -1.0, float("nan"), float("inf")):
        assert two_modes([1.0, 2.0] * 10 + [bad]) is None, bad
    assert two_modes([[1.0, 2.0]] * 10) is None  # not one row of rounds


def test_two_modes_reads_the_rounds_in_double_precision() -> None:
    """float32 rounds give the figures of the same rounds as float64: medians and period are not rounded to float32."""
    rounds = np.array([1.01, 2.03, 1.02, 2.05] * 5, dtype=np.float32)
    assert two_modes(rounds) == two_modes([float(r) for r in rounds])
    assert two_modes(["1", "2"] * 5) == two_modes([1.0, 2.0] * 5)  # rounds read back as text are numbers


def test_min_share_bounds_each_side_and_one_slow_round_has_no_period() -> None:
    """``min_share``: each side holds at least that share of the rounds (rounded up, and at least one round); with
    one slow round there is no period between slow rounds; with two there is one."""
    one = two_modes([1.0] * 9 + [2.0], min_share=0.1)  # 1 round of 10: allowed at a tenth
    assert one == TwoModes(rounds=10, slow_rounds=1, fast_ms=1e3, slow_ms=2e3, every_ms=None)
    assert one.explain() == "rounds in two modes: 1 of 10 at 2e+03 ms, the rest at 1e+03 ms"
    two = two_modes([1.0, 1.0, 1.0, 1.0, 2.0] * 2, min_share=0.2)
    assert two == TwoModes(rounds=10, slow_rounds=2, fast_ms=1e3, slow_ms=2e3, every_ms=6e3)
    assert two_modes([1.0] * 9 + [2.0], min_share=0.2) is None  # 1 round of 10 is under a fifth
    assert two_modes([1.0, 2.0] * 5, min_share=0.5) == TwoModes(rounds=10, slow_rounds=5, fast_ms=1e3, slow_ms=2e3,
                                                                 every_ms=3e3)  # half and half: both sides hold it
    assert two_modes([1.0, 2.0] * 5, min_share=0.6) is None  # no split leaves 60 % on each side

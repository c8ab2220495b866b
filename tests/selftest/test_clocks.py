"""GPU clocks while a case is timed (issue 26): NVML's SM clock and clocks-event reasons sampled beside each latency
case, a case timed while the GPU limited its clocks says so, and a device-bound regression fails only when it holds
in clock-normalised time (time x SM clock) too. On CPU with a fake NVML and in-memory baselines; nothing is timed.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from metrics.clocks import clock_normalised, clock_summary, confirmed_in_cycles, limited_note, limiting_reasons
from metrics.drift import DriftTolerances
from suite import timing, verdict
from suite.gate.baselines import LatencyBaseline
from suite.gate.state import Gate

pytestmark = pytest.mark.selftest

KEY = ("m", "onnxruntime", "fp16", "bs32", "graph")
RECORD = {"kind": "latency", "model": "m", "engine": "onnxruntime", "precision": "fp16", "batch_size": 32,
          "path": "graph", "bound": "device"}
BASE = list(2e-3 * np.random.default_rng(5).lognormal(0, 0.002, 200))


def test_the_limiting_reasons_are_named_and_idle_is_not_one() -> None:
    assert limiting_reasons(0x1 | 0x2 | 0x100) == []  # idle, application clocks, display clock: not limits
    assert limiting_reasons(0x4 | 0x40) == ["SW power cap", "HW thermal slowdown"]
    summary = clock_summary([1980, 1755, 1980, 1600], [0x1, 0x4, 0x0, 0x4 | 0x20])
    assert summary == {"sm_clock_mhz": 1867.5, "sm_clock_mhz_min": 1600.0, "clock_limited_pct": 50.0,
                       "clock_limits": ["SW power cap", "SW thermal slowdown"]}
    assert clock_summary([], []) == {}
    assert limited_note({"sm_clock_mhz": 1980.0, "clock_limited_pct": 0.0}) is None
    assert limited_note(summary) == ("timed while the GPU limited its clocks (SW power cap, SW thermal slowdown) in "
                                     "50% of samples, SM clock median 1868 MHz, lowest 1600")


def test_a_slowdown_is_counted_in_cycles() -> None:
    """5 % slower at a clock 5 % lower: the same cycles, no regression; at the same clock it stands."""
    ratio, low = clock_normalised(1.05, 1.04, baseline_clock_mhz=1980.0, current_clock_mhz=1980.0 / 1.05)
    assert ratio == pytest.approx(1.0) and low == pytest.approx(1.04 / 1.05)
    assert not confirmed_in_cycles(1.05, 1.04, 1.025, 1980.0, 1980.0 / 1.05)
    assert confirmed_in_cycles(1.05, 1.04, 1.025, 1980.0, 1980.0)
    assert not confirmed_in_cycles(1.05, 1.04, 1.025, 1980.0, 1980.0 / 1.03)  # 2 % left: under the decision ratio


def test_the_clock_summary_and_note_are_exact_at_their_edges() -> None:
    """Reasons in NVML's bit order (not the alphabet's), the limited share to one decimal, none sampled without a
    reason mask, a note that names no reason or clock it was not given; cycles confirm a regression only with the
    interval's low end above 1 and the median at or past the decision ratio."""
    summary = clock_summary([1980.0, 1980.0, 1700.0], [0x8, 0x0, 0x4])
    assert summary["clock_limits"] == ["SW power cap", "HW slowdown"]  # bits 0x4, 0x8: not alphabetical
    assert summary["clock_limited_pct"] == 66.7  # 2 of 3, one decimal
    assert clock_summary([1980.0, 1700.0, 1800.0], [0x0, 0x40, 0x0])["clock_limited_pct"] == 33.3
    assert clock_summary([1980.0], []) == {"sm_clock_mhz": 1980.0, "sm_clock_mhz_min": 1980.0,
                                           "clock_limited_pct": 0.0, "clock_limits": []}  # clocks, no reasons read
    assert limited_note({"clock_limited_pct": 12.5}) == (
        "timed while the GPU limited its clocks (a limiting reason) in 12.5% of samples, SM clock median 0 MHz, "
        "lowest 0")
    assert limited_note({"clock_limited_pct": 3.0, "clock_limits": [], "sm_clock_mhz": 1755.4,
                         "sm_clock_mhz_min": 1500.6}) == (
        "timed while the GPU limited its clocks (a limiting reason) in 3% of samples, SM clock median 1755 MHz, "
        "lowest 1501")
    assert not confirmed_in_cycles(1.05, 1.0, 1.025, 1980.0, 1980.0)  # the interval touches 1: not shown
    assert confirmed_in_cycles(1.05, 1.0001, 1.025, 1980.0, 1980.0)
    assert confirmed_in_cycles(1.025, 1.01, 1.025, 1980.0, 1980.0)  # exactly at the decision ratio: it holds
    assert not confirmed_in_cycles(1.0249, 1.01, 1.025, 1980.0, 1980.0)


class FakeNVML:
    NVML_CLOCK_SM = 1

    def __init__(self, clock: float = 1755.0, reasons: int = 0x4, old_name: bool = False,
                 no_clock: bool = False) -> None:
        self.clock, self.reasons, self.no_clock = clock, reasons, no_clock
        if not old_name:
            self.nvmlDeviceGetCurrentClocksEventReasons = self._reasons

    def nvmlDeviceGetMemoryInfo(self, handle: Any) -> Any:
        return type("Memory", (), {"used": 2**30})()

    def nvmlDeviceGetUtilizationRates(self, handle: Any) -> Any:
        return type("Rates", (), {"gpu": 97})()

    def nvmlDeviceGetClockInfo(self, handle: Any, clock: int) -> float:
        if self.no_clock:
            raise RuntimeError("NVML_ERROR_NOT_SUPPORTED")
        assert clock == self.NVML_CLOCK_SM
        return self.clock

    def _reasons(self, handle: Any) -> int:
        return self.reasons

    def nvmlDeviceGetCurrentClocksThrottleReasons(self, handle: Any) -> int:  # the name before NVML 12.x
        return self.reasons

    def nvmlShutdown(self) -> None:
        pass


def _sampled(monkeypatch: pytest.MonkeyPatch, nvml: FakeNVML) -> dict[str, Any]:
    monkeypatch.setattr(timing, "nvml_handle", lambda device: (nvml, "handle"))
    with timing.GpuMonitor("cuda:0", interval_s=0.001) as monitor:
        deadline = time.monotonic() + 30
        while len(monitor.timeline["t_s"]) < 3 and time.monotonic() < deadline:
            time.sleep(0.005)
    return monitor.summary()


@pytest.mark.parametrize("old_name", [False, True], ids=["clocks-event-reasons", "throttle-reasons"])
def test_the_monitor_samples_the_sm_clock_and_why_it_is_held(monkeypatch: pytest.MonkeyPatch, old_name: bool) -> None:
    summary = _sampled(monkeypatch, FakeNVML(clock=1755.0, reasons=0x4 | 0x1, old_name=old_name))
    assert summary["samples"] >= 3 and summary["sm_clock_mhz"] == 1755.0 and summary["sm_clock_mhz_min"] == 1755.0
    assert summary["clock_limited_pct"] == 100.0 and summary["clock_limits"] == ["SW power cap"]
    assert len(summary["timeline"]["sm_clock_mhz"]) == len(summary["timeline"]["t_s"])


def test_a_driver_without_clocks_leaves_them_out_and_keeps_the_rest(monkeypatch: pytest.MonkeyPatch) -> None:
    summary = _sampled(monkeypatch, FakeNVML(no_clock=True))
    assert summary["samples"] >= 3 and summary["peak_memory_mib"] == 1024.0
    assert "sm_clock_mhz" not in summary and "clock_limits" not in summary


def _gate(base_clock: float | None = 1980.0) -> Gate:
    baseline = LatencyBaseline(sources=(Path("base.json"),), environment={}, datetime=None, samples={KEY: [BASE]},
                               interference={}, sm_clock={KEY: base_clock} if base_clock else {})
    return Gate(max_slowdown=0.02, confidence=0.99, busy_limit=0.2, drift=DriftTolerances(), inject_slowdown=None,
                inject_accuracy_drop=None, environment={}, latency_baseline=baseline)


def _check(gate: Gate, slowdown: float, clock: float | None, limited: float = 0.0, **record: Any) -> Any:
    gpu = {} if clock is None else {"sm_clock_mhz": clock, "sm_clock_mhz_min": clock, "clock_limited_pct": limited,
                                    "clock_limits": ["SW power cap"] if limited else []}
    return gate.check_latency({**RECORD, "samples_s": [x * slowdown for x in BASE], "gpu": gpu, **record}, "t::a",
                              interference=0.0)


def test_a_device_bound_slowdown_the_clock_explains_is_not_judged() -> None:
    outcome, message = _check(_gate(), 1.05, clock=1980.0 / 1.05, limited=62.0)
    assert outcome.comparison.verdict == "regression" and outcome.status == "slower-clock" and message is None
    component = outcome.component()
    assert (component.state, component.reason) == (verdict.NOT_JUDGED, "slower-clock")
    assert "in clock-normalised time it did not get slower" in component.detail
    assert "SM clock 1980 -> 1886 MHz, clock-normalised change +0.00%" in component.detail, component.detail
    assert "timed while the GPU limited its clocks (SW power cap) in 62% of samples" in component.detail
    assert "slower-clock" in verdict.REASONS


def test_a_device_bound_regression_at_the_same_clock_fails_and_says_it_holds_in_cycles() -> None:
    outcome, message = _check(_gate(), 1.05, clock=1980.0)
    assert outcome.status == "regression" and outcome.component().state == verdict.FAILED
    assert "SM clock 1980 -> 1980 MHz, clock-normalised change +5." in message, message


def test_a_regression_fails_where_the_clock_cannot_tell() -> None:
    """No clock in the baseline (or here): the time's regression stands, and says it was not confirmed."""
    outcome, message = _check(_gate(base_clock=None), 1.05, clock=1886.0)
    assert outcome.status == "regression"
    assert "not confirmed in clock-normalised time: the SM clock was not sampled in the baseline" in message
    outcome, message = _check(_gate(), 1.05, clock=None)
    assert outcome.status == "regression" and "was not sampled here" in message


def test_a_host_bound_case_is_judged_on_time_and_still_says_it_was_limited() -> None:
    outcome, message = _check(_gate(), 1.05, clock=1886.0, limited=40.0, bound="host")
    assert outcome.status == "regression" and "limited its clocks (SW power cap) in 40% of samples" in message
    unchanged, _ = _check(_gate(), 1.0, clock=1980.0, limited=10.0, bound="host")
    assert unchanged.status == "unchanged" and "in 10% of samples" in unchanged.component().detail


def test_the_baseline_keeps_each_cases_sm_clock(tmp_path: Path) -> None:
    import json

    from suite.gate.baselines import load_latency_baselines

    def saved(name: str, clock: float | None) -> Path:
        extra = {"model": "m", "engine": "onnxruntime", "precision": "fp16", "batch_size": 32, "path": "latency-graph",
                 "samples_s": BASE[:20], "gpu": {} if clock is None else {"sm_clock_mhz": clock}}
        path = tmp_path / name
        path.write_text(json.dumps({"benchmarks": [{"name": "x", "extra_info": extra}], "machine_info": {}}))
        return path

    baseline = load_latency_baselines([saved("a.json", 1980.0), saved("b.json", 1755.0), saved("c.json", 1900.0),
                                       saved("d.json", None)])
    assert baseline.sm_clock == {KEY: 1900.0}  # the median of the runs that sampled it

"""The launch cover (engines/launch_cover.py): a timed CUDA-graph replay queued behind a spin, so that its CUDA events
bracket the device's time and not the host's launch. CPU: the sizing and the round-by-round check are pure; the torch
runner's graph path runs here against a stand-in ``torch.cuda`` that records the order of what it was given."""

import numpy as np
import pytest
import torch

from engines.base import StaticBatchRunner
from engines.launch_cover import COVER_US, LaunchCover, cycles_per_us
from suite.timing import TimedCall


def test_the_spin_lasts_the_cover_in_the_devices_cycles():
    assert LaunchCover(cycles_per_us=1980.0).cycles() == round(COVER_US * 1980)
    assert LaunchCover(cycles_per_us=1500.0, cover_us=20.0).cycles() == 30_000


def test_a_round_whose_host_outlasted_the_spin_is_counted_and_the_spin_doubles():
    cover = LaunchCover(cycles_per_us=1000.0, cover_us=100.0, max_us=350.0)
    cover.observe(50e-6)  # queued within the spin: covered
    assert cover.cover_us == 100.0 and cover.covered == [True]
    cover.observe(120e-6)  # the host took longer than the spin: the start event fired before the launch was queued
    assert cover.cover_us == 200.0 and cover.covered == [True, False]
    cover.observe(199e-6)
    cover.observe(250e-6)  # doubles again, capped
    assert cover.cover_us == 350.0 and cover.cycles() == 350_000
    assert cover.summary() == {"spin_us": 350.0, "rounds": 4, "uncovered_rounds": 2}
    assert cover.summary(skip=2) == {"spin_us": 350.0, "rounds": 2, "uncovered_rounds": 1}


def test_a_round_exactly_as_long_as_the_spin_is_not_covered():
    cover = LaunchCover(cycles_per_us=1000.0, cover_us=100.0)
    cover.observe(100e-6)
    assert cover.covered == [False]


def test_cycles_per_microsecond_are_measured_after_an_untimed_spin():
    spins = []

    def elapsed_ms(spin, cycles):
        spin(cycles)
        return cycles / 1.8e6  # a device spinning at 1.8 GHz

    assert cycles_per_us(spins.append, elapsed_ms, cycles=900_000) == pytest.approx(1800.0)
    assert spins == [900_000, 900_000]  # the first one untimed
    with pytest.raises(RuntimeError, match="cannot size the launch cover"):
        cycles_per_us(lambda c: None, lambda spin, c: 0.0)
    with pytest.raises(ValueError, match="positive"):
        LaunchCover(cycles_per_us=0.0)


class _Event:
    def __init__(self, log, name):
        self.log, self.name = log, name

    def record(self):
        self.log.append(f"{self.name}.record")

    def synchronize(self):
        pass

    def elapsed_time(self, other):
        return 0.04  # ms


class _Graph:
    def __init__(self, log, host_s=0.0):
        self.log, self.host_s = log, host_s

    def replay(self):
        self.log.append("replay")
        if self.host_s:
            import time

            time.sleep(self.host_s)


class _LoggedCover(LaunchCover):
    log: list = None

    def observe(self, host_s):
        self.log.append("observe")
        super().observe(host_s)


def _graph_runner(monkeypatch, log, host_s=0.0, cover_us=100.0):
    """A TorchRunner whose graph path is prepared (as prepare_path leaves it on a GPU), on a stand-in torch.cuda."""
    from engines.pytorch import backend

    monkeypatch.setattr(torch.cuda, "_sleep", lambda cycles: log.append(f"spin {cycles}"))
    runner = backend.TorchRunner(torch.nn.Identity(), ("x",), ("y",))
    runner._events = (_Event(log, "start"), _Event(log, "end"))
    runner._graph, runner._graph_out = _Graph(log, host_s), torch.zeros(1)
    runner.launch_covers["graph"] = cover = _LoggedCover(cycles_per_us=1000.0, cover_us=cover_us)
    cover.log = log
    return runner


def test_the_torch_graph_replay_is_queued_behind_the_spin_and_its_end_event(monkeypatch):
    log = []
    # a 1 s spin: the stand-in replay's host part (no sleep) is covered however busy the machine is (CI beside a
    # mutation run took over 100 us between the spin and the end event)
    runner = _graph_runner(monkeypatch, log, cover_us=1e6)
    assert runner.run_path("graph") == pytest.approx(0.04e-3)
    # the host's time is checked once the end event is queued too: queued after the replay ended, it would count
    # the host's time again
    assert log == ["spin 1000000000", "start.record", "replay", "end.record", "observe"]
    assert runner.launch_covers["graph"].covered == [True]


def test_the_torch_eager_path_keeps_its_launches_in_the_time(monkeypatch):
    log = []
    runner = _graph_runner(monkeypatch, log)
    runner._static = [torch.zeros(1)]
    runner.run_path("model")
    assert log == ["start.record", "end.record"]  # no spin: the eager launches are the case's own time
    assert runner.launch_covers["graph"].covered == []


def test_a_slow_launch_shows_in_the_cases_record_and_lengthens_the_spin(monkeypatch):
    log = []
    runner = _graph_runner(monkeypatch, log, host_s=0.002)  # a replay whose host part outlasts a 100 us spin
    runner.prepare_path = lambda path, feed: "clock"
    runner.prepare_parts = {}
    call = TimedCall(runner, "graph", {"x": np.zeros(1, np.float32)})
    call.first_timed_round = 1
    for _ in range(3):
        call()
    assert log[5] == "spin 200000"  # doubled after the first round
    assert call.launch_cover_summary() == {"spin_us": 800.0, "rounds": 2, "uncovered_rounds": 2}


def test_a_path_without_a_cover_has_none_in_its_record(monkeypatch):
    log = []
    runner = _graph_runner(monkeypatch, log)
    runner.prepare_path = lambda path, feed: "clock"
    runner.prepare_parts = {}
    assert TimedCall(runner, "model", {"x": np.zeros(1, np.float32)}).launch_cover_summary() is None


def test_a_static_batch_runner_hands_on_the_cover_of_the_engine_that_runs_the_path():
    cover = LaunchCover(cycles_per_us=1000.0)

    class _Runner:
        launch_covers = {"graph": cover}

    wrapper = StaticBatchRunner.__new__(StaticBatchRunner)
    wrapper._prepared = {"graph": _Runner(), "model": _Runner()}
    assert wrapper.launch_covers == {"graph": cover}

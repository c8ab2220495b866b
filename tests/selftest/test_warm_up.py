"""A process pays its one-off CUDA costs while it waits for its first test, and never beside one (issue 22).

The saving itself is a GPU figure (docs/gpu.md); here, on CPU: the warm-up runs in its own thread, a test waits
for it to end, an error in it decides nothing and is kept, only a process that runs tests on a CUDA device warms
up, and the ONNX Runtime warm-up's graph is a valid model.
"""

from __future__ import annotations

import contextlib
import threading
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest

from suite.fleet import plugin as fleet
from suite.fleet.warm_up import WarmUp, first_contact_steps, wanted, warm_up_line
from tests.selftest.fake_options import options_stash

pytestmark = pytest.mark.selftest


class _Blocking:
    """A backend whose warm-up runs until ``release`` is set."""

    def __init__(self) -> None:
        self.started, self.release, self.devices = threading.Event(), threading.Event(), []

    def warm_up(self, device: str) -> None:
        self.devices.append(device)
        self.started.set()
        assert self.release.wait(30)


def _waits_until_released(backend: _Blocking, waiter: Any) -> None:
    """``waiter()`` does not return while the warm-up runs, and returns once it ends."""
    thread = threading.Thread(target=waiter, daemon=True)
    assert backend.started.wait(30)
    thread.start()
    thread.join(0.2)
    assert thread.is_alive(), "returned while the warm-up was still running"
    backend.release.set()
    thread.join(30)
    assert not thread.is_alive()


def test_the_warm_up_runs_in_its_own_thread_and_a_test_waits_for_its_end() -> None:
    slow, plain = _Blocking(), object()  # an engine without warm_up has nothing to pay ahead
    warm = WarmUp(["torch", "tensorrt"], "cuda:0", {"torch": slow, "tensorrt": plain}.__getitem__)
    warm.start()  # returns at once: the warm-up is in its own thread
    _waits_until_released(slow, warm.wait)
    assert slow.devices == ["cuda:0"]
    summary = warm.summary()
    assert list(summary["seconds"]) == ["torch"] and "errors" not in summary, summary
    assert summary["waited_s"] > 0.1, summary  # the test's wait is measured, not assumed
    warm.wait()  # once ended, a wait is free


def test_an_error_in_the_warm_up_decides_nothing_and_is_kept() -> None:
    later = _Blocking()
    later.release.set()

    class Failing:
        def warm_up(self, device: str) -> None:
            raise RuntimeError("CUDA error: out of memory\nCUDA kernel errors might be asynchronously reported")

    warm = WarmUp(["onnxruntime", "torch"], "cuda:1", {"onnxruntime": Failing(), "torch": later}.__getitem__)
    warm.start()
    warm.wait()  # does not raise: the engine's own tests meet the fault and fail on it
    summary = warm.summary()
    assert summary["errors"] == {"onnxruntime": "RuntimeError: CUDA error: out of memory"}, summary
    assert later.devices == ["cuda:1"] and set(summary["seconds"]) == {"onnxruntime", "torch"}
    line = warm_up_line({"gw0": summary})
    assert line.startswith("warm-up (one-off costs paid before the first test): gw0 onnxruntime ")
    assert "(onnxruntime failed: RuntimeError: CUDA error: out of memory)" in line, line


def test_only_a_cuda_device_is_warmed_up_each_engine_once() -> None:
    assert wanted("cpu", ["torch", "onnxruntime"]) == []
    assert wanted("cuda:0", ["torch", "onnxruntime", "torch", "inductor"]) == ["torch", "onnxruntime", "inductor"]


def _plugin(monkeypatch: pytest.MonkeyPatch, backend: Any, *, worker: bool, numprocesses: int | None,
            device: str = "cuda:0", check_early: Any = lambda config: None) -> fleet.FleetPlugin:
    config = SimpleNamespace(stash=options_stash(numprocesses=numprocesses))
    if worker:
        config.workerinput = {"workerid": "gw0"}
    session = SimpleNamespace(config=SimpleNamespace(models={"m": SimpleNamespace(engines=["torch"])}), device=device)
    monkeypatch.setattr(fleet, "suite_session", lambda config: session)
    monkeypatch.setattr(fleet, "get_backend", lambda name: backend)
    monkeypatch.setattr(fleet, "atomic_benchmark_files", lambda config: None)
    plugin = fleet.FleetPlugin(config, 1, lambda config, ids: None, check_early)  # type: ignore[arg-type]
    monkeypatch.setattr(plugin, "_enable_benchmarks_in_worker", lambda: None)
    return plugin


def _session_start(plugin: fleet.FleetPlugin) -> None:
    """The plugin's pytest_sessionstart wrapper, around the other plugins' session start (xdist's among them)."""
    wrapper = plugin.pytest_sessionstart(SimpleNamespace())  # type: ignore[arg-type]
    next(wrapper)
    with contextlib.suppress(StopIteration):
        wrapper.send(None)


@pytest.mark.parametrize(("worker", "numprocesses"), [(True, 2), (False, None)], ids=["xdist-worker", "one-process"])
def test_a_process_that_runs_tests_warms_up_at_session_start_and_setup_waits(
        monkeypatch: pytest.MonkeyPatch, worker: bool, numprocesses: int | None) -> None:
    backend = _Blocking()
    plugin = _plugin(monkeypatch, backend, worker=worker, numprocesses=numprocesses)
    _session_start(plugin)
    _waits_until_released(backend, lambda: plugin.pytest_runtest_setup(SimpleNamespace()))  # type: ignore[arg-type]
    assert plugin.warm_up is not None and list(plugin.warm_ups()["main"]["seconds"]) == ["torch"]


@pytest.mark.parametrize(("worker", "numprocesses", "device"), [(False, 2, "cuda:0"), (True, 2, "cpu")],
                         ids=["xdist-controller", "cpu-device"])
def test_the_xdist_controller_and_a_cpu_run_do_not_warm_up(monkeypatch: pytest.MonkeyPatch, worker: bool,
                                                           numprocesses: int, device: str) -> None:
    backend = _Blocking()
    plugin = _plugin(monkeypatch, backend, worker=worker, numprocesses=numprocesses, device=device)
    _session_start(plugin)
    plugin.pytest_runtest_setup(SimpleNamespace())  # type: ignore[arg-type]
    assert not backend.started.is_set() and plugin.warm_ups() == {}


@pytest.mark.parametrize(("worker", "numprocesses", "checks"), [(False, 2, 1), (True, 2, 0), (False, None, 0)],
                         ids=["xdist-controller", "xdist-worker", "one-process"])
def test_only_an_xdist_controller_checks_early_and_only_after_xdist_started_the_workers(
        monkeypatch: pytest.MonkeyPatch, worker: bool, numprocesses: int | None, checks: int) -> None:
    """The start-up check runs once the other plugins' session start (xdist's, which starts the workers) is done:
    after the wrapper's yield, never before it (suite/hooks/startup_check.py check_early)."""
    calls: list[object] = []
    plugin = _plugin(monkeypatch, object(), worker=worker, numprocesses=numprocesses, device="cpu",
                     check_early=calls.append)
    wrapper = plugin.pytest_sessionstart(SimpleNamespace())  # type: ignore[arg-type]
    next(wrapper)
    assert calls == []  # xdist has not started the workers yet
    with contextlib.suppress(StopIteration):
        wrapper.send(None)
    assert calls == [plugin.config] * checks
    assert ("start-up check started" in plugin.timeline.marks) == bool(checks)


@pytest.mark.parametrize("precision", ["fp32", "fp16"])
def test_the_onnx_runtime_warm_up_graph_is_a_valid_model_with_every_convolution_kind(precision: str) -> None:
    """The graph the CUDA EP warms up on: checked by onnx, one Conv per declared layer (depthwise ones grouped), and
    run here on the CPU EP in the element type asked for."""
    import onnx

    from engines.base import WARM_UP_IMAGE, WARM_UP_LAYERS, WARM_UP_STEM
    from engines.onnxrt.backend import _warm_up_model
    from engines.ort_import import import_onnxruntime

    model = onnx.load_from_string(_warm_up_model(precision))
    convs = [n for n in model.graph.node if n.op_type == "Conv"]
    shapes = {n.input[1]: tuple(i.dims) for i in model.graph.initializer for n in convs if n.input[1] == i.name}
    groups = [next((a.i for a in n.attribute if a.name == "group"), 1) for n in convs]
    kinds = [(s[1] * g, s[0], s[2], g) for s, g in zip((shapes[n.input[1]] for n in convs), groups, strict=True)]
    assert sorted(kinds) == sorted((cin, cout, k, g) for cin, cout, k, _, g in (*WARM_UP_LAYERS, WARM_UP_STEM))
    assert any(g > 1 for g in groups)
    ort = import_onnxruntime()
    session = ort.InferenceSession(_warm_up_model(precision), providers=["CPUExecutionProvider"])
    for batch in (1, 5):  # the batch axis is free: the warm-up runs it at each of WARM_UP_BATCHES
        x = np.random.default_rng(0).standard_normal((batch, *WARM_UP_IMAGE)).astype(
            np.float16 if precision == "fp16" else np.float32)
        y, s = session.run(None, {"x": x})
        assert y.shape == s.shape == (batch, 64) and y.dtype == x.dtype and np.isfinite(y).all() and y.any()


def test_the_torch_warm_up_pass_runs_every_layer_in_either_memory_format() -> None:
    """The torch warm-up's pass (run on CUDA in the suite), here on the CPU: real, finite values out."""
    import torch

    from engines.pytorch.backend import warm_up_pass

    for memory_format in (torch.contiguous_format, torch.channels_last):
        out = warm_up_pass(torch.device("cpu"), torch.float32, memory_format, torch.Generator().manual_seed(0), 3)
        assert out.shape == (3, 3) and torch.isfinite(out).all() and out.abs().sum() > 0


def test_the_host_lane_runs_beside_and_stops_at_the_first_test_after_its_step_in_hand() -> None:
    """An xdist worker's host lane (its first contact with the run's data and models) runs in a thread of its own;
    the first test waits for the step in hand only, and the steps after it are left to the tests."""
    first, ran = _Blocking(), []

    def step(name: str) -> Any:
        return lambda: ran.append((name, threading.current_thread().name))

    warm = WarmUp([], "cpu", lambda name: None)
    warm.prepare([("data photos", lambda: first.warm_up("host")), ("model a", step("a")), ("model b", step("b"))])
    _waits_until_released(first, warm.wait)
    assert ran == []  # stopped after the step in hand
    summary = warm.summary()
    assert list(summary["host"]) == ["data photos"] and summary["host_left"] == 2, summary
    line = warm_up_line({"gw0": summary})
    assert line.startswith("warm-up (one-off costs paid before the first test): gw0 host: data photos "), line
    assert "(2 step(s) left to the tests), first test waited " in line, line
    warm.prepare([("model c", step("c"))])  # once the tests began, the lane never starts (again)
    assert ran == [] and warm.summary()["host_left"] == 2


def test_the_host_lane_runs_each_step_off_the_main_thread_and_a_failing_step_decides_nothing() -> None:
    ran: list[tuple[str, str]] = []

    def failing() -> None:
        raise OSError("photos not found\nmore")

    warm = WarmUp([], "cpu", lambda name: None)
    warm.prepare([("data photos", failing),
                  ("model a", lambda: ran.append(("a", threading.current_thread().name)))])
    for _ in range(3000):  # the lane runs to its end when no test stops it
        if len(warm.host_seconds) == 2:
            break
        threading.Event().wait(0.01)
    warm.wait()
    summary = warm.summary()
    assert ran == [("a", "suite-warm-up-host")] and summary["host_left"] == 0, summary
    assert summary["errors"] == {"data photos": "OSError: photos not found"}, summary


def test_first_contact_steps_make_each_model_after_its_data_sets_each_data_set_once() -> None:
    made: list[str] = []
    configs = {"a": SimpleNamespace(parity_dataset="pkg.photos:imagenet_eval", accuracy_dataset=None),
               "b": SimpleNamespace(parity_dataset="pkg.photos:imagenet_eval", accuracy_dataset="pkg.digits:digits"),
               "c": SimpleNamespace(parity_dataset=None, accuracy_dataset=None)}
    session = SimpleNamespace(
        model=configs.__getitem__, dataset=lambda ref: made.append(f"dataset {ref}"),
        build=lambda m: SimpleNamespace(model_digest=lambda: made.append(f"digest {m}")))
    steps = first_contact_steps(session, ["c", "b", "a"])
    assert [label for label, _ in steps] == ["model c", "data imagenet_eval", "data digits", "model b", "model a"]
    for _, call in steps:
        call()
    assert made == ["digest c", "dataset pkg.photos:imagenet_eval", "dataset pkg.digits:digits", "digest b",
                    "digest a"]


def test_a_worker_prepares_its_host_lane_once_collected_the_costliest_model_first(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The models its tests use, ordered as the scheduler costs them (suite/fleet/scheduling.py work_per_model); a
    process without xdist made them in its own start-up check, and --collect-only runs nothing."""
    place = {"t[a-x-fp32]": ("a-x-fp32", "a"), "t[b-x-fp32]": ("b-x-fp32", "b"), "u[b-x-fp32]": ("b-x-fp32", "b"),
             "t[c-x-fp32]": ("c-x-fp32", "c"), "selftest": (None, None)}
    configs = {m: SimpleNamespace(parity_dataset=None, accuracy_dataset=None) for m in "abc"}
    items = SimpleNamespace(items=[SimpleNamespace(nodeid=n) for n in place])
    for worker, collect_only, expected in [(True, False, ["model c", "model b", "model a"]), (False, False, None),
                                           (True, True, None)]:
        plugin = _plugin(monkeypatch, object(), worker=worker, numprocesses=2 if worker else None, device="cpu")
        plugin.config.option = SimpleNamespace(collectonly=collect_only)
        session = fleet.suite_session(plugin.config)
        session.cache, session.model = SimpleNamespace(root="cache"), configs.__getitem__
        monkeypatch.setattr(fleet, "work_unit_of", lambda config: place.__getitem__)
        monkeypatch.setattr(fleet, "load_durations", lambda root: {"c-x-fp32": 9.0, "a-x-fp32": 1.5})
        _session_start(plugin)
        prepared: list[list[str]] = []
        if plugin.warm_up is not None:
            monkeypatch.setattr(plugin.warm_up, "prepare",
                                lambda steps, into=prepared: into.append([s for s, _ in steps]))
        plugin.pytest_collection_finish(items)  # type: ignore[arg-type]
        assert prepared == ([expected] if expected else []), (worker, collect_only, prepared)


def test_a_worker_that_ran_no_test_stops_its_lanes_at_the_end_and_reports_them_whole() -> None:
    first, ran = _Blocking(), []
    warm = WarmUp([], "cpu", lambda name: None)
    warm.prepare([("data photos", lambda: first.warm_up("host")), ("model a", lambda: ran.append("a"))])
    _waits_until_released(first, warm.finish)
    summary = warm.summary()
    assert ran == [] and list(summary["host"]) == ["data photos"] and summary["host_left"] == 1, summary
    assert summary["waited_s"] == 0.0, summary  # no test waited

"""A process's one-off costs (CUDA's, and an xdist worker's first contact with the run's data and models) paid while
it would wait anyway.

An xdist worker has collected its tests and then waits for the controller before its first test. Meanwhile nothing
needs the GPU, yet the first CUDA test of each engine pays the CUDA context and its libraries (ONNX Runtime's CUDA EP
with cuDNN and cuBLAS), once per process. Each engine's ``warm_up(device)`` pays that in a thread started once the
process is configured; the first test waits for it to end, so nothing is ever timed beside it. A warm-up decides
nothing: its error is logged and recorded, and the tests meet the same fault as their own.

Measured (docs/gpu.md): on two H100s a 3-channel toy convolution cost 0.3 s (torch) and 0.1-0.2 s (ONNX Runtime),
yet on two H200s a worker's first ONNX Runtime session still took about 7 s more than the same session later in a
process (resnet50's fp32 parity on the data set: 9.0 s as gw1's first, 1.75 s on one GPU). The warm-ups now run the
convolution kinds of the vision models (engines.base WARM_UP_*) in fp32 and fp16: 5-6 s per worker, paid in the wait
(the first test waited 0.0-0.1 s), and that session took 5.5-6.9 s (the ninth sitting). What is left is the model's
own problems: each batch's first call of a model costs 1.7-3.2 s in a fresh process, warm-up or not, which no
generic warm-up can pay. What each process paid is in its results (``run.warm_up``) and in the warm-up line.

The host lane (an xdist worker's, once it has collected): its first contact with the run's data and models, which
the controller's start-up check made in its own process, not in this one. A probe on the tenth sitting's H200s
(docs/gpu.md) found a fresh process's first test 6-7 s longer than the same test later for host work alone: making
the first torchvision model imports torchvision and with it torch._dynamo (4.3-4.8 s; 0.4 s for the next model),
and the ImageNet-style photos take 2.4-3.2 s to load. Every worker paid that in its first test, beside the GPU
warm-up's idle wait; one process of a one-GPU night pays it once, two workers twice. The lane makes the data sets
and the modules the worker's tests use, the costliest models first, in a thread of its own beside the device lane
(torch and ONNX Runtime leave the GIL while they run). It stops at the first test: that test waits for the step in
hand (one data set or one model), and the tests make what is left as before. A worker may so hold, on the host
only, the module of a model it then never runs (suite/lifetime.py keeps host state to the end).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

log = logging.getLogger(__name__)


class WarmUp:
    """Two lanes, each a background thread. The device lane: each engine's warm-up on one device, in order
    (``backend_of(name)`` gives the engine's backend; an engine without ``warm_up`` has nothing to pay ahead). The host
    lane (``prepare``): given steps, until the first test."""

    def __init__(self, engines: Iterable[str], device: str, backend_of: Callable[[str], Any]) -> None:
        self.engines, self.device, self.backend_of = list(engines), device, backend_of
        self.seconds: dict[str, float] = {}
        self.host_seconds: dict[str, float] = {}  # the host lane's steps done, in order
        self.host_left = 0  # the host lane's steps left to the tests (it stops at the first test)
        self.errors: dict[str, str] = {}
        self.waited_s = 0.0
        self._thread: threading.Thread | None = None
        self._host: threading.Thread | None = None
        self._stop = threading.Event()

    def start(self) -> None:
        if self._thread is None and self.engines:
            self._thread = threading.Thread(target=self._run, name="suite-warm-up", daemon=True)
            self._thread.start()

    def prepare(self, steps: Sequence[tuple[str, Callable[[], object]]]) -> None:
        """The host lane: ``steps`` (label, call) in order, in a thread of their own, until the first test."""
        if self._host is None and steps and not self._stop.is_set():
            self._host = threading.Thread(target=self._run_host, args=(list(steps),), name="suite-warm-up-host",
                                          daemon=True)
            self._host.start()

    def _run_host(self, steps: list[tuple[str, Callable[[], object]]]) -> None:
        for done, (label, step) in enumerate(steps):
            if self._stop.is_set():
                self.host_left = len(steps) - done
                return
            start = time.perf_counter()
            try:
                step()
            except Exception as exc:  # decides nothing: the test that needs it makes it again and meets the fault
                self.errors[label] = f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
                log.warning("warm-up step %s failed (its tests will say how): %s", label, self.errors[label])
            self.host_seconds[label] = round(time.perf_counter() - start, 2)

    def _run(self) -> None:
        for name in self.engines:
            start = time.perf_counter()
            try:
                warm = getattr(self.backend_of(name), "warm_up", None)
                if warm is None:
                    continue
                warm(self.device)
            except Exception as exc:  # decides nothing: the engine's own tests meet the fault and fail on it
                self.errors[name] = f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
                log.warning("warm-up of %s on %s failed (its tests will say how): %s", name, self.device,
                            self.errors[name])
            self.seconds[name] = round(time.perf_counter() - start, 2)

    def wait(self) -> None:
        """Before a test: the device lane has ended and the host lane has stopped after its step in hand (a test
        never runs, let alone is timed, beside either)."""
        self._stop.set()
        alive = [t for t in (self._thread, self._host) if t is not None and t.is_alive()]
        if alive:
            start = time.perf_counter()
            for thread in alive:
                thread.join()
            self.waited_s += time.perf_counter() - start

    def finish(self) -> None:
        """At the process's end, tests or none (a worker may get none): the lanes stopped as at a first test, and
        joined, so that the summary is whole and no step runs on into the interpreter's shutdown."""
        self._stop.set()
        for thread in (self._thread, self._host):
            if thread is not None:
                thread.join()

    def summary(self) -> dict[str, Any]:
        """What it paid per engine and per host step (s), the host steps left to the tests, how long the first test
        still waited, and any error."""
        host = {"host": dict(self.host_seconds), "host_left": self.host_left} if self._host is not None else {}
        return {"seconds": dict(self.seconds), **host, "waited_s": round(self.waited_s, 2),
                **({"errors": dict(self.errors)} if self.errors else {})}


def wanted(device: str, engines: Iterable[str]) -> list[str]:
    """The engines to warm up: on a CUDA device only, every engine the run uses (in the config's order)."""
    return list(dict.fromkeys(engines)) if device.startswith("cuda") else []


def first_contact_steps(session: Any, models: Sequence[str]) -> list[tuple[str, Callable[[], object]]]:
    """The host lane's steps for ``models`` of a suite session, model by model in that order: the data sets it uses
    that no model before it did, then its module and digest (``session.build(model)``), as its tests would make
    them."""
    steps: list[tuple[str, Callable[[], object]]] = []
    made: set[str] = set()
    for m in models:
        config = session.model(m)
        for ref in (config.parity_dataset, config.accuracy_dataset):
            if ref and ref not in made:
                made.add(ref)
                steps.append((f"data {ref.rpartition(':')[2]}", lambda ref=ref: session.dataset(ref)))
        steps.append((f"model {m}", lambda m=m: session.build(m).model_digest()))
    return steps


def by_work(work: Mapping[str, float]) -> list[str]:
    """The models of ``work`` (model -> its work), the most first, ties in the given order: the scheduler hands out
    the costliest first (suite/fleet/scheduling.py), so a worker's first test is most likely one of theirs."""
    return sorted(work, key=lambda m: -work[m])


def warm_up_line(per_process: dict[str, dict[str, Any]]) -> str:
    """One line: what each process paid ahead per engine and on the host, how long its first test still waited,
    and any error."""
    parts = []
    for process, w in per_process.items():
        paid = ", ".join(f"{e} {s:.1f} s" for e, s in w.get("seconds", {}).items())
        if "host" in w:
            host = ", ".join(f"{step} {s:.1f} s" for step, s in w["host"].items()) or "nothing"
            left = w.get("host_left", 0)
            paid += ("; " if paid else "") + f"host: {host}" + (f" ({left} step(s) left to the tests)" if left else "")
        errors = "; ".join(f"{e} failed: {why}" for e, why in w.get("errors", {}).items())
        parts.append(f"{process} {paid or 'nothing'}, first test waited {w.get('waited_s', 0.0):.1f} s"
                     + (f" ({errors})" if errors else ""))
    return "warm-up (one-off costs paid before the first test): " + "; ".join(parts)

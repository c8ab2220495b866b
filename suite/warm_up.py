"""A process's one-off CUDA costs paid while it would wait anyway.

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
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable
from typing import Any

log = logging.getLogger(__name__)


class WarmUp:
    """Each engine's warm-up on one device, in one background thread, in order. ``backend_of(name)`` gives the
    engine's backend; an engine without ``warm_up`` has nothing to pay ahead."""

    def __init__(self, engines: Iterable[str], device: str, backend_of: Callable[[str], Any]) -> None:
        self.engines, self.device, self.backend_of = list(engines), device, backend_of
        self.seconds: dict[str, float] = {}
        self.errors: dict[str, str] = {}
        self.waited_s = 0.0
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="suite-warm-up", daemon=True)
            self._thread.start()

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
        """Before a test: the warm-up has ended (a test never runs, let alone is timed, beside it)."""
        if self._thread is not None and self._thread.is_alive():
            start = time.perf_counter()
            self._thread.join()
            self.waited_s += time.perf_counter() - start

    def summary(self) -> dict[str, Any]:
        """What it paid per engine (s), how long the first test still waited for it, and any error."""
        return {"seconds": dict(self.seconds), "waited_s": round(self.waited_s, 2),
                **({"errors": dict(self.errors)} if self.errors else {})}


def wanted(device: str, engines: Iterable[str]) -> list[str]:
    """The engines to warm up: on a CUDA device only, every engine the run uses (in the config's order)."""
    return list(dict.fromkeys(engines)) if device.startswith("cuda") else []


def warm_up_line(per_process: dict[str, dict[str, Any]]) -> str:
    """One line: what each process paid ahead per engine, how long its first test still waited, and any error."""
    parts = []
    for process, w in per_process.items():
        paid = ", ".join(f"{e} {s:.1f} s" for e, s in w.get("seconds", {}).items())
        errors = "; ".join(f"{e} failed: {why}" for e, why in w.get("errors", {}).items())
        parts.append(f"{process} {paid or 'nothing'}, first test waited {w.get('waited_s', 0.0):.1f} s"
                     + (f" ({errors})" if errors else ""))
    return "warm-up (one-off CUDA costs paid before the first test): " + "; ".join(parts)

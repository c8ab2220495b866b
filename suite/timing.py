"""Timed calls for latency cases, and the NVML sampler that watches the GPU while they run.

Why the runner times itself on the device paths: only the engine knows its stream. Torch records
CUDA events on its current stream, TensorRT on its own stream through cuda.bindings; ONNX Runtime's
``run_with_iobinding`` synchronizes its stream before returning, so a host timer around it is exact.
pytest-benchmark still times every round on the host; the device-side samples kept here are what
the summaries, the gate and the report use.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from engines.base import UNSUPPORTED, CellUnavailable, Runner, path_outputs
from engines.feeds import Feed
from engines.launch_cover import LaunchCover
from metrics.clocks import clock_summary
from suite.gpu_memory import nvml_handle

PATHS: tuple[str, ...] = ("all", "model", "graph")
HOST_CLOCK = "host perf_counter (outputs copied back to host, so the call has completed)"


class TimedCall:
    """The callable handed to ``benchmark.pedantic``; ``samples_s`` holds every round's time.

    It also keeps what the timed calls returned (issue 23: a CUDA-graph replay or an IO binding reuses static
    buffers, where a stale output is a known failure mode): ``first_outputs``, a host copy of the outputs of round
    ``first_timed_round`` (the first timed round: set it to the number of warm-up rounds), taken after that
    round's sample, and ``last_outputs()``, those of the last call made. The ``all`` path keeps what ``infer``
    returned; the device paths read the runner's bound outputs (engines.base.path_outputs) outside the timed
    region."""

    def __init__(self, runner: Runner, path: str, feed: Feed) -> None:
        self.samples_s: list[float] = []
        self.path = path
        self.first_timed_round = 0
        self.first_outputs: dict[str, np.ndarray] | None = None
        self._last: dict[str, np.ndarray] | None = None
        self._runner = runner
        #: seconds the device path's set-up took (staging, a capture, an engine's extra session), outside every
        #: round: a night's time that no sample shows (None on the ``all`` path); and the runner's own split of them
        self.prepare_s: float | None = None
        self.prepare_parts: dict[str, float] = {}
        if path == "all":
            self.clock = HOST_CLOCK
            self._pristine = _host_copy(feed)
            self._feed = _host_copy(feed)
            self._copies = False  # set once a call has changed its input: each round then gets a fresh copy
            self._call: Callable[[], float] = lambda: self._timed_infer(runner.infer)
            return
        prepare = getattr(runner, "prepare_path", None)
        if prepare is None:
            raise CellUnavailable(f"latency-{path} needs a device-resident runner; {type(runner).__name__} has none",
                                  UNSUPPORTED)
        started = time.perf_counter()
        self.clock = str(prepare(path, feed))  # raises CellUnavailable where the engine cannot
        self.prepare_s = time.perf_counter() - started
        self.prepare_parts = {k: float(v) for k, v in (getattr(runner, "prepare_parts", None) or {}).items()}
        run_path = runner.run_path  # type: ignore[attr-defined]
        self._call = lambda: float(run_path(path))

    def launch_cover(self) -> LaunchCover | None:
        """The runner's launch cover for this path (engines/launch_cover.py), where it hides the launch."""
        covers = getattr(self._runner, "launch_covers", None) or {}
        cover: LaunchCover | None = covers.get(self.path)
        return cover

    def launch_cover_summary(self) -> dict[str, Any] | None:
        """For the case's record: the spin's length and the timed rounds (after the warm-up) it did not cover."""
        cover = self.launch_cover()
        return cover.summary(skip=self.first_timed_round) if cover is not None else None

    def __call__(self) -> None:
        self.samples_s.append(self._call())
        if len(self.samples_s) == self.first_timed_round + 1:
            self.first_outputs = _host_copy(self.last_outputs())

    def _timed_infer(self, infer: Callable[[Feed], dict[str, np.ndarray]]) -> float:
        """One round of the all path on its own copy of the feed (issue 23): a model that changes its input in place
        (torch hands the arrays to the module as they are) would otherwise run round after round on what earlier
        rounds left, and the case would time, and check, other inputs than its own. The copy is made outside the
        timed region, and only once a round has changed its input (checked after the first): other cases time
        exactly what they did."""
        feed = _host_copy(self._pristine) if self._copies else self._feed
        start = time.perf_counter()
        outputs = infer(feed)
        elapsed = time.perf_counter() - start
        self._last = outputs
        if len(self.samples_s) == 0 and not self._copies:  # the first call: did it change its input?
            self._copies = not all(np.array_equal(feed[k], v, equal_nan=True) for k, v in self._pristine.items())
        return elapsed

    def last_outputs(self) -> dict[str, np.ndarray]:
        """The outputs of the last call made, as host arrays."""
        if not self.samples_s:
            raise RuntimeError(f"latency-{self.path}: no call was made yet, so there are no outputs to read")
        if self.path == "all":
            assert self._last is not None
            return _host_copy(self._last)
        return path_outputs(self._runner, self.path)


def _host_copy(outputs: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Host arrays that no later call can overwrite (a runner may hand out views of buffers it reuses)."""
    return {name: np.array(value, copy=True) for name, value in outputs.items()}


class GpuMonitor:
    """Samples device memory in use, NVML utilization, the SM clock and its clocks-event (throttle) reasons while
    a latency case runs.

    NVML's ``utilization.gpu`` is the share of time at least one kernel was running (NVIDIA's "GPU
    utilization"); it is reported as such, not as a count of busy SMs. Peak memory is the device's
    used memory (all processes), the figure nvidia-smi shows.
    """

    def __init__(self, device: str, interval_s: float = 0.02) -> None:
        self.device = device
        self.interval_s = interval_s
        self.timeline: dict[str, list[float]] = {"t_s": [], "memory_mib": [], "sm_util_pct": [], "sm_clock_mhz": []}
        self.clock_reasons: list[int] = []  # NVML's clocks-event reasons bitmask per sample (metrics/clocks.py)
        self.error: str | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._handle: Any = None
        self._nvml: Any = None

    def __enter__(self) -> GpuMonitor:
        if not self.device.startswith("cuda"):
            return self
        try:  # NVML numbers the GPUs as the host does, not as CUDA_VISIBLE_DEVICES does (suite.gpu_memory)
            self._nvml, self._handle = nvml_handle(self.device)
        except Exception as exc:  # no NVML: the case still runs; the record says why there are no figures
            self.error = f"NVML unavailable: {exc}"
            return self
        self._thread = threading.Thread(target=self._sample, name="nvml-sampler", daemon=True)
        self._thread.start()
        return self

    def _sample(self) -> None:
        start = time.perf_counter()
        nvml = self._nvml
        while not self._stop.is_set():
            try:
                memory = nvml.nvmlDeviceGetMemoryInfo(self._handle).used / 2**20
                util = nvml.nvmlDeviceGetUtilizationRates(self._handle).gpu
            except Exception as exc:
                self.error = f"NVML sampling failed: {exc}"
                return
            self.timeline["t_s"].append(round(time.perf_counter() - start, 4))
            self.timeline["memory_mib"].append(round(memory, 1))
            self.timeline["sm_util_pct"].append(float(util))
            self._sample_clock(nvml)
            self._stop.wait(self.interval_s)

    def _sample_clock(self, nvml: Any) -> None:
        """The SM clock and why it is held where it is, this sample; a driver without either leaves them out (the
        case's summary then has no clock figures, and its gate no clock-normalised confirmation)."""
        try:
            clock = float(nvml.nvmlDeviceGetClockInfo(self._handle, nvml.NVML_CLOCK_SM))
            reasons = getattr(nvml, "nvmlDeviceGetCurrentClocksEventReasons", None) or \
                nvml.nvmlDeviceGetCurrentClocksThrottleReasons
            mask = int(reasons(self._handle))
        except Exception:
            return
        self.timeline["sm_clock_mhz"].append(clock)
        self.clock_reasons.append(mask)

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=2)
        if self._nvml is not None:
            try:
                self._nvml.nvmlShutdown()
            except Exception:
                pass

    def summary(self) -> dict[str, Any]:
        if not self.device.startswith("cuda"):
            return {}
        out: dict[str, Any] = {"source": "NVML", "interval_s": self.interval_s, "samples": len(self.timeline["t_s"])}
        if self.error:
            out["error"] = self.error
        if self.timeline["t_s"]:
            util = self.timeline["sm_util_pct"]
            out.update(peak_memory_mib=max(self.timeline["memory_mib"]), mean_sm_util_pct=sum(util) / len(util),
                       **clock_summary(self.timeline["sm_clock_mhz"], self.clock_reasons), timeline=self.timeline)
        return out

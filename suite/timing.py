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
from suite.round_audit import RoundSample

PATHS: tuple[str, ...] = ("all", "model", "graph")
HOST_CLOCK = "host perf_counter (outputs copied back to host, so the call has completed)"


#: Distinct feeds a case's rounds cycle through (issue 43, as MLPerf's TEST04 varies its samples): no two calls in a
#: row run one input, so an engine that answers a repeated input with what it returned before (a result cache, a
#: CUDA-graph replay that did not launch) is timed computing, or returns another feed's outputs, which the audit sees.
FEED_POOL = 3
#: Iterations of the pure-Python work timed before every round (``host_reference_s``): about 50-80 us on the GPU
#: hosts' Xeon vCPUs, short beside a round, long beside the perf_counter's resolution.
HOST_REFERENCE_LOOPS = 1500


def host_reference_s(loops: int = HOST_REFERENCE_LOOPS) -> float:
    """Seconds a fixed piece of pure-Python work takes now: the host's speed beside a round (metrics/host_pace.py).
    No CUDA, driver or engine code runs in it, so an upgrade of those does not move it; the host's slow mode does."""
    start = time.perf_counter()
    total = 0
    for i in range(loops):
        total += i * i % 7
    return time.perf_counter() - start


#: The timed rounds whose outputs are kept at random (suite/round_audit.py), beside the first timed round and the last
#: call; every round in a run that must show an implausible speed-up right (``audit_from(..., every_round=True)``).
AUDIT_ROUNDS = 8


class TimedCall:
    """The callable handed to ``benchmark.pedantic``; ``samples_s`` holds every round's time.

    Its feeds (issue 43): ``feed`` is feed 0; with ``vary`` (feed id -> feed), call i runs feed ``i % FEED_POOL``,
    and after ``fresh_feeds()`` every call runs a feed of its own (id ``FEED_POOL + i``), which no cache can hold. A
    device path stages the next feed into the runner's bound inputs (``restage_path``: the CUDA graph's static
    buffers keep their addresses) between rounds; a runner without ``restage_path`` runs feed 0 in every round.
    ``feed_ids`` says which feed each call ran.

    What the timed calls returned (issue 23: a CUDA-graph replay or an IO binding reuses static buffers, where a stale
    output is a known failure mode): ``first_outputs``, a host copy of round ``first_timed_round``'s (set it to the
    number of warm-up rounds), ``last_outputs()``, the last call's, and ``audit``, a random sample of the timed rounds
    (suite/round_audit.py), each (feed id, outputs). The ``all`` path keeps what ``infer`` returned; the device paths
    read the runner's bound outputs (engines.base.path_outputs). All of it happens in ``setup`` (pytest-benchmark calls
    it before each round, outside its timing; a call that finds it not done does it first), never inside a sample."""

    def __init__(self, runner: Runner, path: str, feed: Feed,
                 vary: Callable[[int], Feed] | None = None) -> None:
        self.samples_s: list[float] = []
        #: call index -> the host reference's seconds timed just before that call (``setup``; metrics/host_pace.py)
        self.host_ref_s: dict[int, float] = {}
        self.path = path
        self.first_timed_round = 0
        self.feed_ids: list[int] = []
        self.audit: RoundSample[tuple[int, dict[str, np.ndarray]]] = RoundSample(AUDIT_ROUNDS)
        self._audit_start = 0
        self._earlier: dict[int, tuple[int, dict[str, np.ndarray]]] = {}
        self._fresh_from: int | None = None
        self._first: dict[str, np.ndarray] | None = None
        self._settled = 0  # calls whose outputs setup has seen
        self._staged_for = -1  # the call the staged feed is for
        self._current = 0  # the feed id the runner holds
        self._vary = vary
        self._last: dict[str, np.ndarray] | None = None
        self._runner = runner
        #: seconds the device path's set-up took (staging, a capture, an engine's extra session), outside every
        #: round: a night's time that no sample shows (None on the ``all`` path); and the runner's own split of them
        self.prepare_s: float | None = None
        self.prepare_parts: dict[str, float] = {}
        if path == "all":
            self.clock = HOST_CLOCK
            self.pool = 1 if vary is None else FEED_POOL
            self._pristine = {0: _host_copy(feed)}
            self._feed = _host_copy(feed)
            self._working = {0: self._feed}
            self._copies = False  # set once a call has changed its input: each round then gets a fresh copy
            self._call: Callable[[], float] = lambda: self._timed_infer(runner.infer)
            return
        prepare = getattr(runner, "prepare_path", None)
        if prepare is None:
            raise CellUnavailable(f"latency-{path} needs a device-resident runner; {type(runner).__name__} has none",
                                  UNSUPPORTED)
        self.pool = 1 if vary is None or getattr(runner, "restage_path", None) is None else FEED_POOL
        self._pristine = {0: feed}
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

    def fresh_feeds(self) -> None:
        """From the next call on, every call runs a feed no other call ran (where the feeds vary at all)."""
        self._fresh_from = len(self.samples_s)

    def audit_from(self, call: int, every_round: bool = False) -> None:
        """A new audit over the calls from index ``call`` on (a re-measurement's timed rounds): a random sample of
        them, or every one. The rounds the earlier audits kept stay to be checked: a wrong output in an attempt the
        gate does not judge is still a wrong output."""
        self._settle()
        self._earlier.update(self.audit.kept())
        self._audit_start = call
        self.audit = RoundSample(None if every_round else AUDIT_ROUNDS)

    def feed_id(self, call: int) -> int:
        """The feed call ``call`` runs (0 where the feeds do not vary)."""
        if self.pool == 1:
            return 0
        if self._fresh_from is not None and call >= self._fresh_from:
            return FEED_POOL + call
        return call % self.pool

    def feed(self, feed_id: int) -> Feed:
        """Feed ``feed_id`` as this case runs it (the pool's are made once)."""
        if feed_id in self._pristine:
            return self._pristine[feed_id]
        assert self._vary is not None, "only a varied case has feeds other than 0"
        made = self._vary(feed_id)
        if feed_id < FEED_POOL:
            self._pristine[feed_id] = _host_copy(made) if self.path == "all" else made
        return made

    def setup(self) -> None:
        """Between two calls, outside the timed region: the last call's outputs kept where the audit draws its round
        (or it is the first timed round), then the next call's feed staged."""
        self._settle()
        done = len(self.samples_s)
        if self._staged_for == done:
            return
        self._staged_for = done
        wanted = self.feed_id(done)
        if self.path == "all":
            if wanted < FEED_POOL and self._copies:
                self._feed = _host_copy(self.feed(wanted))
            elif wanted < FEED_POOL:  # the same arrays each time, as long as no call changes them
                self._feed = self._working.setdefault(wanted, _host_copy(self.feed(wanted)))
            else:
                self._feed = self.feed(wanted)
        elif wanted != self._current:
            self._runner.restage_path(self.path, self.feed(wanted))  # type: ignore[attr-defined]
        self._current = wanted
        self.host_ref_s[done] = host_reference_s()  # last: the host's speed in the moment before the call

    def host_refs(self, first: int, rounds: int) -> list[float] | None:
        """The host reference of calls ``first`` .. ``first + rounds - 1``, or None where one has none."""
        refs = [self.host_ref_s.get(i) for i in range(first, first + rounds)]
        return None if any(r is None for r in refs) else [float(r) for r in refs if r is not None]

    def restage_current(self) -> None:
        """The staged feed copied in again, in place: the device work ``setup`` does before a timed call, for a
        comparison that must start from the same state (tests/latency/test_harness_overhead.py's bare call)."""
        if self.path != "all":
            self._runner.restage_path(self.path, self.feed(self._current))  # type: ignore[attr-defined]

    def _settle(self) -> None:
        """The last call's outputs kept, where the audit draws its round or it is the first timed round."""
        done = len(self.samples_s)
        if self._settled < done:
            self._settled = done
            index = done - 1
            if index == self.first_timed_round:
                self._first = _host_copy(self.last_outputs())
            if index >= max(self.first_timed_round, self._audit_start):
                self.audit.offer(index, lambda: (self.feed_ids[index], _host_copy(self.last_outputs())))

    def __call__(self) -> None:
        self.setup()  # done already where pytest-benchmark called it
        self.samples_s.append(self._call())
        self.feed_ids.append(self._current)

    @property
    def first_outputs(self) -> dict[str, np.ndarray] | None:
        """A host copy of the outputs of round ``first_timed_round`` (None before it ran)."""
        self._settle()
        return self._first

    def audited(self) -> dict[int, tuple[int, dict[str, np.ndarray]]]:
        """The rounds every audit kept, once the run is over: call index -> (feed id, outputs)."""
        self._settle()
        return dict(sorted({**self._earlier, **self.audit.kept()}.items()))

    def audit_summary(self, judged: int) -> dict[str, Any]:
        """For the case's record: how the last ``judged`` calls (the judged attempt's rounds) were fed and audited.
        ``every_round`` and ``fresh_feeds`` are what the gate asks of an implausible speed-up (suite/gate/latency.py
        ``unproven_speedup``): every one of those rounds kept and checked, each on a feed no other call ran."""
        self._settle()
        ids = self.feed_ids[-judged:] if judged else []
        every = (judged > 0 and self.audit.size is None and self.audit.offered == judged
                 and self._audit_start == len(self.samples_s) - judged)
        return {"feeds": len(set(ids)), "rounds_audited": len(self.audit.kept()), "rounds_judged": judged,
                "every_round": every, "fresh_feeds": bool(ids) and all(i >= FEED_POOL for i in ids)}

    def _timed_infer(self, infer: Callable[[Feed], dict[str, np.ndarray]]) -> float:
        """One round of the all path on its own copy of the feed (issue 23): a model that changes its input in place
        (torch hands the arrays to the module as they are) would otherwise run round after round on what earlier
        rounds left, and the case would time, and check, other inputs than its own. The copy is made outside the
        timed region, and only once a round has changed its input (checked after the first): other cases time
        exactly what they did."""
        feed = self._feed
        start = time.perf_counter()
        outputs = infer(feed)
        elapsed = time.perf_counter() - start
        self._last = outputs
        if len(self.samples_s) == 0 and not self._copies:  # the first call: did it change its input?
            pristine = self._pristine[0]
            self._copies = not all(np.array_equal(feed[k], v, equal_nan=True) for k, v in pristine.items())
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

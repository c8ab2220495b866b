"""TensorRT -> ``logging``: the process's one ``trt.ILogger`` and a build's ``trt.IProgressMonitor``.

Why a module of its own: TensorRT reports through callbacks it calls from C++ (never to raise into), and every
build, deserialization and debug build shares the one logger; the bridges are built from the ``tensorrt`` module
passed in, so that the CPU self-tests drive them with a stand-in base class and no TensorRT.
"""

from __future__ import annotations

import collections
import contextlib
import logging
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from engines.trt.library import tensorrt_api
from engines.trt.settings import logging_level

if TYPE_CHECKING:
    import tensorrt as trt

log = logging.getLogger(__name__)
trt_log = logging.getLogger("tensorrt")

#: Seconds between progress lines of one top-level build phase.
PROGRESS_INTERVAL_S = 10.0

#: TensorRT's latest error messages, so that a failed build can quote them in its exception.
RECENT_ERRORS: collections.deque[str] = collections.deque(maxlen=20)

_logger_lock = threading.Lock()
_trt_logger: Any = None


def forward_log(severity: Any, msg: str, errors: collections.deque[str], target: logging.Logger = trt_log) -> None:
    """One TensorRT message to ``target`` at the mapped level (INTERNAL_ERROR->CRITICAL, ERROR, WARNING, INFO,
    VERBOSE->DEBUG); errors and worse are also kept in ``errors``."""
    level = logging_level(getattr(severity, "name", str(severity)))
    if level >= logging.ERROR:
        errors.append(msg)
    if target.isEnabledFor(level):
        target.log(level, "%s", msg)


def make_logging_bridge(api: Any, errors: collections.deque[str]) -> trt.ILogger:
    """A new ``api.ILogger`` whose ``log`` forwards to the "tensorrt" logging logger (see forward_log)."""

    # tensorrt-stubs as shipped do not resolve (no py.typed beside them), so the base may be Any here.
    class LoggingBridge(api.ILogger):  # type: ignore[misc,unused-ignore]
        def __init__(self) -> None:
            api.ILogger.__init__(self)

        def log(self, severity: trt.ILogger.Severity, msg: str) -> None:
            with contextlib.suppress(Exception):  # log() is noexcept on the C++ side: never raise into it
                forward_log(severity, msg, errors)

    bridge: trt.ILogger = LoggingBridge()
    return bridge


def trt_logger() -> trt.ILogger:
    """The process's one TensorRT logger (made on first use): forwards every message to the "tensorrt" logging
    logger and keeps errors in RECENT_ERRORS."""
    global _trt_logger
    with _logger_lock:
        if _trt_logger is None:
            _trt_logger = make_logging_bridge(tensorrt_api(), RECENT_ERRORS)
        logger: trt.ILogger = _trt_logger
        return logger


def make_progress_monitor(label: str, api: Any = None, clock: Callable[[], float] = time.perf_counter,
                          interval_s: float = PROGRESS_INTERVAL_S) -> trt.IProgressMonitor | None:
    """A thread-safe IProgressMonitor that logs phase start/finish (top-level phases at INFO, nested at
    DEBUG) and, for top-level phases, a step line at most every ``interval_s``. None where this
    TensorRT (``api``, by default tensorrt itself) has no IProgressMonitor."""
    api = tensorrt_api(api)
    if not hasattr(api, "IProgressMonitor"):
        return None

    class BuildProgress(api.IProgressMonitor):  # type: ignore[misc,unused-ignore]  # Any without usable stubs
        def __init__(self) -> None:
            api.IProgressMonitor.__init__(self)
            self._lock = threading.Lock()
            self._phases: dict[str, tuple[float, int, str | None, float]] = {}

        def phase_start(self, phase_name: str, parent_phase: str | None, num_steps: int) -> None:
            with contextlib.suppress(Exception):  # callbacks must never raise into TensorRT
                now = clock()
                with self._lock:
                    self._phases[phase_name] = (now, num_steps, parent_phase, now)
                level = logging.INFO if parent_phase is None else logging.DEBUG
                inside = f" (in {parent_phase})" if parent_phase else ""
                log.log(level, "%s: %s started, %d step(s)%s", label, phase_name, num_steps, inside)

        def step_complete(self, phase_name: str, step: int) -> bool:
            with contextlib.suppress(Exception):
                now = clock()
                with self._lock:
                    entry = self._phases.get(phase_name)
                    if entry is None or entry[2] is not None or now - entry[3] < interval_s:
                        return True
                    start, steps, parent, _ = entry
                    self._phases[phase_name] = (start, steps, parent, now)
                log.info("%s: %s step %d/%d (%.0f s)", label, phase_name, step + 1, steps, now - start)
            return True  # never cancel the build

        def phase_finish(self, phase_name: str) -> None:
            with contextlib.suppress(Exception):
                with self._lock:
                    entry = self._phases.pop(phase_name, None)
                if entry is None:
                    return
                start, _, parent, _ = entry
                level = logging.INFO if parent is None else logging.DEBUG
                log.log(level, "%s: %s finished in %.1f s", label, phase_name, clock() - start)

    monitor: trt.IProgressMonitor = BuildProgress()
    return monitor

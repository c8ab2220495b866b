"""How busy the machine was: the share of CPU time other processes used during a latency case.

Why measure it: on a shared machine a neighbour's burst looks exactly like a regression. The latency gate
(suite/gate/latency.py) sets a case measured busy aside, and suite/gate/check.py re-measures it. No pytest here, so
tools/gate_calibration.py measures with the same meter.
"""

from __future__ import annotations

import os
import time


class CpuMeter:
    """Share of the machine's CPU time used by *other* processes (and stolen by a hypervisor) between
    creation and ``stop``; None where /proc/stat is unavailable or the window is too short to tell."""

    def __init__(self) -> None:
        self._start = self._snapshot()

    @staticmethod
    def _snapshot() -> tuple[float, float, float] | None:
        try:
            with open("/proc/stat") as f:
                fields = [float(v) for v in f.readline().split()[1:]]
        except (OSError, ValueError):
            return None
        hz = os.sysconf("SC_CLK_TCK")
        # user nice system idle iowait irq softirq steal: busy = all but idle and iowait.
        busy = (sum(fields[:8]) - fields[3] - fields[4]) / hz
        own = sum(os.times()[:2])
        return time.perf_counter(), busy, own

    #: /proc/stat and os.times count in clock ticks (10 ms): shorter windows give noise, not a share.
    MIN_WINDOW_S = 0.2

    def stop(self, pad: bool = False) -> float | None:
        """The share since creation. A window shorter than MIN_WINDOW_S gives None, or with ``pad``
        is extended by sleeping (this process then uses no CPU, so the neighbours are still what is
        measured): a 15 ms case on a busy machine is as unreliable as a long one."""
        end = self._snapshot()
        if self._start is None or end is None:
            return None
        wall = end[0] - self._start[0]
        if wall < self.MIN_WINDOW_S and pad:
            time.sleep(self.MIN_WINDOW_S - wall)
            end = self._snapshot()
            assert end is not None
            wall = end[0] - self._start[0]
        if wall < self.MIN_WINDOW_S:
            return None
        others = (end[1] - self._start[1]) - (end[2] - self._start[2])
        return min(1.0, max(0.0, others / (wall * (os.cpu_count() or 1))))

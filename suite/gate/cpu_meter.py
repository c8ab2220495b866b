"""How busy the machine was: the share of CPU time other people's processes used on this process's cores during a
latency case.

Why measure it: on a shared machine a neighbour's burst looks exactly like a regression. The latency gate
(suite/gate/latency.py) sets a case measured busy aside, and suite/gate/check.py re-measures it. No pytest here, so
tools/gate_calibration.py measures with the same meter.

What counts (issue 42): only the CPUs this process may run on (its affinity: an xdist worker's own slice,
suite/fleet/workers.py), and only what is not the suite's: the run's process tree (the controller named by
``SUITE_RUN_PID_ENV``, every worker, their children such as compile workers) is subtracted, each thread in
proportion to how many of its CPUs are ours. Counting the whole machine made a two-GPU night's first worker
``busy`` because of its sibling ("other processes used 71 % of the CPUs" on a 32-core host with nothing else
running); a real neighbour on our cores still counts.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from pathlib import Path

#: The run's root process (the xdist controller, or the one pytest process): suite/hooks/configure.py sets it before any
#: worker starts, so every process of the run inherits it. Where it is unset, the root is this process.
SUITE_RUN_PID_ENV = "SUITE_RUN_PID"

Snapshot = tuple[float, float, dict[int, float]]


def parse_stat(text: str) -> tuple[int, float] | None:
    """(parent pid, user + system clock ticks) from a /proc/PID/stat line; its name may hold spaces and ')'."""
    try:
        fields = text[text.rindex(")") + 2:].split()
        return int(fields[1]), float(fields[11]) + float(fields[12])
    except (ValueError, IndexError):
        return None


def process_tree(root: int, parents: dict[int, int]) -> set[int]:
    """``root`` and every process descended from it, from each process's parent."""
    children: dict[int, list[int]] = {}
    for pid, parent in parents.items():
        children.setdefault(parent, []).append(pid)
    tree, todo = set(), [root]
    while todo:
        pid = todo.pop()
        if pid not in tree:
            tree.add(pid)
            todo.extend(children.get(pid, ()))
    return tree


class CpuMeter:
    """Share of this process's CPUs' time used by processes that are not the run's (and stolen by a hypervisor)
    between creation and ``stop``; None where /proc/stat is unavailable or the window is too short to tell."""

    def __init__(self, cpus: list[int] | None = None, root: int | None = None, proc: Path = Path("/proc"),
                 affinity: Callable[[int], set[int]] = os.sched_getaffinity) -> None:
        self._proc, self._affinity = proc, affinity
        self._cpus = sorted(cpus) if cpus is not None else sorted(os.sched_getaffinity(0))
        self._root = root if root is not None else int(os.environ.get(SUITE_RUN_PID_ENV) or os.getpid())
        self._hz = os.sysconf("SC_CLK_TCK")
        #: when the window began (``time.perf_counter``), also where /proc cannot be read: a case's bound starts here
        self.started = time.perf_counter()
        self._start = self._snapshot()

    def _busy(self) -> float | None:
        """Busy seconds of our CPUs since boot: user nice system idle iowait irq softirq steal, all but idle and
        iowait, summed over the ``cpuN`` lines of /proc/stat that are ours."""
        wanted, busy, seen = {f"cpu{c}" for c in self._cpus}, 0.0, 0
        try:
            with open(self._proc / "stat") as f:
                for line in f:
                    name, *values = line.split()
                    if name in wanted:
                        fields = [float(v) for v in values[:8]]
                        busy += sum(fields) - fields[3] - fields[4]
                        seen += 1
        except (OSError, ValueError):
            return None
        return busy / self._hz if seen else None

    def _suite_time(self) -> dict[int, float]:
        """Each of the run's processes: its CPU seconds so far on our CPUs. Each live thread is weighted by the
        share of its own CPUs that are ours (a thread started before its worker was pinned, an ONNX Runtime or
        OpenMP pool that set its own affinity, may run elsewhere than the main thread); what ended threads used
        is weighted as the main thread is."""
        parents, ticks = {}, {}
        for entry in self._proc.iterdir():
            if not entry.name.isdigit():
                continue
            try:
                parsed = parse_stat((entry / "stat").read_text())
            except OSError:
                continue  # it ended
            if parsed is not None:
                parents[int(entry.name)], ticks[int(entry.name)] = parsed
        weighted = {}
        for pid in process_tree(self._root, parents) | {os.getpid()}:
            if pid not in ticks:
                continue
            main = self._ours(pid)
            if main is None:
                continue
            live, live_weighted = 0.0, 0.0
            for tid, thread_ticks in self._threads(pid).items():
                share = main if tid == pid else self._ours(tid)
                live += thread_ticks
                live_weighted += thread_ticks * (main if share is None else share)
            weighted[pid] = (live_weighted + max(0.0, ticks[pid] - live) * main) / self._hz
        return weighted

    def _ours(self, task: int) -> float | None:
        """The share of a process's or thread's allowed CPUs that are ours; None where it ended."""
        try:
            allowed = self._affinity(task)
        except OSError:
            return None
        return len(allowed & set(self._cpus)) / len(allowed) if allowed else None

    def _threads(self, pid: int) -> dict[int, float]:
        """Clock ticks of each live thread of a process (/proc/PID/task/TID/stat); empty where unreadable."""
        out = {}
        try:
            tasks = list((self._proc / str(pid) / "task").iterdir())
        except OSError:
            return out
        for task in tasks:
            try:
                parsed = parse_stat((task / "stat").read_text())
            except OSError:
                continue
            if parsed is not None and task.name.isdigit():
                out[int(task.name)] = parsed[1]
        return out

    def _snapshot(self) -> Snapshot | None:
        busy = self._busy()
        return None if busy is None else (time.perf_counter(), busy, self._suite_time())

    #: /proc/stat and /proc/PID/stat count in clock ticks (10 ms): shorter windows give noise, not a share.
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
        ours = sum(t - self._start[2].get(pid, 0.0) for pid, t in end[2].items())
        others = (end[1] - self._start[1]) - ours
        return min(1.0, max(0.0, others / (wall * len(self._cpus))))

"""Which clock of the host's work holds between processes when the wall clock does not? (issue 42, items 1 and 3)

    python tools/host_clock_probe.py --processes 8 --seconds 20 --json clocks.json   # the controller
    python tools/host_clock_probe.py --analyse clocks.json

Why: the wall time of a launch-bound (host-bound) case moves 2x between nights on the GPU VMs, and a pure-Python
reference timed beside it only halves that (docs/nightly.md, "Host-paced"). If the host is slow because the VM's
vCPU is not running (steal) or waits on a run queue, the thread's own CPU time does not see it; if it is slow
because the core runs slower (frequency, a neighbour's cache traffic), only a count of the work itself holds:
instructions retired, which a real per-call regression (added work) raises and a slow host does not. This probe
times each host-bound workload on every clock at once, in fresh processes, and says which one holds.

Per slot (a few calls of each workload, order rotated) it keeps the median per call of: the wall clock around call
and synchronize; the thread's CPU time (``CLOCK_THREAD_CPUTIME_ID``); user-space instructions and cycles of the
launching thread (``perf_event_open``, where the VM exposes a PMU), for the launch alone and with the synchronize;
and per slot the machine's steal time and the process's run-queue delay (``/proc/stat``, ``/proc/self/schedstat``).
Every other process runs beside a CPU hog on all cores (``--load``), the interference a real neighbour brings.
Exit 0, or 2 without CUDA.
"""

from __future__ import annotations

import argparse
import ctypes
import fcntl
import multiprocessing
import os
import statistics
import struct
import sys
import time
from typing import Any

from tools.host_pairing_probe import cpu_work, run_child, run_probe, spread

_PERF_EVENT_OPEN = 298  # x86_64
_ENABLE, _DISABLE, _RESET = 0x2400, 0x2401, 0x2403
CLOCKS = ("wall", "thread", "instr", "instr_sync", "cycles")


class _Attr(ctypes.Structure):
    _fields_ = [("type", ctypes.c_uint32), ("size", ctypes.c_uint32), ("config", ctypes.c_uint64),
                ("sample_period", ctypes.c_uint64), ("sample_type", ctypes.c_uint64),
                ("read_format", ctypes.c_uint64), ("flags", ctypes.c_uint64), ("wakeup", ctypes.c_uint32),
                ("bp_type", ctypes.c_uint32), ("config1", ctypes.c_uint64), ("config2", ctypes.c_uint64)]


class Counter:
    """One hardware counter of the calling thread, user space only (kernel and hypervisor excluded)."""

    def __init__(self, config: int) -> None:
        libc = ctypes.CDLL(None, use_errno=True)
        attr = _Attr(type=0, size=ctypes.sizeof(_Attr), config=config, flags=(1 << 0) | (1 << 5) | (1 << 6))
        self.fd = libc.syscall(_PERF_EVENT_OPEN, ctypes.byref(attr), 0, -1, -1, 0)
        self.error = None if self.fd >= 0 else os.strerror(ctypes.get_errno())

    def start(self) -> None:
        fcntl.ioctl(self.fd, _RESET, 0)
        fcntl.ioctl(self.fd, _ENABLE, 0)

    def stop(self) -> int:
        fcntl.ioctl(self.fd, _DISABLE, 0)
        return int(struct.unpack("q", os.read(self.fd, 8))[0])


def _steal_ticks() -> int:
    with open("/proc/stat") as f:
        return int(f.readline().split()[8])


def _run_delay_ns() -> int:
    with open("/proc/self/schedstat") as f:
        return int(f.read().split()[1])



def _child(seconds: float) -> dict[str, Any]:
    import torch
    import torchvision

    dev = torch.device("cuda")
    torch.manual_seed(0)
    r18 = torchvision.models.resnet18().to(dev).half().eval()
    x18 = torch.randn(1, 3, 224, 224, device=dev).half()
    mb2 = torchvision.models.mobilenet_v2().to(dev).eval()
    xm = torch.randn(1, 3, 224, 224, device=dev)
    nn = torch.nn
    cnn = nn.Sequential(nn.Conv2d(1, 16, 3, padding=1), nn.ReLU(), nn.Conv2d(16, 32, 3, padding=1), nn.ReLU(),
                        nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(32, 10)).to(dev).eval()
    xc = torch.randn(1, 1, 28, 28, device=dev)
    instr, cycles = Counter(1), Counter(0)
    pmu = instr.error is None and cycles.error is None
    work = {"resnet18": lambda: r18(x18), "mobilenet_v2": lambda: mb2(xm), "small_cnn": lambda: cnn(xc),
            "cpu_ref": cpu_work}
    calls = {"resnet18": 10, "mobilenet_v2": 10, "small_cnn": 30, "cpu_ref": 30}

    def one(fn: Any) -> dict[str, float]:
        th0, t0 = time.thread_time_ns(), time.perf_counter_ns()
        if pmu:
            instr.start()
            cycles.start()
        fn()
        launch = instr.stop() if pmu else 0
        if pmu:
            instr.start()
        torch.cuda.synchronize()
        out = {"wall": (time.perf_counter_ns() - t0) / 1e6, "thread": (time.thread_time_ns() - th0) / 1e6}
        if pmu:
            out["instr_sync"] = launch + instr.stop()
            out["instr"] = launch
            out["cycles"] = cycles.stop()
        return out

    slots: list[dict[str, Any]] = []
    names = list(work)
    t_start = time.perf_counter()
    with torch.inference_mode():
        for name in names:
            for _ in range(20):
                one(work[name])
        k = 0
        while time.perf_counter() - t_start < seconds:
            order = names[k % len(names):] + names[:k % len(names)]
            steal0, delay0, w0 = _steal_ticks(), _run_delay_ns(), time.perf_counter()
            slot: dict[str, Any] = {"t": w0 - t_start}
            for name in order:
                runs = [one(work[name]) for _ in range(calls[name])]
                slot[name] = {c: statistics.median(r[c] for r in runs) for c in runs[0]}
            slot["steal_share"] = (_steal_ticks() - steal0) / os.sysconf("SC_CLK_TCK") / os.cpu_count() / max(
                time.perf_counter() - w0, 1e-9)
            slot["run_delay_ms"] = (_run_delay_ns() - delay0) / 1e6
            slots.append(slot)
            k += 1
    return {"pid": os.getpid(), "pmu": pmu, "pmu_error": instr.error, "slots": slots}


def _hog(stop_at: float) -> None:
    x = 0
    while time.time() < stop_at:
        x += 1


def _controller(processes: int, seconds: float, load: bool) -> dict[str, Any]:
    children = []
    for i in range(processes):
        variant = "loaded" if load and i % 2 else "quiet"
        hogs = []
        if variant == "loaded":
            stop_at = time.time() + seconds + 60
            hogs = [multiprocessing.Process(target=_hog, args=(stop_at,), daemon=True)
                    for _ in range(os.cpu_count() or 1)]
            for h in hogs:
                h.start()
        try:
            child = run_child([sys.executable, __file__, "--child", "--seconds", str(seconds)], variant,
                              seconds * 4 + 180)
        finally:
            for h in hogs:
                h.terminate()
        if child is None:
            continue
        children.append(child)
        print(f"child {i} {variant}: {len(child['slots'])} slots, pmu={child['pmu']} {child['pmu_error'] or ''}",
              file=sys.stderr)
    return {"children": children}



def analyse(data: dict[str, Any]) -> str:
    """Per variant, workload and clock: the between-process max/min of the process medians, and the median
    share of steal and run-queue delay the slots saw."""
    lines = ["| variant | workload | processes | " + " | ".join(f"{c} max/min" for c in CLOCKS)
             + " | steal share | run delay ms/slot |", "|---" * (5 + len(CLOCKS)) + "|"]
    kids_all = data["children"]
    for variant in sorted({c["variant"] for c in kids_all}):
        kids = [c for c in kids_all if c["variant"] == variant]
        for name in ("resnet18", "mobilenet_v2", "small_cnn", "cpu_ref"):
            cells = []
            for clock in CLOCKS:
                meds = [statistics.median(s[name][clock] for s in c["slots"])
                        for c in kids if clock in c["slots"][0][name]]
                cells.append(f"{spread(meds) * 100:.1f} %" if meds else "n/a")
            steal = statistics.median(s["steal_share"] for c in kids for s in c["slots"])
            delay = statistics.median(s["run_delay_ms"] for c in kids for s in c["slots"])
            lines.append(f"| {variant} | {name} | {len(kids)} | " + " | ".join(cells)
                         + f" | {steal:.3f} | {delay:.2f} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--child", action="store_true")
    ap.add_argument("--processes", type=int, default=8)
    ap.add_argument("--seconds", type=float, default=20.0)
    ap.add_argument("--load", action="store_true", help="every other process beside a CPU hog on all cores")
    ap.add_argument("--json")
    ap.add_argument("--analyse")
    args = ap.parse_args(argv)
    return run_probe(args, analyse, lambda a: _child(a.seconds), lambda a: _controller(a.processes, a.seconds, a.load))


if __name__ == "__main__":
    sys.exit(main())

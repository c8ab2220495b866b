"""One share of the CPU cores per pytest-xdist worker, bound before anything starts a thread pool; and the checks of
``-n`` against the GPUs.

``pytest -n auto --device cuda`` starts one worker per visible GPU. Each worker's GPU is bound at the import of
suite/device.py (``BOUND_GPU``: suite/options.py reads it, and this package imports options.py), and the worker then
runs on ``cuda:0`` of its own view: no two workers ever time on the same GPU. Each worker also gets its own whole
physical cores (affinity and thread caps) when this module is imported (suite/plugin.py imports it before anything
imports torch), so host-bound cases do not time the other worker's threads.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from suite.device import BOUND_GPU

SHARED_CPUS_ENV = "SUITE_WORKER_CPUS"  # "shared": no per-worker split of the cores (bind_worker_cpus)


def physical_core(cpu: int) -> tuple[int, int]:
    """The physical core a logical CPU belongs to, (package, core id), from sysfs; a CPU whose topology cannot be
    read counts as a core of its own."""
    topology = Path(f"/sys/devices/system/cpu/cpu{cpu}/topology")
    try:
        return int((topology / "physical_package_id").read_text()), int((topology / "core_id").read_text())
    except (OSError, ValueError):
        return -1, cpu


def cpu_share(cpus: list[int], worker: str | None, count: int,
              core_of: Callable[[int], Any] = physical_core) -> list[int]:
    """Worker ``gwI``'s share of ``cpus`` when ``count`` workers split them: whole physical cores (every hyperthread
    of each), a contiguous run of them, at least one each; all of them outside xdist. Split by logical CPU
    instead, two workers on a host that numbers siblings i and i+N would get the two threads of the same cores
    and slow each other's host-side work."""
    if not worker or not worker.startswith("gw") or count <= 1:
        return cpus
    cores: dict[Any, list[int]] = {}
    for cpu in cpus:
        cores.setdefault(core_of(cpu), []).append(cpu)
    groups = list(cores.values()) if len(cores) >= count else [[cpu] for cpu in cpus]
    index, per = int(worker[2:]), max(1, len(groups) // count)
    start = (index * per) % len(groups)
    mine = groups[start:start + per] or groups[-per:]
    return sorted(cpu for group in mine for cpu in group)


#: Where the NVIDIA driver lists the host's GPUs, one folder per PCI address, whatever CUDA_VISIBLE_DEVICES says.
DRIVER_GPUS = Path("/proc/driver/nvidia/gpus")


def parse_cpulist(text: str) -> list[int]:
    """sysfs's '0-15,32-47' -> [0, ..., 15, 32, ..., 47]; '' -> []."""
    cpus: list[int] = []
    for part in text.strip().split(","):
        if part:
            lo, _, hi = part.partition("-")
            cpus.extend(range(int(lo), int(hi or lo) + 1))
    return cpus


def host_gpus(driver_gpus: Path = DRIVER_GPUS) -> list[tuple[str, list[int]]]:
    """The host's GPUs in PCI order (CUDA's and nvidia-smi's order for GPUs of one model), each with the CPUs local
    to it (its NUMA node's, from sysfs; empty where sysfs does not say). Empty where the driver lists none."""
    try:
        buses = sorted(p.name for p in driver_gpus.iterdir())
    except OSError:
        return []
    found = []
    for bus in buses:
        try:
            local = parse_cpulist(Path(f"/sys/bus/pci/devices/{bus.lower()}/local_cpulist").read_text())
        except (OSError, ValueError):
            local = []
        found.append((bus, local))
    return found


def gpu_cpu_slice(gpu: str, cpus: list[int], gpus: list[tuple[str, list[int]]],
                  core_of: Callable[[int], Any] = physical_core) -> list[int]:
    """The CPU cores that belong to the host's GPU ``gpu`` (a CUDA_VISIBLE_DEVICES index) out of ``cpus``: the cores
    local to it (its NUMA node), split in whole physical cores among the host's GPUs local to the same node, the
    GPU taking the slice of its place among them. It depends on the host alone, never on how many workers the run
    has: a one-GPU night on GPU 0 and a two-GPU night's worker on GPU 0 time on the same cores with the same thread
    pools, so their host-bound medians compare (issue 42: one- and two-worker nights gave the same worker 32 and
    16 cores). A GPU named by UUID, or beyond the host's list, gets the slice of its place among the run's GPUs."""
    if not gpus or not gpu.isdigit() or int(gpu) >= len(gpus):
        return cpus
    index = int(gpu)
    local = gpus[index][1]
    mine = [c for c in cpus if c in set(local)] or cpus
    siblings = [i for i, (_, other) in enumerate(gpus) if other == local] if local else list(range(len(gpus)))
    return cpu_share(mine, f"gw{siblings.index(index)}", len(siblings), core_of)


def pin_threads(cpus: list[int], tasks: Path = Path("/proc/self/task")) -> None:
    """Pin every thread of this process, not only the calling one: Linux's affinity is per thread, and a thread
    started before the pinning (execnet's I/O thread in an xdist worker) would keep running on every core, where
    it is another worker's neighbour. Threads started later inherit the calling thread's affinity."""
    os.sched_setaffinity(0, cpus)
    try:
        threads = [int(t.name) for t in tasks.iterdir() if t.name.isdigit()]
    except OSError:
        return
    for tid in threads:
        try:
            os.sched_setaffinity(tid, cpus)
        except OSError:
            pass  # it ended


def bind_worker_cpus() -> list[int] | None:
    """In an xdist worker: pin the process to its share of the CPU cores and cap the thread pools to it, before
    torch (or anything) starts one. Host-bound cases share the host; without this, each worker's torch and ONNX
    Runtime start a thread per core of the machine, and the workers time each other's threads. A GPU run's worker
    (SUITE_WORKER_GPUS set by the controller) takes its GPU's slice of the host (``gpu_cpu_slice``), one worker or
    several; a CPU run's workers split the cores among themselves. Returns the share, None outside xdist."""
    worker, count = os.environ.get("PYTEST_XDIST_WORKER"), int(os.environ.get("PYTEST_XDIST_WORKER_COUNT") or 1)
    if not worker or not hasattr(os, "sched_setaffinity"):
        return None
    if os.environ.get(SHARED_CPUS_ENV) == "shared":  # every worker on every core, default thread pools: the
        return None  # comparison that tells whether the split helps on a host whose core topology a VM hides
    cpus, gpus = sorted(os.sched_getaffinity(0)), host_gpus()
    if BOUND_GPU is not None and gpus:
        share = gpu_cpu_slice(BOUND_GPU, cpus, gpus, physical_core)
    elif count > 1:  # a CPU run's workers, or a host whose driver lists no GPU: split among the workers
        share = cpu_share(cpus, worker, count)
    else:
        return None
    pin_threads(share)
    for name in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
        os.environ[name] = str(len(share))
    return share


BOUND_CPUS = bind_worker_cpus()


def take_thread_share(session: Any) -> None:
    """A worker's torch threads and ONNX Runtime sessions use its share of the cores (suite.session.request)."""
    if BOUND_CPUS is None:
        return
    session.thread_share = len(BOUND_CPUS)
    import torch

    torch.set_num_threads(len(BOUND_CPUS))


def describe_cpus(cpus: list[int] | None) -> str:
    """'4 cores (0-3)' or '2 cores (0,5)'."""
    if not cpus:
        return "every core"
    ranges, start = [], cpus[0]
    for a, b in zip(cpus, [*cpus[1:], None], strict=True):
        if b != a + 1:
            ranges.append(f"{start}-{a}" if a != start else str(a))
            start = b if b is not None else start
    return f"{len(cpus)} core{'s' * (len(cpus) != 1)} ({','.join(ranges)})"


def visible_gpus(count: int) -> list[str]:
    """The GPUs a multi-GPU run spreads over, as CUDA_VISIBLE_DEVICES entries."""
    listed = [g.strip() for g in os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",") if g.strip()]
    return listed[:count] if listed else [str(i) for i in range(count)]


def auto_workers(device: str, count_gpus: Any) -> int | None:
    """``-n auto``'s worker count: one per visible GPU with ``--device cuda``, one with ``--device cuda:N``,
    xdist's own choice (None) otherwise. ``count_gpus()`` is only called for ``--device cuda``; where it fails,
    xdist's choice stands and the device check at configure time says why."""
    if device == "cuda":
        try:
            return max(1, int(count_gpus()))
        except Exception:
            return None
    return 1 if device.startswith("cuda:") else None


def check_workers(device: str, numprocesses: Any, gpus: int) -> str | None:
    """Why this combination of --device and -n cannot keep one worker per GPU, or None."""
    if not numprocesses or numprocesses in ("auto", "logical") or not device.startswith("cuda"):
        return None
    n = int(numprocesses)
    if device != "cuda" and n > 1:
        return (f"-n {n} with --device {device}: every worker would time on the same GPU; use --device cuda "
                "(one worker per visible GPU) or -n 1")
    if n > gpus:
        return f"-n {n} with --device cuda: only {gpus} GPU(s) are visible, and two workers must never share one"
    return None


def is_worker(config: Any) -> bool:
    """Whether this pytest process is an xdist worker (the controller holds the verdict and writes the files)."""
    return hasattr(config, "workerinput")

"""The device asked for must work: ``--device cuda:N`` where CUDA does not initialise is one usage error
before any test runs, naming what failed (torch build, driver, runtime, device index). And an xdist worker of a
multi-GPU run sees its one GPU only, bound when this module is imported (``BOUND_GPU``), before torch (or anything)
initialises CUDA.

Why before any test: a driver upgrade that breaks CUDA is exactly what this suite exists to catch. If
every cell skipped instead ("torch sees no CUDA device"), the nightly run would end green having
judged nothing.

Why the binding is here, not with the workers' cores (suite/fleet/workers.py): the options read it (a bound worker's
``--device cuda`` is its ``cuda:0``, suite/options.py), and the fleet imports the options.
"""

from __future__ import annotations

import ctypes
import os
import re
import warnings

WORKER_GPUS_ENV = "SUITE_WORKER_GPUS"


def bind_worker_gpu() -> str | None:
    """In an xdist worker of a multi-GPU run: make the worker's one GPU its only visible device. Runs at
    import of this module (the suite's options import it), before torch (or anything) initialises CUDA. Returns
    the GPU bound."""
    worker, gpus = os.environ.get("PYTEST_XDIST_WORKER"), os.environ.get(WORKER_GPUS_ENV)
    if not worker or not gpus or not worker.startswith("gw"):
        return None
    visible = gpus.split(",")
    index = int(worker[2:])
    if index >= len(visible):
        raise RuntimeError(f"xdist worker {worker} has no GPU of its own ({len(visible)} visible: {gpus})")
    os.environ["CUDA_VISIBLE_DEVICES"] = visible[index]
    return visible[index]


BOUND_GPU = bind_worker_gpu()


class DeviceError(ValueError):
    """The requested device cannot run anything; the message says what failed."""


def parse_device(device: str) -> tuple[str, int | None]:
    """'cpu' -> ('cpu', None); 'cuda' -> ('cuda', None: every visible GPU); 'cuda:1' -> ('cuda', 1)."""
    match = re.fullmatch(r"(cpu|cuda)(?::(\d+))?", device.strip())
    if not match or (match.group(1) == "cpu" and match.group(2) is not None):
        raise DeviceError(f"--device {device!r}: expected cpu, cuda (every visible GPU) or cuda:N")
    return match.group(1), None if match.group(2) is None else int(match.group(2))


def driver_version() -> str | None:
    """The CUDA version the installed driver supports (cuDriverGetVersion), or None without a driver."""
    try:
        libcuda = ctypes.CDLL("libcuda.so.1")
    except OSError:
        return None
    version = ctypes.c_int()
    if libcuda.cuDriverGetVersion(ctypes.byref(version)) != 0:
        return "unknown"
    return f"{version.value // 1000}.{version.value % 1000 // 10}"


def check_device(device: str) -> int:
    """Raise DeviceError unless the device runs a kernel; returns the number of usable GPUs (0 for cpu)."""
    kind, index = parse_device(device)
    if kind == "cpu":
        return 0
    import torch

    if torch.version.cuda is None:
        raise DeviceError(f"--device {device}: torch {torch.__version__} is a CPU-only build (torch.version.cuda is "
                          "None); install a CUDA build of torch")
    driver = driver_version()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        available = torch.cuda.is_available()
    if not available:
        said = "; ".join(str(w.message).strip().splitlines()[0] for w in caught) or "torch.cuda.is_available() is False"
        where = ("no NVIDIA driver: libcuda.so.1 cannot be loaded" if driver is None
                 else f"the driver supports CUDA {driver}")
        raise DeviceError(f"--device {device}: CUDA does not initialise ({where}; torch {torch.__version__} is built "
                          f"for CUDA {torch.version.cuda}): {said}")
    count = torch.cuda.device_count()
    if index is not None and index >= count:
        raise DeviceError(f"--device {device}: only {count} CUDA device(s) are visible (cuda:0..cuda:{count - 1}; "
                          "CUDA_VISIBLE_DEVICES narrows them)")
    target = f"cuda:{index or 0}"
    try:
        (torch.ones(4, device=target) * 2).sum().item()
        torch.cuda.synchronize(target)
    except Exception as exc:  # a driver/runtime mismatch often passes is_available() and fails the first kernel
        raise DeviceError(f"--device {device}: a first kernel on {target} failed (driver CUDA {driver}, torch "
                          f"{torch.__version__} built for CUDA {torch.version.cuda}): "
                          f"{str(exc).strip().splitlines()[0]}") from exc
    return count

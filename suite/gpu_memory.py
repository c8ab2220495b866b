"""GPU memory as a measured figure, and resource errors told apart from everything else.

Why both live here: a run that keeps every engine until it ends ran a whole H100 out of memory (issue 22), and
the out-of-memory errors that followed were then read as "unsupported". The suite now releases a cell's engine
after its last test (suite/lifetime.py), measures what each cell and model held at its peak (``MemoryMeter``),
and names a resource error as one (``resource_error``), with the memory in use and what was alive.

Two figures per cell, both from this process: the CUDA caching allocator's peak (torch's tensors, CUDA graph
pools, AOTInductor's buffers) and NVML's, which sees everything the process holds on the device (ONNX Runtime's
arenas, cuDNN and cuBLAS workspaces, the CUDA context): NVML's per-process figure where the driver reports this
process, else the device's memory in use (one worker per GPU: nearly the same thing), and it says which.
"""

from __future__ import annotations

import gc
import os
import sys
import threading
from typing import Any

MIB = 2**20

#: What a resource error says, in the words of torch, ONNX Runtime, cuBLAS/cuDNN and the CUDA runtime.
RESOURCE_PATTERNS: tuple[str, ...] = (
    "out of memory", "outofmemory", "failed to allocate", "bfcarena", "cuda error", "cudaerror", "cuda_error",
    "cublas_status_", "cudnn_status_", "too many resources requested", "cuda failure", "illegal memory access",
    "cudaerrormemoryallocation", "cuda_error_out_of_memory", "an illegal instruction", "device-side assert",
    "cuda driver error", "cudnn error", "cublas error",
)


def resource_error(exc: BaseException) -> str | None:
    """The resource-error text of ``exc`` or of an exception it was raised from, else None. An out-of-memory
    error, an arena's failed allocation or any CUDA error is a failure of the check it happened in, never a
    reason not to judge it."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if type(current).__name__ == "OutOfMemoryError":
            return _first_line(current)
        text = f"{type(current).__name__}: {current}".lower()
        if any(p in text for p in RESOURCE_PATTERNS):
            return _first_line(current)
        current = current.__cause__ or current.__context__
    return None


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return f"{type(exc).__name__}: {text.splitlines()[0][:300] if text else ''}"


def _torch_cuda() -> Any:
    """torch.cuda where torch is imported and CUDA initialised in this process, else None (never initialises it)."""
    torch = sys.modules.get("torch")
    if torch is None:
        return None
    try:
        return torch.cuda if torch.cuda.is_initialized() else None
    except Exception:
        return None


def nvml_index(device: str, visible: str | None = None) -> int | str:
    """NVML's handle key for ``cuda:N`` of this process: NVML ignores CUDA_VISIBLE_DEVICES, so ``cuda:0`` of a
    worker bound to GPU 1 is NVML's index 1 (or a UUID where the variable lists UUIDs)."""
    index = int(device.partition(":")[2] or 0)
    listed = [v.strip() for v in (os.environ.get("CUDA_VISIBLE_DEVICES", "") if visible is None else visible)
              .split(",") if v.strip()]
    if index < len(listed):
        entry = listed[index]
        return int(entry) if entry.isdigit() else entry
    return index


def nvml_handle(device: str) -> tuple[Any, Any]:
    """(pynvml, the device's handle); raises where NVML cannot be had."""
    import pynvml

    pynvml.nvmlInit()
    key = nvml_index(device)
    handle = (pynvml.nvmlDeviceGetHandleByIndex(key) if isinstance(key, int)
              else pynvml.nvmlDeviceGetHandleByUUID(key))
    return pynvml, handle


def running_processes(nvml: Any, handle: Any) -> Any:
    """NVML's compute processes on the device (the v3 call where the binding has it); None where it has neither.
    The memory meter asks this every 100 ms; tools/nvml_stall_probe.py times the same call."""
    fn = getattr(nvml, "nvmlDeviceGetComputeRunningProcesses_v3", None) or \
        getattr(nvml, "nvmlDeviceGetComputeRunningProcesses", None)
    return None if fn is None else fn(handle)


class MemoryMeter:
    """Peak GPU memory per label (a cell's tests) and for the whole process, sampled by one NVML thread every
    ``interval_s`` and from the allocator at each ``mark``. ``begin(label)`` opens a window (torch's peak is
    reset); ``end(label)`` closes it and returns the window's figures.

    Where the device is a CPU or NVML is missing, every figure is None and ``error`` says why."""

    def __init__(self, device: str, interval_s: float = 0.1) -> None:
        self.device = device
        self.interval_s = interval_s
        self.error: str | None = None
        self.source: str | None = None  # "process" or "device": what NVML's figure covers
        self.process_peak_mib: float | None = None
        self._open: dict[str, dict[str, float | None]] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._nvml: Any = None
        self._handle: Any = None
        if not device.startswith("cuda"):
            self.error = f"{device} has no GPU memory"
            return
        try:
            self._nvml, self._handle = nvml_handle(device)
        except Exception as exc:  # the run goes on; every memory figure says why it is missing
            self.error = f"NVML unavailable: {type(exc).__name__}: {exc}"
            return
        self._thread = threading.Thread(target=self._sample_loop, name="gpu-memory-meter", daemon=True)
        self._thread.start()

    # ---- NVML ------------------------------------------------------------------------------------
    def nvml_used_mib(self) -> float | None:
        """This process's memory on the device (NVML), else the device's memory in use; None without NVML."""
        if self._nvml is None:
            return None
        nvml, pid = self._nvml, os.getpid()
        try:
            for proc in running_processes(nvml, self._handle) or ():
                if proc.pid == pid and proc.usedGpuMemory is not None:
                    self.source = "process"
                    return float(proc.usedGpuMemory) / MIB
            self.source = "device"  # a container's pid namespace hides this process from the driver's list
            return float(nvml.nvmlDeviceGetMemoryInfo(self._handle).used) / MIB
        except Exception as exc:
            self.error = f"NVML sampling failed: {type(exc).__name__}: {exc}"
            return None

    def _sample_loop(self) -> None:
        while not self._stop.is_set():
            self._note(self.nvml_used_mib(), "nvml_peak_mib")
            self._stop.wait(self.interval_s)

    def _note(self, value: float | None, field: str) -> None:
        if value is None:
            return
        with self._lock:
            if field == "nvml_peak_mib":
                self.process_peak_mib = max(self.process_peak_mib or 0.0, value)
            for window in self._open.values():
                window[field] = max(window.get(field) or 0.0, value)

    # ---- windows ---------------------------------------------------------------------------------
    def begin(self, label: str) -> None:
        """Open ``label``'s window (a no-op where it is open). The allocator's peak is folded into the windows
        already open, then reset, so that the new window's allocator figure is its own. What the process holds
        now is the window's start: a peak counts whatever the process still held from before (the model's
        reference engine, alive through its other cells; the cells before it, whose order changes from night to
        night), what the cell added over its start does not (``figures``)."""
        if label in self._open:
            return
        self.mark()
        cuda = _torch_cuda()
        if cuda is not None:
            cuda.reset_peak_memory_stats()
        nvml_now = self.nvml_used_mib()
        allocated = None if cuda is None else cuda.memory_allocated() / MIB  # = the allocator's peak since the reset
        with self._lock:
            self._open[label] = {"nvml_peak_mib": None, "allocator_peak_mib": None,
                                 "nvml_start_mib": nvml_now, "allocator_start_mib": allocated}
        self._note(nvml_now, "nvml_peak_mib")  # the start is the window's first reading: no second query
        self._note(allocated, "allocator_peak_mib")

    def mark(self) -> None:
        """Take the figures now (NVML and the allocator's peak since the first open window began)."""
        self._note(self.nvml_used_mib(), "nvml_peak_mib")
        cuda = _torch_cuda()
        if cuda is not None:
            self._note(cuda.max_memory_allocated() / MIB, "allocator_peak_mib")

    def end(self, label: str) -> dict[str, Any]:
        self.mark()
        with self._lock:
            window = self._open.pop(label, None) or {}
        return self.figures(window)

    def figures(self, window: dict[str, float | None]) -> dict[str, Any]:
        """The window's peaks and starts, and what it added over its start (``*_added_mib``: the drift gate's
        figures, metrics.drift.compare_memory)."""
        out: dict[str, Any] = {k: (None if v is None else round(v, 1)) for k, v in window.items()}
        for figure in ("nvml", "allocator"):
            peak, start = window.get(f"{figure}_peak_mib"), window.get(f"{figure}_start_mib")
            out[f"{figure}_added_mib"] = None if peak is None or start is None else round(max(peak - start, 0.0), 1)
        out["nvml_source"] = self.source
        if self.error:
            out["error"] = self.error
        return out

    def close(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=2)


def in_use(device: str, meter: MemoryMeter | None = None) -> str:
    """One line on the GPU memory in use now: the allocator's allocated and reserved, NVML's figure."""
    if not device.startswith("cuda"):
        return f"{device}: no GPU memory"
    parts = []
    cuda = _torch_cuda()
    if cuda is not None:
        try:
            parts.append(f"torch allocated {cuda.memory_allocated() / MIB:.0f} MiB, reserved "
                         f"{cuda.memory_reserved() / MIB:.0f} MiB")
        except Exception as exc:  # a broken context: say so, the failure itself is reported anyway
            parts.append(f"torch's figures unavailable ({type(exc).__name__})")
    if meter is not None:
        used = meter.nvml_used_mib()
        if used is not None:
            parts.append(f"NVML {'this process' if meter.source == 'process' else 'device in use'} {used:.0f} MiB")
    return "; ".join(parts) or "no figures (NVML and torch's allocator unavailable)"


def release_device_memory() -> None:
    """After a cell's or model's engines were dropped: collect them, forget the last failure's frames (pytest
    keeps them for post-mortem debugging, and they hold the failed test's engine), and hand the CUDA caching
    allocator's free blocks back to the driver."""
    for name in ("last_value", "last_traceback", "last_type", "last_exc"):
        if hasattr(sys, name):
            setattr(sys, name, None)
    gc.collect()
    cuda = _torch_cuda()
    if cuda is not None:
        cuda.synchronize()
        cuda.empty_cache()


def peaks(records: list[dict[str, Any]]) -> tuple[dict[str, float], dict[str, float]]:
    """(each model's peak, each cell's peak) in MiB from the run's ``gpu_memory`` records: NVML's figure (all the
    process held), else the allocator's."""
    by_cell: dict[str, float] = {}
    by_model: dict[str, float] = {}
    for r in records:
        if r.get("kind") != "gpu_memory":
            continue
        value = r.get("nvml_peak_mib") if r.get("nvml_peak_mib") is not None else r.get("allocator_peak_mib")
        if value is None:
            continue
        by_cell[str(r["cell"])] = max(by_cell.get(str(r["cell"]), 0.0), float(value))
        by_model[str(r["model"])] = max(by_model.get(str(r["model"]), 0.0), float(value))
    return by_model, by_cell


def memory_summary(records: list[dict[str, Any]]) -> str | None:
    """The summary's line: the run's peak GPU memory and each model's, largest first; None on a CPU run."""
    by_model, _ = peaks(records)
    if not by_model:
        return None
    sources = {str(r.get("nvml_source")) for r in records if r.get("kind") == "gpu_memory" and r.get("nvml_source")}
    source = ("NVML, per process" if sources == {"process"} else "NVML, device in use" if sources
              else "torch's allocator")
    ordered = sorted(by_model.items(), key=lambda kv: -kv[1])
    return (f"peak GPU memory ({source}): run {ordered[0][1] / 1024:.2f} GiB; per model: "
            + ", ".join(f"{m} {v / 1024:.2f} GiB" for m, v in ordered))

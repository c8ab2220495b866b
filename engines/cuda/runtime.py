"""The suite's thin layer over the CUDA runtime API of cuda-python (``cuda.bindings.runtime``).

Used wherever the suite touches CUDA outside PyTorch: TensorRT's device buffers and streams, and
CUDA-event timing of ONNX Runtime / TensorRT runs. Every cuda-python call returns a tuple whose first
item is a ``cudaError_t``; :func:`check` turns a failure into a :class:`CudaError` that names the call
and the error, and hands back the rest of the tuple.

``cuda.bindings`` is imported lazily, on first use, so importing this module never fails on a machine
without cuda-python (or without a GPU): :func:`cuda_available` says why CUDA cannot be used there.
"""

from __future__ import annotations

import contextlib
import ctypes
import importlib
import importlib.metadata
import logging
import threading
from types import TracebackType
from typing import Any, Self

import numpy as np

log = logging.getLogger(__name__)

__all__ = [
    "CudaError",
    "CudaUnavailable",
    "DeviceBuffer",
    "EventTimer",
    "PinnedHostBuffer",
    "Releasable",
    "Stream",
    "check",
    "cuda_available",
    "cudart",
    "device_count",
    "device_properties",
    "driver_and_runtime_versions",
    "format_cuda_version",
    "set_device",
]

_lock = threading.Lock()
_cudart: Any = None
_import_error: str | None = None


class CudaUnavailable(RuntimeError):
    """cuda-python (``cuda.bindings``) cannot be imported here."""


class CudaError(RuntimeError):
    """A CUDA runtime call returned an error: carries the call, the error's name, code and description."""

    def __init__(self, call: str, code: int, name: str, description: str) -> None:
        self.call = call
        self.code = code
        self.name = name
        self.description = description
        where = f"{call} failed" if call else "CUDA call failed"
        super().__init__(f"{where}: {name} ({code}): {description}")


def cudart() -> Any:
    """The ``cuda.bindings.runtime`` module (``cuda.cudart`` on cuda-python < 12.6), imported once.

    Raises :class:`CudaUnavailable` when neither can be imported.
    """
    global _cudart, _import_error
    if _cudart is not None:
        return _cudart
    with _lock:
        if _cudart is not None:
            return _cudart
        errors = []
        for name in ("cuda.bindings.runtime", "cuda.cudart"):
            try:
                module = importlib.import_module(name)
            except ImportError as exc:
                errors.append(f"{name}: {exc}")
                continue
            _cudart, _import_error = module, None
            return module
        _import_error = "; ".join(errors)
        raise CudaUnavailable(
            f"cuda-python is not importable ({_import_error}); pip install cuda-python"
        )


def _error_text(err: Any) -> tuple[int, str, str]:
    """(code, name, description) of a cudaError_t (or any int-like CUDA status)."""
    code = int(err)
    name = getattr(err, "name", None) or f"CUDA error {code}"
    description = ""
    with contextlib.suppress(Exception):  # describing an error must never raise a different one
        rt = cudart()
        status, text = rt.cudaGetErrorString(rt.cudaError_t(code))
        if int(status) == 0 and text:
            description = text.decode() if isinstance(text, bytes) else str(text)
        if name.startswith("CUDA error"):
            status, raw = rt.cudaGetErrorName(rt.cudaError_t(code))
            if int(status) == 0 and raw:
                name = raw.decode() if isinstance(raw, bytes) else str(raw)
    return code, name, description or "no description"


def check(result: Any, call: str = "") -> Any:
    """Check a cuda-python result tuple ``(cudaError_t, *values)``.

    Raises :class:`CudaError` naming ``call`` and the error when the status is not ``cudaSuccess``
    (status 0; also accepts driver-API ``CUresult`` tuples, whose success is 0 too). Returns ``None`` when
    the call returns nothing else, the single value when it returns one, else the tuple of values.
    """
    items = result if isinstance(result, tuple) else (result,)
    if not items:
        raise TypeError(f"{call or 'CUDA call'} returned an empty result")
    status, rest = items[0], items[1:]
    if int(status) != 0:
        code, name, description = _error_text(status)
        raise CudaError(call, code, name, description)
    if not rest:
        return None
    if len(rest) == 1:
        return rest[0]
    return rest


def device_count() -> int:
    """Number of CUDA devices (raises CudaUnavailable / CudaError, e.g. cudaErrorInsufficientDriver)."""
    rt = cudart()
    return int(check(rt.cudaGetDeviceCount(), "cudaGetDeviceCount"))


def cuda_available(device_index: int = 0) -> str | None:
    """None when CUDA device ``device_index`` is usable through cuda-python, else the reason it is not."""
    try:
        count = device_count()
    except CudaUnavailable as exc:
        return str(exc)
    except CudaError as exc:
        hints = {
            "cudaErrorNoDevice": "no CUDA device is visible (check CUDA_VISIBLE_DEVICES and the container's GPUs)",
            "cudaErrorInsufficientDriver": "the NVIDIA driver is missing or older than this CUDA runtime",
        }
        hint = hints.get(exc.name, "the CUDA driver could not be initialised")
        return f"CUDA is unavailable: {hint} ({exc})"
    if count == 0:
        return "CUDA is unavailable: cudaGetDeviceCount found no CUDA device"
    if not 0 <= device_index < count:
        return f"CUDA device {device_index} does not exist: {count} device(s) visible"
    return None


def set_device(index: int) -> None:
    """Make ``index`` the current device of this host thread (cudaSetDevice)."""
    rt = cudart()
    check(rt.cudaSetDevice(index), f"cudaSetDevice({index})")


def format_cuda_version(version: int) -> str:
    """CUDA's 1000*major + 10*minor encoding as text: 12080 -> "12.8"; 0 -> "none"."""
    if version <= 0:
        return "none"
    return f"{version // 1000}.{(version % 1000) // 10}"


def _decode(value: Any) -> str:
    if isinstance(value, (bytes, bytearray)):
        return bytes(value).split(b"\0", 1)[0].decode(errors="replace")
    return str(value)


def device_properties(index: int = 0) -> dict[str, Any]:
    """Name, compute capability ("9.0"), total memory and SM count of CUDA device ``index``."""
    rt = cudart()
    prop = check(rt.cudaGetDeviceProperties(index), f"cudaGetDeviceProperties({index})")
    major, minor = int(prop.major), int(prop.minor)
    return {
        "index": index,
        "name": _decode(prop.name),
        "compute_capability": f"{major}.{minor}",
        "compute_capability_tuple": (major, minor),
        "total_memory_bytes": int(prop.totalGlobalMem),
        "multiprocessor_count": int(prop.multiProcessorCount),
    }


def _package_version(*names: str) -> str:
    for name in names:
        try:
            return importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            continue
    return "unknown"


def driver_and_runtime_versions() -> dict[str, str]:
    """CUDA version the driver supports, version of the CUDA runtime cuda-python uses, cuda-python's own."""
    rt = cudart()
    driver = int(check(rt.cudaDriverGetVersion(), "cudaDriverGetVersion"))
    runtime = int(check(rt.cudaRuntimeGetVersion(), "cudaRuntimeGetVersion"))
    return {
        "driver": format_cuda_version(driver),
        "runtime": format_cuda_version(runtime),
        "cuda_python": _package_version("cuda-bindings", "cuda-python"),
    }


class Releasable:
    """A resource released once by ``_release``: on leaving a ``with`` block, or when collected.

    Subclasses point ``_release`` at their public method (``free``, ``destroy``, ``close``), which must
    be idempotent. Failures while collected are swallowed: at interpreter shutdown or after the CUDA
    context is gone there is nothing left to free and no one to tell.
    """

    def _release(self) -> None:
        raise NotImplementedError

    def __enter__(self) -> Self:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self._release()

    def __del__(self) -> None:
        with contextlib.suppress(Exception):
            self._release()


class Stream(Releasable):
    """A CUDA stream (non-blocking with respect to the legacy default stream by default)."""

    def __init__(self, non_blocking: bool = True) -> None:
        rt = cudart()
        flags = rt.cudaStreamNonBlocking if non_blocking else rt.cudaStreamDefault
        self._stream: Any = check(rt.cudaStreamCreateWithFlags(flags), "cudaStreamCreateWithFlags")

    @property
    def raw(self) -> Any:
        """The cuda-python ``cudaStream_t`` object."""
        if self._stream is None:
            raise RuntimeError("stream was destroyed")
        return self._stream

    @property
    def handle(self) -> int:
        """The stream as an integer handle, as TensorRT's ``execute_async_v3(stream_handle)`` wants it."""
        return int(self.raw)

    def synchronize(self) -> None:
        check(cudart().cudaStreamSynchronize(self.raw), "cudaStreamSynchronize")

    def destroy(self) -> None:
        if self._stream is not None:
            stream, self._stream = self._stream, None
            check(cudart().cudaStreamDestroy(stream), "cudaStreamDestroy")

    _release = destroy


def _host_view(array: np.ndarray, writeable: bool) -> np.ndarray:
    if not array.flags.c_contiguous:
        raise ValueError("host array for a CUDA copy must be C-contiguous (use np.ascontiguousarray)")
    if writeable and not array.flags.writeable:
        raise ValueError("host array to copy into is read-only")
    return array


class DeviceBuffer(Releasable):
    """``nbytes`` of device memory (cudaMalloc / cudaFree). Free it with ``free()`` or a ``with`` block.

    The async copies enqueue on ``stream``; the host array must stay alive and unchanged until the
    stream is synchronized (pageable memory makes the copy partly synchronous; pinned memory does not).
    """

    def __init__(self, nbytes: int) -> None:
        if nbytes < 0:
            raise ValueError(f"negative buffer size {nbytes}")
        rt = cudart()
        self.nbytes = int(nbytes)
        # cudaMalloc(0) returns a null pointer, which TensorRT rejects as a tensor address: allocate >= 1 byte.
        self._ptr: int | None = int(check(rt.cudaMalloc(max(self.nbytes, 1)), f"cudaMalloc({self.nbytes})"))

    @property
    def ptr(self) -> int:
        if self._ptr is None:
            raise RuntimeError("device buffer was freed")
        return self._ptr

    @property
    def freed(self) -> bool:
        return self._ptr is None

    def copy_from_host_async(self, array: np.ndarray, stream: Stream) -> None:
        """Enqueue a host-to-device copy of ``array`` (C-contiguous, at most ``nbytes``) on ``stream``."""
        host = _host_view(array, writeable=False)
        if host.nbytes > self.nbytes:
            raise ValueError(f"host array of {host.nbytes} bytes does not fit a {self.nbytes}-byte device buffer")
        if host.nbytes == 0:
            return
        rt = cudart()
        check(rt.cudaMemcpyAsync(self.ptr, host.ctypes.data, host.nbytes,
                                 rt.cudaMemcpyKind.cudaMemcpyHostToDevice, stream.raw),
              "cudaMemcpyAsync(host to device)")

    def copy_to_host_async(self, array: np.ndarray, stream: Stream) -> None:
        """Enqueue a device-to-host copy into ``array`` (C-contiguous, writeable, at most ``nbytes``)."""
        host = _host_view(array, writeable=True)
        if host.nbytes > self.nbytes:
            raise ValueError(f"host array of {host.nbytes} bytes is larger than the {self.nbytes}-byte device buffer")
        if host.nbytes == 0:
            return
        rt = cudart()
        check(rt.cudaMemcpyAsync(host.ctypes.data, self.ptr, host.nbytes,
                                 rt.cudaMemcpyKind.cudaMemcpyDeviceToHost, stream.raw),
              "cudaMemcpyAsync(device to host)")

    def free(self) -> None:
        if self._ptr is not None:
            ptr, self._ptr = self._ptr, None
            check(cudart().cudaFree(ptr), "cudaFree")

    _release = free

    def __repr__(self) -> str:
        state = "freed" if self._ptr is None else hex(self._ptr)
        return f"DeviceBuffer({self.nbytes} bytes at {state})"


class PinnedHostBuffer(Releasable):
    """Page-locked host memory (cudaHostAlloc / cudaFreeHost), for truly asynchronous copies.

    ``array(shape, dtype)`` gives a numpy view of the start of the buffer; views must not outlive ``free()``.
    """

    def __init__(self, nbytes: int) -> None:
        rt = cudart()
        self.nbytes = int(nbytes)
        self._ptr: int | None = int(check(rt.cudaHostAlloc(max(self.nbytes, 1), rt.cudaHostAllocDefault),
                                          f"cudaHostAlloc({self.nbytes})"))

    @property
    def ptr(self) -> int:
        if self._ptr is None:
            raise RuntimeError("pinned host buffer was freed")
        return self._ptr

    def array(self, shape: tuple[int, ...], dtype: Any) -> np.ndarray:
        dt = np.dtype(dtype)
        count = int(np.prod(shape, dtype=np.int64)) if shape else 1
        nbytes = count * dt.itemsize
        if nbytes > self.nbytes:
            raise ValueError(f"{shape} {dt} needs {nbytes} bytes; pinned buffer has {self.nbytes}")
        raw = (ctypes.c_byte * max(nbytes, 1)).from_address(self.ptr)
        view: np.ndarray = np.frombuffer(raw, dtype=np.uint8, count=nbytes).view(dt).reshape(shape)
        return view

    def free(self) -> None:
        if self._ptr is not None:
            ptr, self._ptr = self._ptr, None
            check(cudart().cudaFreeHost(ptr), "cudaFreeHost")

    _release = free


class EventTimer(Releasable):
    """A pair of CUDA events around work enqueued on a stream: GPU time of that work, in milliseconds.

    ``start(stream)``; enqueue work; ``stop(stream)``; ``elapsed_ms()`` waits for the stop event.
    Reusable: start/stop again for the next measurement.
    """

    def __init__(self) -> None:
        rt = cudart()
        self._start: Any = check(rt.cudaEventCreateWithFlags(rt.cudaEventDefault), "cudaEventCreate(start)")
        self._stop: Any = check(rt.cudaEventCreateWithFlags(rt.cudaEventDefault), "cudaEventCreate(stop)")
        self._started = self._stopped = False

    def _events(self) -> tuple[Any, Any]:
        if self._start is None or self._stop is None:
            raise RuntimeError("event timer was destroyed")
        return self._start, self._stop

    def start(self, stream: Stream) -> None:
        start, _ = self._events()
        check(cudart().cudaEventRecord(start, stream.raw), "cudaEventRecord(start)")
        self._started, self._stopped = True, False

    def stop(self, stream: Stream) -> None:
        _, stop = self._events()
        if not self._started:
            raise RuntimeError("EventTimer.stop() before start()")
        check(cudart().cudaEventRecord(stop, stream.raw), "cudaEventRecord(stop)")
        self._stopped = True

    def elapsed_ms(self) -> float:
        """Milliseconds between the recorded start and stop events (waits for the stop event)."""
        start, stop = self._events()
        if not (self._started and self._stopped):
            raise RuntimeError("EventTimer.elapsed_ms() needs start() and stop() first")
        rt = cudart()
        check(rt.cudaEventSynchronize(stop), "cudaEventSynchronize")
        return float(check(rt.cudaEventElapsedTime(start, stop), "cudaEventElapsedTime"))

    def destroy(self) -> None:
        rt = cudart() if (self._start is not None or self._stop is not None) else None
        for attr in ("_start", "_stop"):
            event = getattr(self, attr)
            if event is not None and rt is not None:
                setattr(self, attr, None)
                check(rt.cudaEventDestroy(event), "cudaEventDestroy")

    _release = destroy

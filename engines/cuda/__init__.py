"""CUDA outside PyTorch: a thin, lazily imported layer over cuda-python's runtime API (see runtime.py)."""

from engines.cuda.runtime import (
    CudaError,
    CudaUnavailable,
    DeviceBuffer,
    EventTimer,
    PinnedHostBuffer,
    Stream,
    check,
    cuda_available,
    device_count,
    device_properties,
    driver_and_runtime_versions,
    set_device,
)

__all__ = [
    "CudaError",
    "CudaUnavailable",
    "DeviceBuffer",
    "EventTimer",
    "PinnedHostBuffer",
    "Stream",
    "check",
    "cuda_available",
    "device_count",
    "device_properties",
    "driver_and_runtime_versions",
    "set_device",
]

"""The environment fingerprint that every result carries: a number without its GPU, driver, CUDA and
library versions cannot be compared with anything.

Why one function: pytest-benchmark's machine_info, the suite's JSON records and the HTML report all
print the same dictionary, and the baseline comparison diffs it key by key.
"""

from __future__ import annotations

import functools
import hashlib
import importlib.metadata
import os
import platform
from pathlib import Path
from typing import Any

from core.cpuinfo import INT8_DOT_PRODUCT_X86, cpuinfo

LIBRARIES = ("torch", "torchvision", "onnx", "onnxscript", "onnxruntime", "onnxruntime-gpu", "tensorrt",
             "cuda-python", "cuda-bindings", "nvidia-ml-py", "numpy", "pytest-benchmark")

#: How the run was spread (suite/fleet/plugin.py worker_layout): its xdist workers (1 without xdist), the GPUs they were
#: given (CUDA_VISIBLE_DEVICES entries) and each worker's cores. A host-bound case times its worker's share of the
#: cores, and a cell's peak GPU memory depends on what its worker ran before it: a one-worker night and a two-worker
#: night do not measure the same thing. Known once the workers have reported (the run's end), so a run whose side
#: does not have them yet (the header, a worker's own note) does not compare them.
LAYOUT_KEYS = ("worker_count", "worker_gpus", "worker_cores")

# Keys whose difference makes two runs' timings or numerics incomparable.
COMPARABILITY_KEYS = ("gpu_name", "gpu_compute_capability", "driver", "cuda_runtime", "cudnn", "cpu", "cpu_int8",
                      "torch", "onnxruntime", "onnxruntime-gpu", "tensorrt", "device", *LAYOUT_KEYS)

# The CPU's integer dot-product instructions, which decide int8 numerics on the CPU: ONNX Runtime's u8 x s8
# QLinearConv/QGemm kernels saturate their 16-bit sums on x86 without VNNI, and int8 EfficientNet-Lite0 then
# reads cosine 0.51 where a VNNI CPU reads 0.986 (docs/localization.md). The model name ("AMD EPYC") does
# not say which a VM was given.
CPU_INT8_FLAGS = ("avx2", *INT8_DOT_PRODUCT_X86, "asimddp", "i8mm")


def _version(dist: str) -> str | None:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return None


def _cpu() -> tuple[str, str | None]:
    """The CPU's model name, and the CPU_INT8_FLAGS it has, space-separated ("none" if it has none; None where
    it cannot tell), from /proc/cpuinfo's first CPU (core/cpuinfo.py)."""
    model, flags = cpuinfo()
    if model is None:
        model = platform.processor() or platform.machine()
    if flags is None:
        return model, None
    return model, " ".join(flag for flag in CPU_INT8_FLAGS if flag in flags) or "none"


def _tensorrt_version() -> str | None:
    """Only a real TensorRT counts: tensorrt-stubs alone install an importable, empty package."""
    try:
        import tensorrt

        return str(tensorrt.__version__) if hasattr(tensorrt, "Builder") else None
    except ImportError:
        return None


def _gpu(device: str) -> dict[str, Any]:
    if not device.startswith("cuda"):
        return {}
    info: dict[str, Any] = {}
    try:
        import torch

        if torch.cuda.is_available():
            index = torch.device(device).index or 0
            props = torch.cuda.get_device_properties(index)
            info.update(gpu_name=props.name, gpu_compute_capability=f"{props.major}.{props.minor}",
                        gpu_memory_gib=round(props.total_memory / 2**30, 1),
                        gpu_sm_count=props.multi_processor_count,
                        cuda_runtime=torch.version.cuda, cudnn=torch.backends.cudnn.version())
    except Exception as exc:  # a fingerprint must never fail a run; say what is missing instead
        info["gpu_error"] = f"torch: {exc}"
    try:
        import pynvml

        pynvml.nvmlInit()
        try:
            info["driver"] = pynvml.nvmlSystemGetDriverVersion()
            info["nvml_cuda_driver"] = pynvml.nvmlSystemGetCudaDriverVersion_v2()
            info.update(gpu_settings(pynvml, _gpu_uuid(device)))
        finally:
            pynvml.nvmlShutdown()
    except Exception as exc:
        info.setdefault("driver", f"unknown (NVML: {exc})")
    return info


def _gpu_uuid(device: str) -> str | None:
    """The device's UUID as NVML names it ("GPU-..."): NVML numbers the host's GPUs, CUDA the visible ones."""
    try:
        import torch

        uuid = getattr(torch.cuda.get_device_properties(torch.device(device).index or 0), "uuid", None)
    except Exception:
        return None
    return None if uuid is None else f"GPU-{uuid}"


def gpu_settings(nvml: Any, uuid: str | None) -> dict[str, Any]:
    """The GPU's settings that change its speed without changing any software: the enforced power limit, the
    maximum and the application SM clocks, persistence mode. A run on a power-capped or clock-locked card is
    slower for reasons no engine caused; the report's environment difference then names it. Each figure that
    NVML refuses (a VM may hide some) is left out rather than failing the fingerprint."""
    handle = nvml.nvmlDeviceGetHandleByUUID(uuid) if uuid else nvml.nvmlDeviceGetHandleByIndex(0)
    readers = {
        "gpu_power_limit_w": lambda: round(nvml.nvmlDeviceGetEnforcedPowerLimit(handle) / 1000.0, 1),
        "gpu_max_sm_clock_mhz": lambda: nvml.nvmlDeviceGetMaxClockInfo(handle, nvml.NVML_CLOCK_SM),
        "gpu_applications_sm_clock_mhz": lambda: nvml.nvmlDeviceGetApplicationsClock(handle, nvml.NVML_CLOCK_SM),
        "gpu_persistence_mode": lambda: bool(nvml.nvmlDeviceGetPersistenceMode(handle)),
    }
    settings: dict[str, Any] = {}
    for key, read in readers.items():
        try:
            settings[key] = read()
        except Exception:  # not every NVML build or VM reports every figure
            continue
    return settings


@functools.cache
def host_id() -> str:
    """This machine as the gate tells hosts apart (``hostname#digest``): the hostname, and a digest of the machine's
    id (/etc/machine-id) and the UUIDs of every GPU NVML sees on the host (CUDA_VISIBLE_DEVICES does not narrow
    NVML, so each worker of one host reads the same). Cloud VMs are often all named alike: on 2026-11-29 a one-H200
    and a two-H200 VM both called themselves ``vm``, and a baseline from one judged the other without a word."""
    parts = []
    try:
        parts.append(Path("/etc/machine-id").read_text().strip())
    except OSError:
        pass
    try:
        import pynvml

        pynvml.nvmlInit()
        try:
            parts += sorted(str(pynvml.nvmlDeviceGetUUID(pynvml.nvmlDeviceGetHandleByIndex(i)))
                            for i in range(pynvml.nvmlDeviceGetCount()))
        finally:
            pynvml.nvmlShutdown()
    except Exception:  # no NVML, no GPU: the machine id alone
        pass
    digest = hashlib.sha256("\n".join(parts).encode()).hexdigest()[:8] if parts else "unknown"
    return f"{platform.node()}#{digest}"


@functools.cache
def fingerprint(device: str = "cpu") -> dict[str, Any]:
    cpu, cpu_int8 = _cpu()
    info: dict[str, Any] = {
        "device": device,
        "hostname": platform.node(),
        "host_id": host_id(),
        "python": platform.python_version(),
        "platform": platform.platform(),
        "cpu": cpu,
        "cpu_int8": cpu_int8,
        "cpu_count": os.cpu_count(),
    }
    for lib in LIBRARIES:
        version = _tensorrt_version() if lib == "tensorrt" else _version(lib)
        if version is not None:
            info[lib] = version
    try:
        from engines.ort_import import import_onnxruntime

        ort = import_onnxruntime()
        info["onnxruntime_providers"] = list(ort.get_available_providers())
        info["onnxruntime_imported"] = ort.__version__  # which of onnxruntime / onnxruntime-gpu actually runs
    except ImportError:
        pass
    info.update(_gpu(device))
    return info


def differences(baseline: dict[str, Any], current: dict[str, Any]) -> dict[str, tuple[Any, Any]]:
    """Keys that make two fingerprints incomparable, with (baseline, current) values. The layout keys count only
    where ``current`` has them (LAYOUT_KEYS); a baseline that did not record them differs as None."""
    return {k: (baseline.get(k), current.get(k)) for k in COMPARABILITY_KEYS
            if baseline.get(k) != current.get(k) and (k not in LAYOUT_KEYS or k in current)}

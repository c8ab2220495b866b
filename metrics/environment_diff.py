"""What differs between the baseline runs' environments and this run's: the first thing a reader of an upgrade's
report needs, before any verdict, since a changed driver or library is the likeliest cause of every change below.

Pure: fingerprints in (suite/environment.py's dictionaries, plus the suite's own commit and config), differences
out, in one fixed order (hardware and driver, CUDA and cuDNN, engine libraries, torch, Python and numpy, the
suite), so that two reports read alike. Keys not in that order (a fingerprint key added later) follow, sorted.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

#: The fingerprint keys in the order the difference lists them.
KEY_ORDER = (
    # hardware and driver
    "device", "gpu_name", "gpu_compute_capability", "gpu_memory_gib", "gpu_sm_count", "gpu_power_limit_w",
    "gpu_max_sm_clock_mhz", "gpu_applications_sm_clock_mhz", "gpu_persistence_mode", "driver", "nvml_cuda_driver",
    "gpu_error", "cpu", "cpu_int8", "cpu_count", "hostname", "host_id", "platform",
    # how the run was spread: xdist workers, the GPUs they were given, each worker's cores
    "worker_count", "worker_gpus", "worker_cores",
    # CUDA and cuDNN
    "cuda_runtime", "cudnn", "cuda-python", "cuda-bindings", "nvidia-ml-py",
    # engine libraries
    "onnxruntime", "onnxruntime-gpu", "onnxruntime_imported", "onnxruntime_providers", "tensorrt", "onnx",
    "onnxscript",
    # torch
    "torch", "torchvision",
    # Python and numpy
    "python", "numpy", "pytest-benchmark",
    # the suite itself
    "suite_commit", "suite_config",
)

#: Each xdist worker's GPU name and CUDA_VISIBLE_DEVICES as one listing (suite/fleet/plugin.py run_environment): the
#: spread itself is compared through worker_count, worker_gpus and worker_cores, which read alike across runs.
#: A shard's plan and index (suite/fleet/plugin.py shard_environment) say how a night was split over hosts, not what it
#: ran on: the host itself differs as ``hostname`` and ``host_id``.
IGNORED = frozenset({"workers", "plan", "shard"})

NO_DIFFERENCE = "no difference in the recorded environment"

#: The prefix of one config key in a fingerprint (suite/gate/baseline_environment.py spreads the config's keys so):
#: "config models.m.engine_options.onnxruntime.transformer_fusion"; a key one side lacks is "not set" there.
CONFIG_PREFIX = "config "


@dataclass(frozen=True)
class EnvironmentDifference:
    """One key that differs: the distinct values the baseline runs recorded (oldest first; None: not recorded)
    and this run's."""

    key: str
    baseline: tuple[Any, ...]
    current: Any

    def as_dict(self) -> dict[str, Any]:
        return {"key": self.key, "baseline": list(self.baseline), "current": self.current}

    def describe(self) -> str:
        """'onnxruntime: 1.19.2 -> 1.20.1'; baseline runs that disagree: '1.19.2 | 1.20.0 -> 1.20.1'."""
        return f"{self.key}: {' | '.join(value_text(self.key, v) for v in self.baseline)} -> " \
               f"{value_text(self.key, self.current)}"


def environment_differences(current: Mapping[str, Any],
                            baselines: Sequence[Mapping[str, Any]]) -> list[EnvironmentDifference]:
    """The keys on which any baseline run differs from ``current``, in KEY_ORDER. A key one side did not record
    counts (a library installed on one side only); every value the baseline runs recorded is kept, so runs that
    disagree among themselves show it."""
    keys = set(current).union(*baselines) - IGNORED
    ordered = [k for k in KEY_ORDER if k in keys] + sorted(keys - set(KEY_ORDER))
    out = []
    for key in ordered:
        values: list[Any] = []
        for base in baselines:
            if base.get(key) not in values:
                values.append(base.get(key))
        if any(v != current.get(key) for v in values):
            out.append(EnvironmentDifference(key, tuple(values), current.get(key)))
    return out


def value_text(key: str, value: Any) -> str:
    """A fingerprint value on one line: 'not recorded' for None, lists comma-separated, cuDNN as a version."""
    if value is None:
        return "not set" if key.startswith(CONFIG_PREFIX) else "not recorded"
    if isinstance(value, (list, tuple)):
        return ", ".join(str(v) for v in value) or "none"
    if isinstance(value, Mapping):
        return "; ".join(f"{k}={v}" for k, v in value.items()) or "none"
    if key == "cudnn" and isinstance(value, int) and not isinstance(value, bool):
        return cudnn_text(value)
    return str(value)


def cudnn_text(v: int) -> str:
    """torch.backends.cudnn.version()'s integer as a version: 91900 -> '9.19.0 (91900)' (cuDNN 9 encodes
    major*10000 + minor*100 + patch), 8902 -> '8.9.2 (8902)' (cuDNN 8: major*1000 + minor*100 + patch)."""
    if v >= 90000:
        major, minor, patch = v // 10000, v % 10000 // 100, v % 100
    elif v >= 1000:
        major, minor, patch = v // 1000, v % 1000 // 100, v % 100
    else:
        return str(v)
    return f"{major}.{minor}.{patch} ({v})"

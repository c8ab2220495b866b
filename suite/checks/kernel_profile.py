"""--kernel-profile RUNS: the GPU kernels one inference of a latency case launches, with their GPU time.

Profiled after the case's timing, on the case's own prepared call (the same path: copies, device-resident, or the
CUDA graph's replay), through torch.profiler, whose CUPTI collector sees every kernel the process launches (ONNX
Runtime's too). Profiling adds its own cost, so it never runs inside a timed case; the figures are the profiler's
(metrics/kernel_profile.py turns them into per-inference figures and the sentence beside a case that moved).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from metrics.kernel_profile import kernels_per_inference


def profile_kernels(call: Callable[[], Any], runs: int, device: str, warmup: int = 2) -> dict[str, dict[str, float]]:
    """Each kernel (and memory copy) the device ran for ``runs`` calls of ``call`` after ``warmup``: launches and GPU
    microseconds per call. Empty where the profiler saw no device activity."""
    import torch
    from torch.autograd import DeviceType
    from torch.profiler import ProfilerActivity, profile

    for _ in range(warmup):
        call()
    torch.cuda.synchronize(torch.device(device))
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for _ in range(runs):
            call()
        torch.cuda.synchronize(torch.device(device))
    totals = [(e.key, int(e.count), float(e.self_device_time_total)) for e in prof.key_averages()
              if e.device_type == DeviceType.CUDA and e.self_device_time_total > 0]
    return kernels_per_inference(totals, runs)


def wanted(runs: int, device: str) -> bool:
    """The option is on and the case runs on a GPU (a CPU case has no kernels to list)."""
    return bool(runs) and device.startswith("cuda")

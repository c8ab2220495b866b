"""The GPU kernels one inference launches, with their GPU time, and what changed between two runs' lists.

Timing says a case moved; the kernel list says whether the engine now runs other kernels: cuDNN picked another
convolution algorithm (one kernel name gone, another new), a fusion disappeared (more launches), or the same kernels
simply take longer. Any engine's kernels count, ONNX Runtime's too: the profiler (torch.profiler over CUPTI) sees
every kernel the process launches. Pure: the profiler's per-kernel totals in, per-inference figures and a sentence
out; the deltas are metrics/node_profile.py's, keyed by kernel name instead of node.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from metrics.node_profile import node_deltas


def kernels_per_inference(totals: Iterable[tuple[str, int, float]], inferences: int) -> dict[str, dict[str, float]]:
    """``(kernel name, launches, GPU microseconds)`` summed over ``inferences`` profiled inferences -> each kernel's
    launches and GPU time (us) per inference, the costliest first."""
    out: dict[str, dict[str, float]] = {}
    for name, calls, gpu_us in totals:
        entry = out.setdefault(name, {"calls": 0.0, "gpu_us": 0.0})
        entry["calls"] += calls / inferences
        entry["gpu_us"] += gpu_us / inferences
    return {k: {"calls": round(v["calls"], 3), "gpu_us": round(v["gpu_us"], 3)}
            for k, v in sorted(out.items(), key=lambda kv: -kv[1]["gpu_us"])}


def explain_kernels(baseline: Mapping[str, Mapping[str, Any]], current: Mapping[str, Mapping[str, Any]],
                    top: int = 3) -> str:
    """The sentence beside a case that moved: launches and GPU time per inference in both runs, the kernels that
    are new or gone (another algorithm, a lost fusion), and the largest changes in GPU time."""
    def launches(k: Mapping[str, Mapping[str, Any]]) -> float:
        return sum(float(v.get("calls", 0.0)) for v in k.values())

    def gpu(k: Mapping[str, Mapping[str, Any]]) -> dict[str, float]:
        return {name: float(v.get("gpu_us", 0.0)) for name, v in k.items()}

    before, after = gpu(baseline), gpu(current)
    head = (f"kernels per inference (torch.profiler): {launches(baseline):g} -> {launches(current):g} launches, "
            f"{sum(before.values()) / 1e3:.3f} -> {sum(after.values()) / 1e3:.3f} ms GPU")
    new, gone = [n for n in after if n not in before], [n for n in before if n not in after]
    if not new and not gone:
        head += "; the same kernels"
    else:
        head += f"; {len(new)} new, {len(gone)} gone"
    deltas = node_deltas(_by_short_name(before), _by_short_name(after))
    total = sum(after.values()) - sum(before.values())
    return head + ("; largest changes: " + "; ".join(d.describe(total) for d in deltas[:top]) if deltas else "")


def short_name(kernel: str) -> str:
    """A kernel's name without its return type, template arguments and parameters, as a reader scans it:
    'void at::native::batch_norm_transform_input_kernel<c10::Half, ...>(...)' -> 'at::native::batch_norm_transform_
    input_kernel'. (C++ kernel names run to thousands of characters.)"""
    name = kernel.removeprefix("void ").strip()
    cut = min((i for i in (name.find("<"), name.find("(")) if i > 0), default=len(name))
    return name[:cut].strip()


def _by_short_name(gpu_us: Mapping[str, float]) -> dict[str, float]:
    out: dict[str, float] = {}
    for name, us in gpu_us.items():
        short = short_name(name)
        out[short] = out.get(short, 0.0) + us
    return out


def same_kernels(baseline: Mapping[str, Any], current: Mapping[str, Any]) -> bool:
    """Whether two runs' lists name the same kernels (GPU times aside)."""
    return set(baseline) == set(current)

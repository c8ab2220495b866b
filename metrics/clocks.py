"""GPU clocks during a timed case: what NVML's clock-event (throttle) reasons mean, one case's summary of its
samples, and a slowdown in clock-normalised time.

Why: a device-bound kernel's time scales with the SM clock. A GPU held at its power cap, or slowed by heat, runs
the same engine slower, and a gate that reads time alone calls that a regression of the engine. NVBench's compare
tool judges GPU time against the clock it ran at; here a device-bound slowdown fails only once it holds in
time x SM clock (cycles) as well. Pure arithmetic: suite/timing.py samples, suite/gate/latency.py decides.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from typing import Any

#: NVML's clocks-event reason bits (nvmlClocksEventReason*, formerly ClocksThrottleReason*) that mean the GPU held its
#: clocks below what the work asked for. Left out: GpuIdle (0x1: nothing to run), ApplicationsClocksSetting (0x2:
#: the clocks someone set, recorded in the environment), DisplayClockSetting (0x100).
LIMITING_REASONS: dict[int, str] = {
    0x4: "SW power cap",
    0x8: "HW slowdown",
    0x10: "sync boost",
    0x20: "SW thermal slowdown",
    0x40: "HW thermal slowdown",
    0x80: "HW power brake",
}


def limiting_reasons(mask: int) -> list[str]:
    """The names of the limiting reasons set in one NVML reasons bitmask, lowest bit first."""
    return [name for bit, name in LIMITING_REASONS.items() if mask & bit]


def clock_summary(clocks_mhz: Sequence[float], masks: Sequence[int]) -> dict[str, Any]:
    """One case's samples: the median and lowest SM clock, the share of samples with a limiting reason set, and
    every reason seen (empty when none was sampled)."""
    if not clocks_mhz:
        return {}
    limited = [m for m in masks if limiting_reasons(int(m))]
    seen = sorted({r for m in limited for r in limiting_reasons(int(m))},
                  key=lambda r: list(LIMITING_REASONS.values()).index(r))
    return {"sm_clock_mhz": float(statistics.median(clocks_mhz)), "sm_clock_mhz_min": float(min(clocks_mhz)),
            "clock_limited_pct": round(100.0 * len(limited) / len(masks), 1) if masks else 0.0,
            "clock_limits": seen}


def limited_note(gpu: dict[str, Any] | None) -> str | None:
    """'timed while the GPU limited its clocks (SW power cap) in 34% of samples', or None when it did not."""
    if not gpu or not gpu.get("clock_limited_pct"):
        return None
    reasons = ", ".join(gpu.get("clock_limits") or []) or "a limiting reason"
    return (f"timed while the GPU limited its clocks ({reasons}) in {gpu['clock_limited_pct']:g}% of samples, "
            f"SM clock median {gpu.get('sm_clock_mhz', 0):.0f} MHz, lowest {gpu.get('sm_clock_mhz_min', 0):.0f}")


def clock_normalised(ratio: float, ci_low: float, baseline_clock_mhz: float,
                     current_clock_mhz: float) -> tuple[float, float]:
    """A slowdown (current / baseline time, and its interval's lower end) in clock-normalised time: time x SM
    clock, the cycles the case took. A case 5 % slower at a clock 5 % lower took the same cycles (ratio 1.0)."""
    factor = current_clock_mhz / baseline_clock_mhz
    return ratio * factor, ci_low * factor


def confirmed_in_cycles(ratio: float, ci_low: float, decision_ratio: float, baseline_clock_mhz: float,
                        current_clock_mhz: float) -> bool:
    """Whether a regression (interval above 1, median past the decision ratio) holds in clock-normalised time too,
    by the same rule."""
    normalised, low = clock_normalised(ratio, ci_low, baseline_clock_mhz, current_clock_mhz)
    return low > 1.0 and normalised >= decision_ratio

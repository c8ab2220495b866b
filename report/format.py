"""How the report prints a value: figures, changes, durations, run and environment values, a gate's interval
and word. Its own module because every section prints these, and one figure must read the same wherever it
appears."""

from __future__ import annotations

import math
from collections.abc import Mapping
from html import escape
from typing import Any

from metrics import environment_diff


def fmt(value: Any, digits: int = 3) -> str:
    """A figure as a table shows it: '-' for missing or not finite, thousands separated, never scientific
    notation above 1, so columns of one kind read alike."""
    if value is None:
        return "-"
    if isinstance(value, str):
        return escape(value)
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, int):
        return f"{value:,}"
    v = float(value)
    if not math.isfinite(v):
        return "-"
    if v == 0.0:
        return "0"
    if abs(v) < 1.0:  # `digits` significant digits, trailing zeros kept down to 0.001 (0.700, not 0.7)
        return f"{v:#.{digits}g}" if abs(v) >= 1e-3 else f"{v:.{digits}g}"
    # `digits`+1 significant digits at least, never scientific notation, thousands separated.
    decimals = max(0, digits - int(math.floor(math.log10(abs(v)))))
    return f"{v:,.{decimals}f}"


def signed_pct(value: Any, digits: int = 2) -> str:
    """A change with its sign: '+12.50%'."""
    return "-" if value is None else f"{float(value):+.{digits}f}%"


def one_line(value: Any) -> str:
    """A run_info / environment value as one line of text: mappings as key=value, lists comma-separated."""
    if value is None:
        return "-"
    if isinstance(value, Mapping):
        return "; ".join(f"{k}: {one_line(v)}" if isinstance(v, Mapping) else f"{k}={one_line(v)}"
                         for k, v in value.items()) or "none"
    if isinstance(value, (list, tuple)):
        return ", ".join(one_line(v) for v in value) or "none"
    return str(value)


def first_line(text: Any) -> str:
    """The first non-blank line of a message: what a list or a table cell has room for."""
    for line in str(text or "").splitlines():
        if line.strip():
            return line.strip()
    return ""


def duration(value: Any) -> str:
    """Seconds as a wall time: minutes from two minutes up."""
    s = float(value)
    if s >= 120:
        return f"{s / 60:.1f} min"
    return f"{s:.1f} s"


def ratio_interval(o: Mapping[str, Any]) -> str:
    """The gate's interval of the ratio, as the terminal prints it (metrics.regression.format_ratio): a bound
    beyond 100x is '>100x' and one below 0.01x '<0.01x' (an interval resting on two saved runs reaches 1e99 or
    inf, which printed in full helps nobody)."""
    from metrics.regression import format_ratio

    if o.get("ci_low") is None or o.get("ci_high") is None:
        return "-"
    return escape(f"[{format_ratio(float(o['ci_low']), 3)}, {format_ratio(float(o['ci_high']), 3)}]")


def cudnn_text(value: Any) -> str:
    """torch.backends.cudnn.version()'s integer as a version (metrics/environment_diff.py), anything else as is."""
    try:
        return environment_diff.cudnn_text(int(value))
    except (TypeError, ValueError):
        return one_line(value)


def env_value(key: str, value: Any) -> str:
    """A fingerprint value as the run table and the environment table both show it (cuDNN as a version)."""
    return cudnn_text(value) if key == "cudnn" else one_line(value)


def status_text(o: Mapping[str, Any]) -> str:
    """The gate's word, with the side that was busy ('busy (baseline)': the baseline was saved busy)."""
    side = o.get("busy_side")
    return escape(str(o.get("status")) + (f" ({side})" if side else ""))

"""Plots for the HTML report, rendered with matplotlib's Agg backend into base64 PNG data URIs so the
report stays one self-contained file.

Each function takes the suite's plain records (dicts) and returns ``None`` when there is nothing to
draw, so the report never shows an empty axis.
"""

from __future__ import annotations

import base64
import io
from collections import defaultdict
from collections.abc import Iterable, Mapping
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # after matplotlib.use: the backend must be chosen first

from report.html import cell_sort_key

PATH_STYLE = {"all": "-", "model": "--", "graph": ":"}


def to_data_uri(fig: Any) -> str:
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=90, bbox_inches="tight")
    plt.close(fig)
    return "data:image/png;base64," + base64.b64encode(buffer.getvalue()).decode("ascii")


def _latency(records: Iterable[Mapping[str, Any]], model: str) -> list[Mapping[str, Any]]:
    return [r for r in records if r.get("kind") == "latency" and r.get("model") == model and r.get("samples_s")]


def latency_plot(records: Iterable[Mapping[str, Any]], model: str) -> str | None:
    """Per-round latency (ms) per engine/precision, one panel per batch size and path: box = quartiles,
    whiskers = 5th/95th percentile, so a wider box is a noisier case."""
    rows = _latency(records, model)
    if not rows:
        return None
    panels: dict[tuple[int, str], list[Mapping[str, Any]]] = defaultdict(list)
    for r in rows:
        panels[(int(r["batch_size"]), str(r.get("path", "all")))].append(r)
    keys = sorted(panels)
    fig, axes = plt.subplots(1, len(keys), figsize=(max(4.0, 3.2 * len(keys)), 3.4), squeeze=False)
    for ax, key in zip(axes[0], keys, strict=True):
        cases = sorted(panels[key], key=lambda r: cell_sort_key(r["engine"], r["precision"]))
        data = [[s * 1e3 for s in r["samples_s"]] for r in cases]
        ax.boxplot(data, whis=(5, 95), showfliers=False)
        ax.set_xticks(range(1, len(cases) + 1), [f"{r['engine']}\n{r['precision']}" for r in cases], fontsize=8)
        ax.set_title(f"batch {key[0]}, latency-{key[1]}", fontsize=9)
        ax.set_ylabel("ms per call")
        ax.grid(axis="y", alpha=0.3)
    fig.suptitle(f"{model}: latency per engine and precision", fontsize=10)
    return to_data_uri(fig)


def throughput_plot(records: Iterable[Mapping[str, Any]], model: str) -> str | None:
    """Items per second against batch size, one line per engine/precision (and path)."""
    rows = [r for r in _latency(records, model) if r.get("throughput_per_s")]
    series: dict[tuple[str, str, str], list[tuple[int, float]]] = defaultdict(list)
    for r in rows:
        series[(r["engine"], r["precision"], str(r.get("path", "all")))].append(
            (int(r["batch_size"]), float(r["throughput_per_s"])))
    if not series:
        return None
    fig, ax = plt.subplots(figsize=(5.5, 3.4))
    for (engine, precision, path), points in sorted(series.items(),
                                                    key=lambda kv: (cell_sort_key(kv[0][0], kv[0][1]), kv[0][2])):
        points.sort()
        ax.plot([p[0] for p in points], [p[1] for p in points], PATH_STYLE.get(path, "-"), marker="o",
                label=f"{engine} {precision} ({path})")
    ax.set_xscale("log", base=2)
    ax.set_xlabel("batch size")
    ax.set_ylabel("items / s (batch / median)")
    ax.set_title(f"{model}: throughput vs batch size", fontsize=10)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    return to_data_uri(fig)


def gpu_timeline_plot(records: Iterable[Mapping[str, Any]], model: str) -> str | None:
    """GPU memory in use and NVML utilization over each latency case's run (where a timeline exists)."""
    rows = [r for r in _latency(records, model) if ((r.get("gpu") or {}).get("timeline") or {}).get("t_s")]
    if not rows:
        return None
    fig, (mem, util) = plt.subplots(1, 2, figsize=(10.0, 3.4))
    for r in sorted(rows, key=lambda r: (cell_sort_key(r["engine"], r["precision"]), r["batch_size"])):
        t = r["gpu"]["timeline"]
        label = f"{r['engine']} {r['precision']} bs{r['batch_size']} {r.get('path', 'all')}"
        mem.plot(t["t_s"], t.get("memory_mib", []), label=label)
        util.plot(t["t_s"], t.get("sm_util_pct", []), label=label)
    mem.set_title("GPU memory in use (MiB)", fontsize=9)
    util.set_title("GPU utilization (% of time a kernel ran, NVML)", fontsize=9)
    for ax in (mem, util):
        ax.set_xlabel("s since the case started")
        ax.grid(alpha=0.3)
    util.legend(fontsize=6)
    fig.suptitle(f"{model}: GPU over time", fontsize=10)
    return to_data_uri(fig)

"""Figures for the HTML report, drawn with matplotlib's Agg backend and embedded as base64 PNG data URIs
so the report stays one self-contained file.

Each builder takes the suite's plain records (dicts) and returns :class:`Plot` objects (the matplotlib
figure, its caption and alt text) or nothing when there is nothing to draw, so the report never shows
an empty axis and the tests can inspect a figure before it is encoded. Small multiples, never a
crowded axes: no axes holds more than ``MAX_SERIES`` series (boxes or lines).
"""

from __future__ import annotations

import base64
import io
import math
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # after matplotlib.use: the backend must be chosen first
from matplotlib import ticker
from matplotlib.figure import Figure

from report.cases import (
    ENGINE_ORDER,
    PATH_MEANING,
    PRECISION_ORDER,
    Shape,
    cell_sort_key,
    path_sort_key,
    shape_label,
    shape_of,
    shape_sort_key,
    shape_title,
)

#: The most series (boxes or lines) one axes may hold; more go to further panels.
MAX_SERIES = 8
#: A panel whose medians span more than this factor gets a log y axis (and says so).
LOG_SPAN = 10.0
#: Which latency path the GPU timeline prefers for a cell: engine time alone first.
TIMELINE_PATHS = ("model", "graph", "all")

_COLORS = plt.get_cmap("tab10").colors

Cell = tuple[str, str]


@dataclass
class Plot:
    kind: str  # "latency" | "throughput" | "gpu"
    figure: Figure
    caption: str
    alt: str


def to_data_uri(fig: Figure) -> str:
    buffer = io.BytesIO()
    # constrained layout already fits the figure; bbox_inches="tight" would lay it out a second time
    fig.savefig(buffer, format="png", dpi=90, bbox_inches=None if fig.get_layout_engine() else "tight")
    plt.close(fig)
    return "data:image/png;base64," + base64.b64encode(buffer.getvalue()).decode("ascii")


def model_plots(records: Sequence[Mapping[str, Any]], model: str) -> list[Plot]:
    """Every figure of one model, in report order: latency per batch, throughput, GPU over time."""
    found: list[Plot | None] = [*latency_plots(records, model), throughput_plot(records, model),
                                gpu_timeline_plot(records, model)]
    return [p for p in found if p is not None]


def series_groups(cells: Iterable[Cell], limit: int = MAX_SERIES) -> list[list[Cell]]:
    """Cells in practitioners' order, packed into groups of at most ``limit``; an engine's precisions stay
    together unless the engine alone has more than ``limit``."""
    by_engine: dict[str, list[Cell]] = defaultdict(list)
    for cell in sorted(set(cells), key=lambda c: cell_sort_key(*c)):
        by_engine[cell[0]].append(cell)
    groups: list[list[Cell]] = []
    current: list[Cell] = []
    for engine_cells in by_engine.values():
        for i in range(0, len(engine_cells), limit):
            chunk = engine_cells[i:i + limit]
            if current and len(current) + len(chunk) > limit:
                groups.append(current)
                current = []
            current.extend(chunk)
    if current:
        groups.append(current)
    return groups


def _latency(records: Iterable[Mapping[str, Any]], model: str) -> list[Mapping[str, Any]]:
    return [r for r in records if r.get("kind") == "latency" and r.get("model") == model and r.get("samples_s")]


def _cell(r: Mapping[str, Any]) -> Cell:
    return str(r["engine"]), str(r["precision"])


def _path(r: Mapping[str, Any]) -> str:
    return str(r.get("path", "all"))


def _engine_color(engine: str) -> Any:
    return _COLORS[ENGINE_ORDER.index(engine) if engine in ENGINE_ORDER else len(ENGINE_ORDER) % len(_COLORS)]


def _precision_color(precision: str) -> Any:
    i = PRECISION_ORDER.index(precision) if precision in PRECISION_ORDER else len(PRECISION_ORDER)
    return _COLORS[i % len(_COLORS)]


def _clocks(rows: Iterable[Mapping[str, Any]]) -> str:
    by_path: dict[str, set[str]] = defaultdict(set)
    for r in rows:
        by_path[_path(r)].add(str(r.get("clock") or "not recorded"))
    return "; ".join(f"latency-{p}: " + " | ".join(sorted(by_path[p])) for p in sorted(by_path, key=path_sort_key))


def _paths_text(paths: Sequence[str]) -> str:
    return "; ".join(f"latency-{p}: {PATH_MEANING.get(p, p)}" for p in paths)


def _rounds_text(rows: Sequence[Mapping[str, Any]]) -> str:
    counts = sorted({len(r["samples_s"]) for r in rows})
    return str(counts[0]) if len(counts) == 1 else f"{counts[0]} to {counts[-1]}"


def _tick_text(value: float, _: Any = None) -> str:
    """A tick as people write it: 0.2, 5, 20, 1,500, never 2x10^1."""
    return f"{value:,.0f}" if value >= 1000 else f"{value:g}"


def _log_ticks(ax: Any) -> None:
    """Labelled ticks at 1, 2 and 5 of every decade on the y axis: the default labels only powers of 10, so a
    panel whose boxes sit at 0.19 ms between a 0.1 and a 1 label had no tick near them."""
    ax.yaxis.set_major_locator(ticker.LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
    ax.yaxis.set_major_formatter(ticker.FuncFormatter(_tick_text))
    ax.yaxis.set_minor_formatter(ticker.NullFormatter())


def _outside_legend(ax: Any, handles: Sequence[Any] | None = None, labels: Sequence[str] | None = None,
                    below: bool = False) -> None:
    """A legend beside (or below) the axes, never over the data."""
    kwargs: dict[str, Any] = {"fontsize": 7, "frameon": False}
    if below:
        kwargs.update(loc="upper center", bbox_to_anchor=(0.5, -0.32), ncol=2)
    else:
        kwargs.update(loc="upper left", bbox_to_anchor=(1.02, 1.0), borderaxespad=0.0)
    if handles is not None:
        ax.legend(handles, labels, **kwargs)
    else:
        ax.legend(**kwargs)


def _finite(values: Any) -> list[float]:
    """Numbers to draw: None (a sample NVML could not take) becomes NaN, a gap in the line."""
    return [float("nan") if v is None else float(v) for v in values or []]


def _empty(ax: Any, text: str) -> None:
    ax.text(0.5, 0.5, text, ha="center", va="center", transform=ax.transAxes, fontsize=8, color="#777")
    ax.set_xticks([])
    ax.set_yticks([])


def latency_plots(records: Sequence[Mapping[str, Any]], model: str) -> list[Plot]:
    """Per-round latency (ms) as boxes, one per engine/precision: one row of panels per batch size (and
    group of at most MAX_SERIES cells), one column per path, one y scale per batch size. Box = quartiles,
    line = median, whiskers = 5th/95th percentile, so a taller box is a noisier case."""
    rows = _latency(records, model)
    if not rows:
        return []
    shapes = sorted({shape_of(r) for r in rows}, key=shape_sort_key)
    paths = sorted({_path(r) for r in rows}, key=path_sort_key)
    groups = series_groups(_cell(r) for r in rows)
    index = {(*_cell(r), shape_of(r), _path(r)): r for r in rows}
    panel_rows = [(shape, group) for shape in shapes for group in groups]
    width = max(len(g) for g in groups)
    fig, axes = plt.subplots(len(panel_rows), len(paths), squeeze=False, layout="constrained",
                             figsize=(max(4.5, (1.2 + 0.62 * width) * len(paths)), 0.4 + 3.2 * len(panel_rows)))
    drawn: dict[Shape, list[Any]] = defaultdict(list)
    for ri, (shape, group) in enumerate(panel_rows):
        for pi, path in enumerate(paths):
            ax = axes[ri][pi]
            ax.set_title(f"{shape_title(shape)}, latency-{path}", fontsize=9)
            present = [(i + 1, index[(*c, shape, path)]) for i, c in enumerate(group) if (*c, shape, path) in index]
            if not present:
                _empty(ax, "not timed for these cells")
                continue
            data = [[s * 1e3 for s in r["samples_s"]] for _, r in present]
            boxes = ax.boxplot(data, positions=[p for p, _ in present], whis=(5, 95), showfliers=False,
                               patch_artist=True, widths=0.6, medianprops={"color": "black"})
            for box, (_, r) in zip(boxes["boxes"], present, strict=True):
                box.set_facecolor(_engine_color(str(r["engine"])))
                box.set_alpha(0.55)
            # one line per label, slanted: side by side, 'onnxruntime' under 'onnxruntime' ran together
            ax.set_xticks(range(1, len(group) + 1), [f"{e} {p}" for e, p in group], fontsize=7, rotation=30,
                          ha="right", rotation_mode="anchor")
            ax.set_xlim(0.4, len(group) + 0.6)
            ax.tick_params(axis="y", labelsize=7)
            ax.grid(axis="y", alpha=0.3)
            drawn[shape].append(ax)
    logged = []
    for shape, batch_axes in drawn.items():  # one scale per shape, so its panels compare by eye
        medians = [float(r["median_ms"]) for r in rows if shape_of(r) == shape and r.get("median_ms")]
        log = bool(medians) and min(medians) > 0 and max(medians) / min(medians) > LOG_SPAN
        for ax in batch_axes:
            if log:
                ax.set_yscale("log")
                _log_ticks(ax)
            ax.set_ylabel("ms per round" + (" (log scale)" if log else ""), fontsize=8)
        low = min(ax.get_ylim()[0] for ax in batch_axes)
        high = max(ax.get_ylim()[1] for ax in batch_axes)
        for ax in batch_axes:
            ax.set_ylim(low, high)
        if log:
            logged.append(shape)
    named = any(dims for _, dims in shapes)
    unit = "shape (batch and " + ", ".join(sorted({k for _, dims in shapes for k, _ in dims})) + ")" if named \
        else "batch size"
    where_logged = (", ".join(map(shape_label, logged)) if named
                    else "batch " + ", ".join(str(batch) for batch, _ in logged))
    fig.suptitle(f"{model}: time per round", fontsize=10)
    caption = (f"{model}: the time of each timed round after warm-up, in ms, one box per engine and precision; one "
               f"row of panels per {unit}" + (f" (cells split over rows of at most {MAX_SERIES})" if len(groups) > 1
                                               else "")
               + (", one column per latency path" if len(paths) > 1 else "")
               + f"; the panels of one {'shape' if named else 'batch size'} share their y scale. Box: quartiles; "
               "line: median (the figure the latency gate compares); whiskers: 5th to 95th percentile; rounds beyond "
               f"them are not drawn. {_rounds_text(rows)} rounds per case. Paths: {_paths_text(paths)}. "
               f"Clocks: {_clocks(rows)}."
               + (f" Log scale at {where_logged}, where medians differ more than {LOG_SPAN:g}x." if logged else ""))
    return [Plot("latency", fig, caption, f"{model} latency per round")]


def throughput_plot(records: Sequence[Mapping[str, Any]], model: str) -> Plot | None:
    """Items per second against batch size, one line per engine/precision, one column per path, one row per
    group of at most MAX_SERIES cells and per setting of the named axes (seq 128, seq 256: a line joins only
    shapes that differ in their batch). Only where the model was timed at two batch sizes or more."""
    rows = [r for r in _latency(records, model) if r.get("throughput_per_s")]
    by_dims: dict[tuple[tuple[str, Any], ...], list[Mapping[str, Any]]] = defaultdict(list)
    for r in rows:
        by_dims[shape_of(r)[1]].append(r)
    families = [d for d in sorted(by_dims, key=lambda d: shape_sort_key((0, d)))
                if len({int(r["batch_size"]) for r in by_dims[d]}) >= 2]
    if not families:
        return None
    left_out = sorted({shape_of(r) for d in by_dims if d not in families for r in by_dims[d]}, key=shape_sort_key)
    rows = [r for d in families for r in by_dims[d]]
    paths = sorted({_path(r) for r in rows}, key=path_sort_key)
    groups = series_groups(_cell(r) for r in rows)
    panel_rows = [(dims, group) for dims in families for group in groups]
    series: dict[tuple[str, str, tuple[tuple[str, Any], ...], str], list[tuple[int, float]]] = defaultdict(list)
    for r in rows:
        series[(*_cell(r), shape_of(r)[1], _path(r))].append((int(r["batch_size"]), float(r["throughput_per_s"])))
    fig, axes = plt.subplots(len(panel_rows), len(paths), squeeze=False, sharex=True, sharey=True,
                             layout="constrained", figsize=(1.4 + 4.6 * len(paths), 0.4 + 3.2 * len(panel_rows)))
    values = [float(r["throughput_per_s"]) for r in rows]
    log = min(values) > 0 and max(values) / min(values) > LOG_SPAN
    batches = sorted({int(r["batch_size"]) for r in rows})
    for gi, (dims, group) in enumerate(panel_rows):
        legend: dict[str, Any] = {}
        for pi, path in enumerate(paths):
            ax = axes[gi][pi]
            where = "".join(f", {k} {v}" for k, v in dims)
            drawn = [(i, c, sorted(series[(*c, dims, path)])) for i, c in enumerate(group)
                     if series.get((*c, dims, path))]
            if not drawn:
                _empty(ax, f"latency-{path}{where} not timed\nfor these cells")
                continue
            for i, (engine, precision), points in drawn:  # a cell keeps its colour in every panel of the row
                line, = ax.plot([p[0] for p in points], [p[1] for p in points], marker="o",
                                color=_COLORS[i % len(_COLORS)], label=f"{engine} {precision}")
                legend.setdefault(f"{engine} {precision}", line)
            ax.set_xscale("log", base=2)
            ax.set_xticks(batches, [str(b) for b in batches])  # the batches measured, not every power of 2
            ax.xaxis.set_minor_locator(ticker.NullLocator())
            ax.tick_params(labelsize=7)
            if log:
                ax.set_yscale("log")
                _log_ticks(ax)
            ax.set_xlabel("batch size", fontsize=8)
            ax.set_ylabel("items / s" + (" (log scale)" if log else ""), fontsize=8)
            ax.set_title(f"latency-{path}{where}", fontsize=9)
            ax.grid(alpha=0.3)
        if legend:  # one legend per row, beside its last panel
            order = [f"{e} {p}" for e, p in group if f"{e} {p}" in legend]
            _outside_legend(axes[gi][-1], [legend[k] for k in order], order)
    fig.suptitle(f"{model}: throughput against batch size", fontsize=10)
    named = any(families)
    caption = (f"{model}: throughput (items per second = batch size / median round) against batch size (log2 axis), "
               "one line per engine and precision" + (", one column per latency path" if len(paths) > 1 else "")
               + (", one row per setting of the other axes (a line joins shapes that differ only in their batch)"
                  if named else "")
               + (f", cells split over {len(groups)} rows of at most {MAX_SERIES}" if len(groups) > 1 else "")
               + "; every panel shares one scale" + (f", logarithmic (the figures span more than {LOG_SPAN:g}x)" if log
                                                     else "")
               + f". Paths: {_paths_text(paths)}."
               + (f" Not drawn (the only batch timed at its other axes): {', '.join(map(shape_label, left_out))}."
                  if left_out else ""))
    return Plot("throughput", fig, caption, f"{model} throughput against batch size")


def timeline_cases(records: Sequence[Mapping[str, Any]], model: str) -> list[Mapping[str, Any]]:
    """One latency case per engine/precision that carries a GPU timeline: its largest shape (batch, then the
    named axes), on the device-resident path where it was timed (model, else graph, else all)."""
    best: dict[Cell, Mapping[str, Any]] = {}

    def rank(r: Mapping[str, Any]) -> tuple[Any, int]:
        path = _path(r)
        return (shape_sort_key(shape_of(r)),
                -(TIMELINE_PATHS.index(path) if path in TIMELINE_PATHS else len(TIMELINE_PATHS)))

    for r in _latency(records, model):
        if not ((r.get("gpu") or {}).get("timeline") or {}).get("t_s"):
            continue
        cell = _cell(r)
        if cell not in best or rank(r) > rank(best[cell]):
            best[cell] = r
    return [best[c] for c in sorted(best, key=lambda c: cell_sort_key(*c))]


def gpu_timeline_plot(records: Sequence[Mapping[str, Any]], model: str) -> Plot | None:
    """GPU memory in use (top row) and NVML utilization (bottom row) over one case per engine/precision
    (``timeline_cases``); one column per engine, one line per precision. Every case's peak memory and
    mean utilization are columns of the practitioners' tables."""
    cases = timeline_cases(records, model)
    if not cases:
        return None
    columns: list[list[Mapping[str, Any]]] = []
    by_engine: dict[str, list[Mapping[str, Any]]] = defaultdict(list)
    for r in cases:
        by_engine[str(r["engine"])].append(r)
    for engine_cases in by_engine.values():
        columns.extend(engine_cases[i:i + MAX_SERIES] for i in range(0, len(engine_cases), MAX_SERIES))
    fig, axes = plt.subplots(2, len(columns), squeeze=False, figsize=(max(5.0, 3.8 * len(columns)), 6.6),
                             sharey="row", layout="constrained")
    memory_top = 0.0
    for ci, column in enumerate(columns):
        mem, util = axes[0][ci], axes[1][ci]
        for r in column:
            t = r["gpu"]["timeline"]
            label = f"{r['precision']} {shape_label(shape_of(r))} {_path(r)}"
            color = _precision_color(str(r["precision"]))
            memory = _finite(t.get("memory_mib"))
            # a case shorter than a few NVML intervals has one or two samples: a line alone would not show them
            style = {"marker": "o", "markersize": 3} if len(t["t_s"]) < 5 else {}
            mem.plot(t["t_s"][:len(memory)], memory, color=color, label=label, **style)
            util.plot(t["t_s"], t.get("sm_util_pct", []), color=color, label=label, **style)
            memory_top = max([memory_top, *(m for m in memory if math.isfinite(m))])
        mem.set_title(f"{column[0]['engine']}: memory in use (MiB)", fontsize=9)
        util.set_title(f"{column[0]['engine']}: GPU utilization (%)", fontsize=9)
        util.set_xlabel("s since the case started", fontsize=8)
        for ax in (mem, util):
            ax.grid(alpha=0.3)
            ax.tick_params(labelsize=7)
        _outside_legend(util, below=True)  # the same lines in both rows: one legend, under the column
    # The rows share y, so the limits are set once, after every column is drawn: set inside the loop they froze
    # the first column's range and later engines (loaded later, more memory in use) drew above it, off the axes.
    axes[0][0].set_ylim(0, memory_top * 1.08 if memory_top > 0 else 1.0)
    axes[1][0].set_ylim(0, 105)
    fig.suptitle(f"{model}: GPU over time, one case per engine and precision", fontsize=10)
    sources = sorted({str((r.get("gpu") or {}).get("source")) for r in cases if (r.get("gpu") or {}).get("source")})
    caption = (f"{model}: device memory in use (MiB, all processes, as nvidia-smi shows; top row) and GPU "
               "utilization (NVML: % of time at least one kernel was running; bottom row) while one latency case "
               "per engine and precision ran, warm-up rounds included: its largest batch, on the device-resident "
               "path where it was timed (model, else graph, else all), as each legend says. One column per engine. "
               "Memory is device-wide: its level includes every engine this process loaded before the case (they "
               "stay loaded), so it grows in run order; the memory each case added and its mean utilization are "
               "columns of the tables above."
               + (f" Source: {', '.join(sources)}." if sources else ""))
    return Plot("gpu", fig, caption, f"{model} GPU memory and utilization over time")

"""The practitioners' table: per model and latency shape, rows engine x precision x path, the figures people
compare by hand after an upgrade (layers, size, latency, throughput, baseline change, GPU memory, accuracy, parity).
Its own module because its columns come and go with what the run measured, which takes most of its code."""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from html import escape
from typing import Any

from report.cases import (
    PATH_MEANING,
    Shape,
    cell_sort_key,
    is_generated,
    latency_labels,
    path_sort_key,
    shape_id,
    shape_of,
    shape_title,
)
from report.format import fmt, signed_pct, status_text

#: Columns of every practitioners' table, in order (a baseline, NVML figures and ``bound`` add more).
PRACTITIONER_COLUMNS = ("engine", "precision", "layers", "parameters", "size (MB)", "path", "median (ms)",
                        "mean (ms)", "p99 (ms)", "max (ms)", "throughput (items/s)", "top-1 (%)", "top-5 (%)",
                        "isclose (%)", "MAE")
BOUND_COLUMN = "bound"
CENSUS_COLUMN = "computes in"
PEAK_COLUMN = "peak GPU memory (MiB)"
ADDED_COLUMN = "memory the cell added (MiB)"
BASELINE_COLUMNS = ("baseline median (ms)", "change")
GPU_COLUMNS = ("GPU memory added (MiB)", "mean GPU util (%)")
#: A mean GPU utilization from fewer NVML samples than this (20 ms apart) is not shown: 2 to 5 samples of a short
#: case say more about when the sampler woke than about the engine.
MIN_UTIL_SAMPLES = 10

_COLUMN_TITLES = {
    "layers": "what each engine counts: leaf modules (torch, inductor), ONNX nodes, TensorRT layers",
    "median (ms)": "median round after warm-up: the figure the latency gate compares",
    "throughput (items/s)": "batch size / median round",
    "baseline median (ms)": "the latency baseline's median for the same model, engine, precision, batch and path",
    "change": "current / baseline median - 1, and the gate's verdict (see 'Changed since baseline')",
    "bound": "whether the case is limited by the device or by the host launching work",
    "computes in": "compute nodes of what the engine really runs (ONNX Runtime's optimized graph, TensorRT's "
                   "inspector) by the precision they compute in; red: almost nothing in the cell's precision",
    "GPU memory added (MiB)": "NVML, device-wide: the most memory in use during the case minus what was in use at "
                              "its start (first sample); below, that start figure, which includes every engine this "
                              "process loaded earlier (and other processes), so it grows in run order",
    "mean GPU util (%)": f"NVML: mean share of time a kernel ran during the case; '-' below {MIN_UTIL_SAMPLES} samples",
    "isclose (%)": "parity against PyTorch fp32 on the model's data set (generated inputs: parity tables below)",
    PEAK_COLUMN: "the most GPU memory the process held while the cell's tests ran (NVML; else torch's allocator): "
                 "the cell's engine with what the process held when the cell began (its model's fp32 reference, "
                 "kept through the model's cells; what earlier cells left), so it depends on the order the cells "
                 "ran in (suite/lifetime.py)",
    ADDED_COLUMN: "the peak less what the process held when the cell's tests began (NVML; else torch's "
                  "allocator): the cell's own, whatever ran before it; the figure the drift gate compares "
                  "(--accuracy-drift memory=)",
}


def _memory(facts: Mapping[str, Any], figure: str) -> float | None:
    """A cell's ``figure`` (peak, added) in MiB from its engine facts: NVML's, else the allocator's; None."""
    memory = facts.get("gpu_memory") or {}
    value = memory.get(f"nvml_{figure}_mib")
    return value if value is not None else memory.get(f"allocator_{figure}_mib")


def peak_memory(facts: Mapping[str, Any]) -> float | None:
    """A cell's peak GPU memory (MiB)."""
    return _memory(facts, "peak")


def added_memory(facts: Mapping[str, Any]) -> float | None:
    """What a cell added over the process's memory at its start (MiB)."""
    return _memory(facts, "added")


def _cells(model: str, records: Iterable[Mapping[str, Any]], engines: Mapping[str, Any]) -> list[tuple[str, str]]:
    cells = {(str(r["engine"]), str(r["precision"])) for r in records
             if r.get("model") == model and "engine" in r and r.get("kind") != "harness_overhead"}
    for cell_id in engines:
        model_name, _, rest = cell_id.partition("-")
        if model_name == model and "-" in rest:
            engine, _, precision = rest.rpartition("-")
            cells.add((engine, precision))
    return sorted(cells, key=lambda c: cell_sort_key(*c))


def _latency_outcomes(gate: Mapping[str, Any] | None) -> dict[str, Mapping[str, Any]]:
    return {str(o.get("label")): o for o in (gate or {}).get("latency") or []}


def _clock_caption(rows: Iterable[Mapping[str, Any]]) -> str:
    by_path: dict[str, set[str]] = defaultdict(set)
    for r in rows:
        by_path[str(r.get("path", "all"))].add(str(r.get("clock") or "clock not recorded"))
    items = []
    for path in sorted(by_path, key=path_sort_key):
        meaning = PATH_MEANING.get(path, "")
        items.append(f"latency-{escape(path)}" + (f" ({escape(meaning)})" if meaning else "")
                     + "; clock: " + " | ".join(escape(c) for c in sorted(by_path[path])))
    return ". ".join(items)


def census_cell(facts: Mapping[str, Any], rowspan: str) -> str:
    """The precision census of an engine (suite/session.py): counts per precision, red when the engine computes
    nothing, or almost nothing, in the precision the cell is named for."""
    census = facts.get("precision_census")
    if not isinstance(census, Mapping):
        return f"<td{rowspan}>-</td>"
    counts = ", ".join(f"{escape(str(k))} {v}" for k, v in (census.get("counts") or {}).items()) or "-"
    style = "" if census.get("ok", True) else ' class="census-off"'
    return f'<td{rowspan}{style} title="{escape(str(census.get("text", "")))}">{counts}</td>'


def _has_gpu_memory(record: Mapping[str, Any]) -> bool:
    """Whether a latency case carries NVML memory figures (a peak or a timeline): the GPU columns and their
    note are shown where one of the model's cases does."""
    gpu = record.get("gpu") or {}
    return gpu.get("peak_memory_mib") is not None or bool((gpu.get("timeline") or {}).get("memory_mib"))


@dataclass(frozen=True)
class _Shown:
    """The optional columns one table shows: each where the model has that figure and it is not one value."""

    bound: bool
    baseline: bool
    gpu: bool
    peak: bool
    added: bool
    census: bool
    accuracy: bool

    def columns(self) -> list[str]:
        latency = ["path", "median (ms)", "mean (ms)", "p99 (ms)", "max (ms)", "throughput (items/s)"]
        latency += [BOUND_COLUMN] * self.bound + list(BASELINE_COLUMNS) * self.baseline + list(GPU_COLUMNS) * self.gpu
        return ["engine", "precision", "layers", "parameters", "size (MB)", *[PEAK_COLUMN] * self.peak,
                *[ADDED_COLUMN] * self.added, *[CENSUS_COLUMN] * self.census,
                *latency, *["top-1 (%)", "top-5 (%)"] * self.accuracy, "isclose (%)", "MAE"]


Cell = tuple[str, str]


def practitioners_table(model: str, records: Sequence[Mapping[str, Any]], engines: Mapping[str, Mapping[str, Any]],
                        shape: Shape | None, gate: Mapping[str, Any] | None = None,
                        fold_notes_like: str | None = None) -> str:
    """Rows engine x precision x latency path at one shape (batch and named axes; None, for a model without
    latency cases, matches none); cell-level figures (layers, parameters, size, accuracy, parity on the model's
    data set) span the cell's path rows. '-': not measured here.

    Columns that would be '-' or one value all along say so in the caption instead: top-1/top-5 where the model
    has no accuracy record, ``bound`` where every case of the model has the same. ``fold_notes_like``: the
    model-wide notes (paths, clocks, GPU columns) of the model's first table; where this table's are the same,
    they fold behind <details> instead of repeating above every table."""
    latency, accuracy, parity, model_latency = _model_records(model, records, shape)
    bounds = {str(r.get("bound")) for r in model_latency}
    one_bound = next(iter(bounds)) if len(bounds) == 1 and "None" not in bounds else None
    cells = _cells(model, records, engines)
    cell_facts = [engines.get(f"{model}-{e}-{p}", {}) for e, p in cells]
    shown = _Shown(bound=any("bound" in r for r in model_latency) and one_bound is None,
                   baseline=bool((gate or {}).get("latency_baseline")),
                   gpu=any(_has_gpu_memory(r) for r in model_latency),
                   peak=any(peak_memory(f) is not None for f in cell_facts),
                   added=any(added_memory(f) is not None for f in cell_facts),
                   census=any("precision_census" in f for f in cell_facts),
                   accuracy=bool(accuracy))
    head = "".join(f'<th class="{"name" if c in ("engine", "precision", "path", "change") else ""}"'
                   + (f' title="{escape(_COLUMN_TITLES[c])}"' if c in _COLUMN_TITLES else "") + f">{c}</th>"
                   for c in shown.columns())
    outcomes = _latency_outcomes(gate)
    body = [row for (engine, precision), facts in zip(cells, cell_facts, strict=True)
            for row in _cell_rows(model, engine, precision, latency.get((engine, precision), []), facts,
                                  accuracy.get((engine, precision), {}), parity.get((engine, precision), {}),
                                  shown, outcomes)]
    title = escape(model) + ("" if shape is None else f", {escape(shape_title(shape))}")
    caption = _caption(model_table_notes(model, records, gate, shape), parity, shown.accuracy, one_bound,
                       fold_notes_like)
    return (f'<table class="suite practitioners" data-model="{escape(model)}"'
            + ("" if shape is None else f' data-batch="{shape[0]}" data-shape="{escape(shape_id(shape))}"')
            + f'><caption>{title}{caption}</caption>'
            f"<thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody></table>")


def _model_records(model: str, records: Sequence[Mapping[str, Any]], shape: Shape | None) -> tuple[
        dict[Cell, list[Mapping[str, Any]]], dict[Cell, Mapping[str, Any]], dict[Cell, Mapping[str, Any]],
        list[Mapping[str, Any]]]:
    """The model's latency cases at ``shape`` by cell, each cell's first accuracy record and first parity record
    on the model's data set (not generated inputs), and all of the model's latency cases."""
    latency: dict[Cell, list[Mapping[str, Any]]] = defaultdict(list)
    accuracy: dict[Cell, Mapping[str, Any]] = {}
    parity: dict[Cell, Mapping[str, Any]] = {}
    model_latency = []
    for r in records:
        if r.get("model") != model:
            continue
        cell = (str(r.get("engine")), str(r.get("precision")))
        if r.get("kind") == "latency":
            model_latency.append(r)
            if shape_of(r) == shape:
                latency[cell].append(r)
        elif r.get("kind") == "accuracy":
            accuracy.setdefault(cell, r)
        elif r.get("kind") == "parity" and not is_generated(r.get("dataset")):
            parity.setdefault(cell, r)
    return latency, accuracy, parity, model_latency


def _cell_rows(model: str, engine: str, precision: str, cases: list[Mapping[str, Any]], facts: Mapping[str, Any],
               acc: Mapping[str, Any], par: Mapping[str, Any], shown: _Shown,
               outcomes: Mapping[str, Mapping[str, Any]]) -> list[str]:
    """One cell's rows, a row per latency path (one of '-' without any): the cell's own figures open and close
    its first row and span the others."""
    rows = sorted(cases, key=lambda r: path_sort_key(str(r.get("path", "all"))))
    pct = (lambda v: None if v is None else 100.0 * float(v))
    reference = engine == "torch" and precision == "fp32" and not par
    span = max(1, len(rows))
    rs = f' rowspan="{span}"' if span > 1 else ""
    layers = fmt(facts.get("layers"))
    if facts.get("layers") is not None and facts.get("layer_kind"):
        layers += f'<span class="unit">{escape(str(facts["layer_kind"]))}</span>'
    lead = (f'<td class="name"{rs}>{escape(engine)}</td><td class="name"{rs}>{escape(precision)}</td>'
            f"<td{rs}>{layers}</td><td{rs}>{fmt(facts.get('parameters'))}</td>"
            f"<td{rs}>{fmt(facts.get('size_mb'))}</td>") + (f"<td{rs}>{fmt(peak_memory(facts))}</td>" * shown.peak) \
        + (f"<td{rs}>{fmt(added_memory(facts))}</td>" * shown.added) \
        + (census_cell(facts, rs) if shown.census else "")
    tail = "".join(f"<td{rs}>{v}</td>" for v in (
        *[fmt(pct(acc.get("top1"))), fmt(pct(acc.get("top5")))] * shown.accuracy,
        "reference" if reference else fmt(par.get("isclose_pct")),
        "reference" if reference else fmt(par.get("mae"))))
    body = []
    for i, r in enumerate(rows or [{}]):
        path = str(r.get("path", "all")) if r else None
        cls, tds = "", []
        if r:
            tds = [f'<td class="name">{escape(str(path))}</td>'] + [
                f"<td>{fmt(r.get(k))}</td>" for k in ("median_ms", "mean_ms", "p99_ms", "max_ms",
                                                      "throughput_per_s")]
        else:
            tds = ['<td class="name">-</td>'] + ["<td>-</td>"] * 5
        if shown.bound:
            tds.append(f'<td class="name">{fmt(r.get("bound"))}</td>')
        if shown.baseline:
            o = next((outcomes[k] for k in latency_labels(r) if k in outcomes), None) if r else None
            cls, base, change = _baseline_cells(o)
            tds += [f"<td>{base}</td>", f'<td class="name">{change}</td>']
        if shown.gpu:
            tds += gpu_cells(r.get("gpu") or {})
        body.append(f'<tr class="{cls}" data-cell="{escape(model)}-{escape(engine)}-{escape(precision)}"'
                    + (f' data-path="{escape(str(path))}"' if r else "") + ">"
                    + (lead if i == 0 else "") + "".join(tds) + (tail if i == 0 else "") + "</tr>")
    return body


def _caption(model_notes: str, parity: Mapping[Cell, Mapping[str, Any]], with_accuracy: bool,
             one_bound: str | None, fold_notes_like: str | None) -> str:
    """The table's notes: where parity was measured, the columns left out and why; the model-wide notes folded
    behind <details> where they repeat the first table's."""
    parity_source = sorted({str(r.get("dataset")) for r in parity.values()})
    notes = []
    if parity_source:
        notes.append("isclose and MAE against PyTorch fp32 on " + ", ".join(escape(d) for d in parity_source))
    if not with_accuracy:
        notes.append("no top-1/top-5 columns: no accuracy record for this model in this run (no labelled data set, "
                     "or tests/accuracy not selected)")
    if one_bound is not None:
        notes.append(f"bound: {escape(one_bound)} for every case of this model (so no bound column)")
    if fold_notes_like is not None and model_notes == fold_notes_like:
        return (f'<span class="detail">{". ".join(notes)}{"." if notes else ""}</span><details class="notes">'
                f'<summary>latency paths, clocks and column notes: as in the first table</summary>'
                f'<span class="detail">{model_notes}.</span></details>')
    return f'<span class="detail">{". ".join([model_notes, *notes])}.</span>'


def model_table_notes(model: str, records: Sequence[Mapping[str, Any]], gate: Mapping[str, Any] | None,
                      shape: Shape | None) -> str:
    """The notes a model's tables share: what each latency path times and its clock (of the cases at this
    shape), and what the baseline and GPU columns mean where they are shown."""
    rows = [r for r in records if r.get("model") == model and r.get("kind") == "latency"]
    here = [r for r in rows if shape_of(r) == shape]
    notes = [_clock_caption(here) if here else "no latency case ran for this model"]
    if (gate or {}).get("latency_baseline"):
        notes.append("change: current / baseline median - 1 and the gate's verdict")
    if any(_has_gpu_memory(r) for r in rows):
        notes.append(GPU_NOTE)
    return ". ".join(notes)


GPU_NOTE = ("GPU memory added: NVML's device-wide memory in use, its peak during the case minus its first sample; "
            "below it, the memory already in use when the case started, which includes every engine loaded earlier "
            "in this process (they stay loaded, so it grows in run order) and other processes. Mean GPU util: '-' "
            f"where fewer than {MIN_UTIL_SAMPLES} NVML samples fell within the case (samples are 20 ms apart)")


def _mib(value: float) -> str:
    return f"{value:,.0f}"


def gpu_cells(gpu: Mapping[str, Any]) -> list[str]:
    """(memory added, mean utilization) cells of one latency case's ``gpu`` block: NVML's ``peak_memory_mib``,
    ``mean_sm_util_pct``, ``samples`` and ``timeline`` {t_s, memory_mib, sm_util_pct}. The device-wide peak of a
    case grows with every engine loaded before it (ONNX Runtime fp16 at batch 1 showed 29 GB on an H100): the
    figure that belongs to the case is what it added over its start."""
    timeline = gpu.get("timeline") or {}
    memory = [float(v) for v in timeline.get("memory_mib") or [] if v is not None and math.isfinite(float(v))]
    peak = gpu.get("peak_memory_mib")
    if memory:
        top = max(memory + ([float(peak)] if peak is not None and math.isfinite(float(peak)) else []))
        added = (f'<td title="peak {_mib(top)} MiB, device-wide">+{_mib(top - memory[0])}'
                 f'<span class="unit">{_mib(memory[0])} in use at start</span></td>')
    elif peak is not None:
        added = f'<td>-<span class="unit">peak {fmt(peak)}, device-wide</span></td>'
    else:
        added = "<td>-</td>"
    util = gpu.get("mean_sm_util_pct")
    samples = gpu.get("samples")
    if samples is None:
        samples = len(timeline.get("t_s") or []) or None
    if util is None:
        util_cell = "<td>-</td>"
    elif samples is not None and int(samples) < MIN_UTIL_SAMPLES:
        util_cell = (f'<td title="mean of {int(samples)} sample(s): {fmt(util)}%">-'
                     f'<span class="unit">{int(samples)} sample{"s" if int(samples) != 1 else ""}</span></td>')
    else:
        util_cell = f"<td>{fmt(util)}</td>"
    return [added, util_cell]


def _baseline_cells(o: Mapping[str, Any] | None) -> tuple[str, str, str]:
    """(row class, baseline median, change) for one case's gate outcome."""
    if o is None:
        return "", "-", "-"
    status = str(o.get("status"))
    if status == "no-baseline" or o.get("baseline_median_ms") is None:
        return "no-baseline", "-", escape(status)
    return (escape(status), fmt(o.get("baseline_median_ms")),
            f"{signed_pct(o.get('change_pct'))} {status_text(o)}")

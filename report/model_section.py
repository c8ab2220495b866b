"""One model's section: its practitioners' tables, the latency figures (report/plots.py), the harness-overhead
table that vouches for them (or why there is none), GPU over time, parity, ranks and rebuild checks. Its own module
because it decides what a model's section holds, and in which order; the tables are built in their own."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from html import escape
from typing import Any

from report.cases import Shape, cell_sort_key, path_sort_key, shape_of, shape_sort_key
from report.format import fmt, signed_pct
from report.parity_tables import parity_tables, rank_table
from report.practitioners_table import model_table_notes, practitioners_table


def model_section(model: str, records: Sequence[Mapping[str, Any]], engines: Mapping[str, Mapping[str, Any]],
                  gate: Mapping[str, Any] | None = None, with_plots: bool = True,
                  environment: Mapping[str, Any] | None = None) -> str:
    """The section of one model, in the order a reader checks its figures: the practitioners' table per latency
    shape, the latency figures, the harness overhead that vouches for them, GPU over time, parity, ranks,
    rebuilds. ``with_plots=False`` leaves the figures out, and matplotlib unimported."""
    shapes = sorted({shape_of(r) for r in records if r.get("model") == model and r.get("kind") == "latency"
                     and "batch_size" in r}, key=shape_sort_key)
    parts = [f'<h2 id="model-{escape(model)}">{escape(model)}</h2>']
    shown: Sequence[Shape | None] = shapes or [None]
    first_notes = None
    for shape in shown:
        parts.append(practitioners_table(model, records, engines, shape, gate, first_notes))
        first_notes = first_notes or model_table_notes(model, records, gate, shape)
    figures: dict[str, list[tuple[str, str, str]]] = {"latency": [], "gpu": []}
    if with_plots:
        from report import plots  # matplotlib only when a report is rendered, not at every pytest start

        for plot in plots.model_plots(records, model):
            figures["gpu" if plot.kind == "gpu" else "latency"].append(
                (plots.to_data_uri(plot.figure), plot.caption, plot.alt))
    parts.extend(figure_html(*f) for f in figures["latency"])
    parts.append(overhead_table(model, records) or overhead_missing(model, records, environment))
    parts.extend(figure_html(*f) for f in figures["gpu"])
    parts.append(parity_tables(model, records))
    parts.append(rank_table(model, records))
    parts.append(rebuild_table(model, records))
    return "\n".join(p for p in parts if p)


def figure_html(uri: str, caption: str, alt: str) -> str:
    """A figure as an embedded image (a data: URI, so the report stays one file) with its caption."""
    return (f'<figure class="plot"><img class="plot" alt="{escape(alt)}" src="{uri}"/>'
            f"<figcaption>{escape(caption)}</figcaption></figure>")


def overhead_table(model: str, records: Sequence[Mapping[str, Any]]) -> str:
    """``harness_overhead`` records (tests/latency/test_harness_overhead.py): the suite's timed call against
    a bare loop around the same forward, both in every round, order alternating."""
    rows = sorted((r for r in records if r.get("kind") == "harness_overhead"
                   and (r.get("model") or str(r.get("cell", "")).split("-")[0]) == model),
                  key=lambda r: (cell_sort_key(str(r.get("engine")), str(r.get("precision"))),
                                 path_sort_key(str(r.get("path", "model"))), int(r.get("batch_size", 0))))
    if not rows:
        return ""
    body = []
    for r in rows:
        overhead, limit = r.get("overhead_pct"), r.get("limit_pct")
        paired = r.get("overhead_low_pct") is not None
        over = overhead is not None and limit is not None and float(overhead) > float(limit)
        verdict = "-" if overhead is None or limit is None else ("over the limit" if over else "within")
        interval = (f"{float(r['overhead_low_pct']):+.2f} .. {float(r['overhead_high_pct']):+.2f}%" if paired else "-")
        ratio = r.get("ratio_of_medians_pct", None if paired else overhead)
        body.append(f'<tr class="{"over-limit" if over else ""}" data-cell="{escape(str(r.get("cell")))}">'
                    f'<td class="name">{escape(str(r.get("cell")))}</td>'
                    f'<td class="name">{escape(str(r.get("path", "model")))}</td><td>{fmt(r.get("batch_size"))}</td>'
                    f"<td>{fmt(r.get('suite_median_ms'), 4)}</td><td>{fmt(r.get('bare_median_ms'), 4)}</td>"
                    f"<td>{signed_pct(overhead) if paired else '-'}</td><td>{interval}</td><td>{signed_pct(ratio)}</td>"
                    f"<td>{signed_pct(r.get('host_overhead_pct'))}</td>"
                    f"<td>{'-' if limit is None else f'{float(limit):.0f}%'}</td><td>{fmt(r.get('rounds'))}</td>"
                    f'<td class="name">{verdict}</td></tr>')
    clocks = sorted({str(r.get("clock")) for r in rows if r.get("clock")})
    return ('<table class="suite overhead" data-model="' + escape(model) + '"><caption>Harness overhead: what the '
            "latency figures above include beyond the engine's own call<span class=\"detail\">The suite's timed call "
            "and a bare call of the same forward run in every round, in alternating order "
            "(tests/latency/test_harness_overhead.py). Overhead: median over rounds of suite/bare - 1, with its 95% "
            "interval (the gated figure); ratio of medians: the two runs' medians; host overhead: the suite call's "
            "host time over the bare median - 1 (the Python around each forward). Clock: "
            + escape(" | ".join(clocks) or "not recorded") + ".</span></caption>"
            '<thead><tr><th class="name">cell</th><th class="name">path</th><th>batch</th>'
            "<th>suite median (ms)</th><th>bare median (ms)</th><th>overhead (median round)</th>"
            "<th>95% interval</th><th>ratio of medians</th><th>host overhead</th><th>limit</th><th>rounds</th>"
            f'<th class="name">verdict</th></tr></thead><tbody>{"".join(body)}</tbody></table>')


def overhead_missing(model: str, records: Sequence[Mapping[str, Any]],
                     environment: Mapping[str, Any] | None = None) -> str:
    """One line where a model's latency was timed and its harness overhead was not: a reader of a GPU run must
    know the latency figures were not vouched for, rather than miss a table that is not there. Called only where
    overhead_table found no harness_overhead record of the model."""
    if not any(r.get("model") == model and r.get("kind") == "latency" for r in records):
        return ""
    others = sorted({str(r.get("model")) for r in records if r.get("kind") == "harness_overhead"})
    devices = {str(r.get("device")) for r in records if r.get("model") == model and r.get("device")}
    devices.add(str((environment or {}).get("device") or ""))
    if others:
        why = f"it was measured for {', '.join(others)} only (--overhead-model picks one model)"
    elif any(d.startswith("cuda") for d in devices):
        why = "tests/latency/test_harness_overhead.py was not selected"
    elif "cpu" in devices:
        why = "tests/latency/test_harness_overhead.py runs on CUDA only; this run used the CPU"
    else:
        why = "tests/latency/test_harness_overhead.py was not selected / runs on CUDA only"
    return (f'<p class="note overhead-missing" data-model="{escape(model)}"><b>Harness overhead:</b> not measured '
            f"in this run ({escape(why)}), so nothing here says how much of the latency above is the suite's own "
            "timing code.</p>")


def rebuild_table(model: str, records: Sequence[Mapping[str, Any]]) -> str:
    """--rebuild-check N: per engine, whether N builds from scratch gave the same artifact and the same outputs,
    and each build's size and layers (what practitioners compared by hand between TensorRT builds)."""
    rows = [r for r in records if r.get("model") == model and r.get("kind") == "rebuild"]
    if not rows:
        return ""
    body = []
    for r in sorted(rows, key=lambda r: cell_sort_key(str(r.get("engine")), str(r.get("precision")))):
        identical = {True: "byte-identical", False: "differ", None: "no artifact"}[r.get("identical_artifacts")]
        outputs = ("bitwise identical" if r.get("identical_outputs")
                   else f"differ (largest {fmt(r.get('max_abs_difference'))})")
        builds = "; ".join(f"{fmt(b.get('size_mb'))} MB, {b.get('layers', '-')} layers"
                           for b in r.get("per_build") or [])
        cls = "" if r.get("identical_outputs") else ' class="inconclusive"'
        body.append(f'<tr{cls}><td class="name">{escape(str(r.get("engine")))}</td>'
                    f'<td class="name">{escape(str(r.get("precision")))}</td><td>{r.get("builds")}</td>'
                    f'<td class="name">{identical}</td><td class="name">{escape(outputs)}</td>'
                    f'<td class="name">{escape(builds)}</td></tr>')
    return (f'<table class="suite rebuild" data-model="{escape(model)}"><caption>{escape(model)}: each engine '
            "built from scratch several times (--rebuild-check)</caption><thead><tr><th class=\"name\">engine</th>"
            '<th class="name">precision</th><th>builds</th><th class="name">artifacts</th>'
            '<th class="name">outputs on the parity data</th><th class="name">each build</th></tr></thead>'
            f"<tbody>{''.join(body)}</tbody></table>")

"""HTML fragments of the suite's report: pure functions from the run's plain data to markup.

Inputs are what the run already writes (the --suite-results shape plus the gate's results), so the
same functions render a live session's report and a saved one, and the tests can feed them by hand.

Per model: the table practitioners publish (rows engine x precision; latency-all mean/max,
latency-model mean/max, throughput, size, top-1, top-5, isclose %, MAE), the top-10 rank
MAE/disagreement table and the plots. Then "changed since baseline" and the environment, with a
baseline from another environment flagged in red at the top.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from html import escape
from typing import Any

STYLE = """
<style>
.suite-report { flex: 1 1 100%; max-width: 1400px; font-size: 13px; color: #222; }
.suite-report h2, .suite-report h3 { color: #111; }
.suite-report table.suite caption { text-align: left; font-weight: bold; white-space: nowrap; padding: 2px 0; }
.suite-report h2 { margin-top: 28px; border-bottom: 1px solid #ccc; }
.suite-report h3 { margin: 18px 0 6px; }
.suite-report table.suite { border-collapse: collapse; margin: 6px 0 12px; }
.suite-report table.suite th, .suite-report table.suite td {
  border: 1px solid #ccc; padding: 3px 8px; text-align: right; }
.suite-report table.suite th { background: #f0f0f0; color: #111; }
.suite-report table.suite td.name, .suite-report table.suite th.name { text-align: left; }
.suite-report .warning { border: 3px solid #c00; background: #fee; padding: 8px 12px; margin: 10px 0; }
.suite-report .warning h3 { color: #c00; margin-top: 0; }
.suite-report .knob { border: 2px solid #c80; background: #ffe; padding: 6px 12px; }
.suite-report tr.regression td, .suite-report tr.drift td { background: #fdd; }
.suite-report tr.improvement td { background: #dfd; }
.suite-report tr.busy td, .suite-report tr.inconclusive td { background: #ffd; }
.suite-report img.plot { max-width: 100%; margin: 4px 12px 4px 0; border: 1px solid #ddd; }
.suite-report .note { color: #555; }
</style>
"""

ENGINE_ORDER = ("torch", "onnxruntime", "inductor", "tensorrt")
PRECISION_ORDER = ("fp32", "tf32", "fp16", "bf16", "int8")


def cell_sort_key(engine: str, precision: str) -> tuple[int, str, int, str]:
    """Reference first, then engines and precisions in the order practitioners list them."""
    e = ENGINE_ORDER.index(engine) if engine in ENGINE_ORDER else len(ENGINE_ORDER)
    p = PRECISION_ORDER.index(precision) if precision in PRECISION_ORDER else len(PRECISION_ORDER)
    return e, engine, p, precision


PRACTITIONER_COLUMNS = ("engine", "precision", "latency-all mean (ms)", "latency-all max (ms)",
                        "latency-model mean (ms)", "latency-model max (ms)", "throughput (items/s)", "size (MB)",
                        "top-1 (%)", "top-5 (%)", "isclose (%)", "MAE")


def render_report(records: Sequence[Mapping[str, Any]], engines: Mapping[str, Mapping[str, Any]],
                  environment: Mapping[str, Any], gate: Mapping[str, Any] | None = None,
                  with_plots: bool = True) -> str:
    """The whole suite section: warnings, per-model tables and plots, changes, environment."""
    parts = [STYLE, '<div class="suite-report">']
    parts.append(environment_warning(gate))
    parts.append(knob_warning(gate))
    for model in models_of(records, engines):
        parts.append(model_section(model, records, engines, with_plots))
    parts.append(changes_section(gate))
    parts.append(environment_section(environment, gate))
    parts.append("</div>")
    return "\n".join(p for p in parts if p)


def models_of(records: Iterable[Mapping[str, Any]], engines: Mapping[str, Any]) -> list[str]:
    seen = {str(r["model"]) for r in records if r.get("model")}
    seen |= {cell.split("-")[0] for cell in engines}
    return sorted(seen)


# =========================================================================== per model


def _fmt(value: Any, digits: int = 3) -> str:
    if value is None:
        return "-"
    if isinstance(value, str):
        return escape(value)
    v = float(value)
    if not math.isfinite(v):
        return "-"
    if v == 0.0:
        return "0"
    if abs(v) < 1.0:
        return f"{v:.{digits}g}"
    # `digits`+1 significant digits at least, never scientific notation, thousands separated.
    decimals = max(0, digits - int(math.floor(math.log10(abs(v)))))
    return f"{v:,.{decimals}f}"


def _cells(model: str, records: Iterable[Mapping[str, Any]], engines: Mapping[str, Any]) -> list[tuple[str, str]]:
    cells = {(str(r["engine"]), str(r["precision"])) for r in records if r.get("model") == model and "engine" in r}
    for cell_id in engines:
        model_name, _, rest = cell_id.partition("-")
        if model_name == model and "-" in rest:
            engine, _, precision = rest.rpartition("-")
            cells.add((engine, precision))
    return sorted(cells, key=lambda c: cell_sort_key(*c))


def practitioners_table(model: str, records: Sequence[Mapping[str, Any]], engines: Mapping[str, Mapping[str, Any]],
                        batch: int | None) -> str:
    """Rows engine x precision; '-' where a figure was not measured in this run."""
    latency: dict[tuple[str, str, str], Mapping[str, Any]] = {}
    accuracy: dict[tuple[str, str], Mapping[str, Any]] = {}
    parity: dict[tuple[str, str], Mapping[str, Any]] = {}
    for r in records:
        if r.get("model") != model:
            continue
        cell = (str(r.get("engine")), str(r.get("precision")))
        if r.get("kind") == "latency" and batch is not None and int(r.get("batch_size", -1)) == batch:
            latency[(*cell, str(r.get("path", "all")))] = r
        elif r.get("kind") == "accuracy":
            accuracy.setdefault(cell, r)
        elif r.get("kind") == "parity":
            parity.setdefault(cell, r)
    head = "".join(f'<th class="name">{c}</th>' if i < 2 else f"<th>{c}</th>"
                   for i, c in enumerate(PRACTITIONER_COLUMNS))
    rows = []
    for engine, precision in _cells(model, records, engines):
        lat_all = latency.get((engine, precision, "all"), {})
        lat_model = latency.get((engine, precision, "model"), {})
        acc = accuracy.get((engine, precision), {})
        par = parity.get((engine, precision), {})
        facts = engines.get(f"{model}-{engine}-{precision}", {})
        reference = engine == "torch" and precision == "fp32"
        pct = (lambda v: None if v is None else 100.0 * float(v))
        values = [
            lat_all.get("mean_ms"), lat_all.get("max_ms"), lat_model.get("mean_ms"), lat_model.get("max_ms"),
            lat_all.get("throughput_per_s") or lat_model.get("throughput_per_s"), facts.get("size_mb"),
            pct(acc.get("top1")), pct(acc.get("top5")),
            "reference" if reference and not par else par.get("isclose_pct"),
            "reference" if reference and not par else par.get("mae"),
        ]
        tds = "".join(f"<td>{_fmt(v)}</td>" for v in values)
        rows.append(f'<tr data-cell="{escape(model)}-{escape(engine)}-{escape(precision)}">'
                    f'<td class="name">{escape(engine)}</td><td class="name">{escape(precision)}</td>{tds}</tr>')
    caption = f"{escape(model)}" + ("" if batch is None else f", batch {batch}")
    return (f'<table class="suite practitioners" data-model="{escape(model)}"><caption>{caption}</caption>'
            f"<thead><tr>{head}</tr></thead><tbody>{''.join(rows)}</tbody></table>")


def rank_table(model: str, records: Sequence[Mapping[str, Any]]) -> str:
    """Top-10 ranks: MAE at the reference's r-th class and % of rows whose r-th class differs, per cell."""
    per_cell: dict[tuple[str, str], Mapping[str, Any]] = {}
    for r in records:
        if r.get("model") == model and r.get("kind") == "parity" and r.get("ranks"):
            per_cell.setdefault((str(r["engine"]), str(r["precision"])), r)
    if not per_cell:
        return ""
    cells = sorted(per_cell, key=lambda c: cell_sort_key(*c))
    depth = max(len(per_cell[c]["ranks"]) for c in cells)
    head = "<th>rank</th>" + "".join(f"<th>{escape(e)} {escape(p)}<br>MAE / disagree %</th>" for e, p in cells)
    body = []
    for i in range(depth):
        tds = []
        for c in cells:
            ranks = per_cell[c]["ranks"]
            if i < len(ranks):
                tds.append(f"<td>{_fmt(ranks[i].get('mae'))} / {_fmt(ranks[i].get('disagreement_pct'), 2)}</td>")
            else:
                tds.append("<td>-</td>")
        body.append(f"<tr><td>{i + 1}</td>{''.join(tds)}</tr>")
    return (f'<table class="suite ranks" data-model="{escape(model)}"><caption>{escape(model)}: top-{depth} ranks '
            f"against the PyTorch fp32 reference</caption><thead><tr>{head}</tr></thead>"
            f"<tbody>{''.join(body)}</tbody></table>")


def model_section(model: str, records: Sequence[Mapping[str, Any]], engines: Mapping[str, Mapping[str, Any]],
                  with_plots: bool = True) -> str:
    batches = sorted({int(r["batch_size"]) for r in records
                      if r.get("model") == model and r.get("kind") == "latency" and "batch_size" in r})
    parts = [f'<h2 id="model-{escape(model)}">{escape(model)}</h2>']
    shown: Sequence[int | None] = batches or [None]
    for batch in shown:
        parts.append(practitioners_table(model, records, engines, batch))
    parts.append(rank_table(model, records))
    if with_plots:
        from report import plots  # matplotlib only when a report is rendered, not at every pytest start

        for uri in (plots.latency_plot(records, model), plots.throughput_plot(records, model),
                    plots.gpu_timeline_plot(records, model)):
            if uri:
                parts.append(f'<img class="plot" alt="{escape(model)} plot" src="{uri}"/>')
    return "\n".join(p for p in parts if p)


# =========================================================================== baseline


def environment_warning(gate: Mapping[str, Any] | None) -> str:
    diffs = (gate or {}).get("environment_differences") or {}
    if not diffs:
        return ""
    blocks = []
    for which, d in diffs.items():
        rows = "".join(f'<tr><td class="name">{escape(k)}</td><td class="name">{_fmt(str(v[0]))}</td>'
                       f'<td class="name">{_fmt(str(v[1]))}</td></tr>' for k, v in d["keys"].items())
        blocks.append(f"<p>The {escape(which)} baseline <code>{escape(d['source'])}</code> was measured in a "
                      "different environment; its comparisons are shown but may reflect the environment, not the "
                      f'engine.</p><table class="suite env-diff"><thead><tr><th class="name">key</th>'
                      f'<th class="name">baseline</th><th class="name">current</th></tr></thead>'
                      f"<tbody>{rows}</tbody></table>")
    return '<div class="warning"><h3>Baseline from a different environment</h3>' + "".join(blocks) + "</div>"


def knob_warning(gate: Mapping[str, Any] | None) -> str:
    injected = (gate or {}).get("injected") or {}
    items = []
    if injected.get("slowdown"):
        items.append(f"--inject-slowdown {injected['slowdown'] * 100:g}%: every latency round was made slower")
    if injected.get("accuracy_drop"):
        items.append(f"--inject-accuracy-drop {injected['accuracy_drop'] * 100:g}%: engine outputs were altered")
    if not items:
        return ""
    return '<div class="knob"><b>Self-test knobs were on:</b> ' + "; ".join(escape(i) for i in items) + "</div>"


def changes_section(gate: Mapping[str, Any] | None) -> str:
    if not gate or not (gate.get("latency_baseline") or gate.get("accuracy_baseline")):
        return ('<h2 id="changes">Changed since baseline</h2><p class="note">No baseline was given '
                "(--latency-baseline, --accuracy-baseline); see docs/gating.md.</p>")
    parts = ['<h2 id="changes">Changed since baseline</h2>']
    latency = gate.get("latency") or []
    if gate.get("latency_baseline"):
        order = ("regression", "busy", "inconclusive", "improvement")
        shown = sorted((o for o in latency if o.get("status") in order), key=lambda o: order.index(o["status"]))
        counts: dict[str, int] = defaultdict(int)
        for o in latency:
            counts[str(o.get("status"))] += 1
        parts.append(f"<h3>Latency</h3><p>Baseline <code>{escape(str(gate['latency_baseline']))}</code>; a case "
                     f"fails when its median is significantly slower ({gate['confidence'] * 100:g}% CI above 1) and "
                     f"slower by at least {gate['max_slowdown'] * 50:g}% (--latency-regression "
                     f"{gate['max_slowdown'] * 100:g}%). Cases: "
                     + (", ".join(f"{v} {escape(k)}" for k, v in sorted(counts.items())) or "none compared")
                     + ".</p>")
        if shown:
            head = ("<tr><th class='name'>case</th><th>baseline median (ms)</th><th>current median (ms)</th>"
                    "<th>change</th><th>CI of ratio</th><th>others' CPU</th><th class='name'>verdict</th></tr>")
            rows = []
            for o in shown:
                others = "-" if o.get("interference") is None else f"{o['interference'] * 100:.0f}%"
                rows.append(f'<tr class="{escape(o["status"])}"><td class="name">{escape(o["label"])}</td>'
                            f"<td>{_fmt(o.get('baseline_median_ms'), 4)}</td><td>{_fmt(o.get('current_median_ms'), 4)}"
                            f"</td><td>{o.get('change_pct', 0):+.2f}%</td><td>[{o.get('ci_low', 0):.3f}, "
                            f"{o.get('ci_high', 0):.3f}]</td><td>{others}</td>"
                            f'<td class="name">{escape(o["status"])}</td></tr>')
            parts.append(f'<table class="suite latency-changes"><thead>{head}</thead><tbody>{"".join(rows)}'
                         "</tbody></table>")
    drift = gate.get("drift") or []
    if gate.get("accuracy_baseline"):
        moved = [d for d in drift if d.get("failed") or any(
            f.get("baseline") is not None and f.get("current") is not None and f["baseline"] != f["current"]
            for f in d.get("figures", []))]
        parts.append(f"<h3>Accuracy and parity</h3><p>Baseline <code>{escape(str(gate['accuracy_baseline']))}"
                     f"</code>; tolerances {escape(str(gate.get('drift_tolerances')))}. {len(drift)} records compared, "
                     f"{sum(1 for d in drift if d.get('failed'))} drifted beyond tolerance, {len(moved)} moved.</p>")
        if moved:
            rows = []
            for d in moved:
                figures = "; ".join(_figure_text(f) for f in d.get("figures", []))
                cls = "drift" if d.get("failed") else ""
                rows.append(f'<tr class="{cls}"><td class="name">{escape(d["kind"])}</td>'
                            f'<td class="name">{escape(d["label"])}</td><td class="name">{escape(figures)}</td>'
                            f'<td class="name">{"FAILED" if d.get("failed") else "within tolerance"}</td></tr>')
            parts.append('<table class="suite drift-changes"><thead><tr><th class="name">kind</th>'
                         '<th class="name">cell / data / output</th><th class="name">figures</th>'
                         f'<th class="name">verdict</th></tr></thead><tbody>{"".join(rows)}</tbody></table>')
    return "\n".join(parts)


def _figure_text(f: Mapping[str, Any]) -> str:
    def num(v: Any) -> str:
        if v is None:
            return "-"
        if f.get("unit") == "pct":
            return f"{float(v) * 100:.2f}%"
        if f.get("unit") == "pct_points":
            return f"{float(v):.2f}%"
        return f"{float(v):.3g}"

    return f"{f.get('name')} {num(f.get('baseline'))} -> {num(f.get('current'))} (limit {num(f.get('limit'))})"


def environment_section(environment: Mapping[str, Any], gate: Mapping[str, Any] | None) -> str:
    diffs = (gate or {}).get("environment_differences") or {}
    differing = {k for d in diffs.values() for k in d["keys"]}
    rows = "".join(f'<tr class="{"drift" if k in differing else ""}"><td class="name">{escape(str(k))}</td>'
                   f'<td class="name">{escape(str(v))}</td></tr>' for k, v in environment.items())
    return (f'<h2 id="suite-environment">Environment</h2><table class="suite environment"><thead><tr>'
            f'<th class="name">key</th><th class="name">value</th></tr></thead><tbody>{rows}</tbody></table>')

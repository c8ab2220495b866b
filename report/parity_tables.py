"""Parity against the PyTorch fp32 reference: a table per data set, the worst layers where a cell was localized,
the top-k ranks. Its own module because these say whether an engine's outputs agree with the reference, from the
parity records alone, not how fast it is."""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Mapping, Sequence
from html import escape
from typing import Any

from report.cases import cell_sort_key, dataset_text, is_generated
from report.format import fmt


def parity_tables(model: str, records: Sequence[Mapping[str, Any]]) -> str:
    """One table per data set (the model's own first, then generated inputs): rows engine x precision
    (x output where the model has several), the parity figures against the PyTorch fp32 reference."""
    by_dataset: dict[str, list[Mapping[str, Any]]] = defaultdict(list)
    for r in records:
        if r.get("model") == model and r.get("kind") == "parity":
            by_dataset[str(r.get("dataset"))].append(r)
    parts = []
    for dataset in sorted(by_dataset, key=lambda d: (is_generated(d), d)):
        rows = sorted(by_dataset[dataset], key=lambda r: (cell_sort_key(str(r.get("engine")), str(r.get("precision"))),
                                                         str(r.get("name"))))
        outputs = len({str(r.get("name")) for r in rows}) > 1
        head = ('<th class="name">engine</th><th class="name">precision</th>' + ('<th class="name">output</th>'
                if outputs else "") + "<th>isclose (%)</th><th>MAE</th><th>max abs error</th><th>cosine</th>"
                '<th>top-1 agreement (%)</th><th class="name">verdict</th>')
        body, localized = [], []
        for r in rows:
            failures = r.get("failures") or []
            passed = r.get("passed")
            verdict = ("-" if passed is None else "passed" if passed else
                       "FAILED" + (": " + escape("; ".join(map(str, failures))) if failures else ""))
            body.append(f'<tr class="{"drift" if passed is False else ""}" data-cell="{escape(str(r.get("cell")))}">'
                        f'<td class="name">{escape(str(r.get("engine")))}</td>'
                        f'<td class="name">{escape(str(r.get("precision")))}</td>'
                        + (f'<td class="name">{escape(str(r.get("name")))}</td>' if outputs else "")
                        + f"<td>{fmt(r.get('isclose_pct'))}</td><td>{fmt(r.get('mae'))}</td>"
                        f"<td>{fmt(r.get('max_abs_error'))}</td><td>{_cosine(r.get('cosine'))}</td>"
                        f"<td>{fmt(r.get('top1_agreement_pct'))}</td><td class=\"name\">{verdict}</td></tr>")
            if r.get("localization"):
                localized.append(localization_table(r))
        n = next((r.get("shape", [None])[0] for r in rows if r.get("shape")), None)
        size = f", {n} row{'s' if n != 1 else ''}" if n else ""
        # what the columns mean, under the model's first parity table only (it was repeated under each)
        detail = ("isclose: % of output elements within the precision's rtol/atol; MAE and max abs error over all "
                  "elements; cosine of the flattened outputs; top-1 agreement: % of rows whose arg-max matches the "
                  "reference's." if not parts else "Columns as in the first parity table above.")
        parts.append(f'<table class="suite parity" data-model="{escape(model)}" data-dataset="{escape(dataset)}">'
                     f"<caption>{escape(model)}: parity against PyTorch fp32 on {escape(dataset_text(dataset))}{size}"
                     f'<span class="detail">{escape(detail)}</span></caption>'
                     f"<thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody></table>")
        parts.extend(localized)
    return "\n".join(parts)


def _cosine(value: Any) -> str:
    if value is None:
        return "-"
    v = float(value)
    return f"{v:.6f}" if math.isfinite(v) else "-"


def localization_table(record: Mapping[str, Any]) -> str:
    """A parity record's ``localization``: its worst layers (name, op, max abs error, cosine, isclose %), and where
    no layer failed, the layer whose error rises most over its inputs' (metrics/localize.py ``error_rise``)."""
    loc = record.get("localization")
    rows = ((loc.get("worst") or loc.get("layers") or loc.get("rows") or []) if isinstance(loc, Mapping)
            else (loc or []))
    first = loc.get("first_divergent") if isinstance(loc, Mapping) else None
    first_index = first.get("index") if isinstance(first, Mapping) else None

    def label(x: Mapping[str, Any]) -> str:
        scope = x.get("scope")
        return f"{x.get('name', '-')}" + (f" [{scope}]" if scope and scope != x.get("name") else "") + (
            " (first divergent)" if first_index is not None and x.get("index") == first_index else "")

    body = "".join(f'<tr><td class="name">{escape(label(x))}</td>'
                   f'<td class="name">{escape(str(x.get("op_type", x.get("op", "-"))))}</td>'
                   f"<td>{fmt(x.get('max_abs_error'))}</td>"
                   f"<td>{_cosine(x.get('cosine'))}</td><td>{fmt(x.get('isclose_pct'))}</td></tr>"
                   for x in rows if isinstance(x, Mapping))
    if not body:
        return ""
    notes = []
    if isinstance(loc, Mapping):
        born = next((x for x in loc.get("born") or [] if isinstance(x, Mapping)), None)
        if born is not None and first_index is None:  # no failing layer: where the drift starts instead
            notes.append(f"error rises most at: {label(born)} ({born.get('op_type', '-')}): relative error "
                         f"{fmt(born.get('rel_error'))}, {fmt(born.get('rise'))}x its inputs'")
        verdict = loc.get("census_verdict") or {}
        if verdict.get("text"):
            notes.append(("" if verdict.get("ok") else "WARNING: ") + str(verdict["text"]))
        if loc.get("note"):
            notes.append(str(loc["note"]))
        bisect = loc.get("bisect") or {}
        if bisect.get("conclusion"):
            notes.append(f"optimization bisect: {bisect['conclusion']}")
        if bisect.get("settings_conclusion"):
            providers = bisect.get("providers") or ["the provider"]
            notes.append(f"{providers[0]} settings at {bisect.get('cell_level')}, one at a time: "
                         f"{bisect['settings_conclusion']}")
    note = "".join(f'<p class="note">{escape(n)}</p>' for n in notes)
    return note + (f'<table class="suite localization" data-cell="{escape(str(record.get("cell")))}"><caption>'
            f"{escape(str(record.get('cell')))}, output {escape(str(record.get('name')))} on "
            f"{escape(dataset_text(record.get('dataset')))}: worst layers against the reference's</caption>"
            '<thead><tr><th class="name">layer</th><th class="name">op</th><th>max abs error</th><th>cosine</th>'
            f"<th>isclose (%)</th></tr></thead><tbody>{body}</tbody></table>")


def rank_table(model: str, records: Sequence[Mapping[str, Any]]) -> str:
    """Top-10 ranks: MAE at the reference's r-th class and % of rows whose r-th class differs, per cell."""
    per_cell: dict[tuple[str, str], Mapping[str, Any]] = {}
    for r in sorted((r for r in records if r.get("model") == model and r.get("kind") == "parity" and r.get("ranks")),
                    key=lambda r: is_generated(r.get("dataset"))):
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
                tds.append(f"<td>{fmt(ranks[i].get('mae'))} / {fmt(ranks[i].get('disagreement_pct'), 2)}</td>")
            else:
                tds.append("<td>-</td>")
        body.append(f"<tr><td>{i + 1}</td>{''.join(tds)}</tr>")
    sources = sorted({dataset_text(per_cell[c].get("dataset")) for c in cells})
    return (f'<table class="suite ranks" data-model="{escape(model)}"><caption>{escape(model)}: top-{depth} ranks '
            f"against the PyTorch fp32 reference<span class=\"detail\">On {escape(', '.join(sources))}. Rank r: MAE "
            "of the output at the reference's r-th class / % of rows whose r-th class differs from the "
            "reference's.</span></caption>"
            f"<thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody></table>")

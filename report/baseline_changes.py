"""Changed since baseline (the latency gate's cases that moved, the accuracy/parity records that drifted), and the
warnings that qualify every comparison: a baseline from another environment, self-test knobs that were on. Its
own module because these read the gate's results (suite/gate/) and nothing else."""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Mapping
from html import escape
from typing import Any

from metrics.regression import detection_power
from report.format import fmt, ratio_interval, signed_pct, status_text


def environment_warning(gate: Mapping[str, Any] | None) -> str:
    diffs = (gate or {}).get("environment_differences") or {}
    if not diffs:
        return ""
    blocks = []
    for which, d in diffs.items():
        rows = "".join(f'<tr><td class="name">{escape(k)}</td><td class="name">{fmt(str(v[0]))}</td>'
                       f'<td class="name">{fmt(str(v[1]))}</td></tr>' for k, v in d["keys"].items())
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


def _other_hosts(gate: Mapping[str, Any]) -> str:
    """The compared cases gated against a baseline another host measured (suite/gate/latency.py other_hosts)."""
    other = gate.get("other_hosts") or {}
    if not other.get("cases"):
        return ""
    return (f' <span class="other-host">{int(other["cases"])} of {int(other["compared"])} compared cases against a '
            f'baseline measured on another host ({escape(", ".join(map(str, other.get("hosts") or [])))}): their '
            "change holds the hosts' difference too.</span>")


def changes_section(gate: Mapping[str, Any] | None) -> str:
    if not gate or not (gate.get("latency_baseline") or gate.get("accuracy_baseline")):
        return ('<h2 id="changes">Changed since baseline</h2><p class="note">No baseline was given '
                "(--latency-baseline, --accuracy-baseline); see docs/gating.md.</p>")
    parts = ['<h2 id="changes">Changed since baseline</h2>']
    latency = gate.get("latency") or []
    if gate.get("latency_baseline"):
        order = ("regression", "slower-clock", "busy", "inconclusive", "improvement")
        shown = sorted((o for o in latency if o.get("status") in order), key=lambda o: order.index(o["status"]))
        counts: dict[str, int] = defaultdict(int)
        for o in latency:
            counts[str(o.get("status"))] += 1
        parts.append(f"<h3>Latency</h3><p>Baseline <code>{escape(str(gate['latency_baseline']))}</code>; a case "
                     f"fails when its median is significantly slower ({gate['confidence'] * 100:g}% CI above 1) and "
                     f"slower by at least {gate['max_slowdown'] * 50:g}% (--latency-regression "
                     f"{gate['max_slowdown'] * 100:g}%). Cases: "
                     + (", ".join(f"{v} {escape(k)}" for k, v in sorted(counts.items())) or "none compared")
                     + ". " + _power(latency) + _other_hosts(gate) + "</p>")
        if shown:
            head = ("<tr><th class='name'>case</th><th>baseline median (ms)</th><th>current median (ms)</th>"
                    "<th>change</th><th>CI of ratio</th><th title=\"share of the CPUs other processes used while the "
                    "case was timed, in this run / when the baseline was saved; above --latency-busy-limit the case "
                    f"is busy ({_share(gate.get('busy_limit'))})\">others' CPU now / baseline</th>"
                    "<th title=\"the smallest slowdown this comparison could have caught at this run's noise\">"
                    "could see</th><th class='name'>verdict</th></tr>")
            rows = []
            for o in shown:
                rows.append(f'<tr class="{escape(o["status"])}"><td class="name">{escape(o["label"])}</td>'
                            f"<td>{fmt(o.get('baseline_median_ms'), 4)}</td><td>{fmt(o.get('current_median_ms'), 4)}"
                            f"</td><td>{signed_pct(o.get('change_pct'))}</td><td>{ratio_interval(o)}</td>"
                            f'<td>{_others(o)}</td><td>{_could_see(o)}</td><td class="name">{status_text(o)}'
                            + (f'<br><small>{escape(str(o["clocks"]))}</small>' if o.get("clocks") else "")
                            + (f'<br><small class="other-host">{escape(str(o["other_host"]))}</small>'
                               if o.get("other_host") else "")
                            + "</td></tr>")
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
                figures += f"; {d['layers']}" if d.get("layers") else ""
                rows.append(f'<tr class="{cls}"><td class="name">{escape(d["kind"])}</td>'
                            f'<td class="name">{escape(d["label"])}</td><td class="name">{escape(figures)}</td>'
                            f'<td class="name">{"FAILED" if d.get("failed") else "within tolerance"}</td></tr>')
            parts.append('<table class="suite drift-changes"><thead><tr><th class="name">kind</th>'
                         '<th class="name">cell / data / output</th><th class="name">figures</th>'
                         f'<th class="name">verdict</th></tr></thead><tbody>{"".join(rows)}</tbody></table>')
    parts.append(structure_section(gate.get("structure")))
    return "\n".join(parts)


def structure_section(structure: Mapping[str, Any] | None) -> str:
    """The engines' structural changes against the accuracy baseline's (metrics/structure.py): a cause a reader can
    act on where timing alone is inconclusive; beside each case that moved, its cell's change or that none was found."""
    if not structure:
        return ""
    changes, moved = structure.get("changes") or {}, structure.get("moved") or {}
    out = [f"<h3>Engine structure</h3><p>{len(changes)} of {structure.get('compared', 0)} cells changed against the "
           "baseline run's engines (compute nodes as run, their precision, the exported graph, execution providers, "
           "layers, parameters, size).</p>"]
    kernels = structure.get("kernels")
    if kernels:
        other = kernels.get("other_kernels") or []
        out.append(f"<p>Kernels (--kernel-profile): {len(other)} of {kernels.get('profiled', 0)} cases profiled in "
                   "both runs launch other kernels than the baseline's"
                   + (": " + escape(", ".join(other)) if other else "") + ".</p>")
    if changes:
        rows = "".join(f'<tr><td class="name">{escape(cell)}</td><td class="name">{escape("; ".join(lines))}</td></tr>'
                       for cell, lines in changes.items())
        out.append('<table class="suite structure-changes"><thead><tr><th class="name">cell</th>'
                   f'<th class="name">what changed</th></tr></thead><tbody>{rows}</tbody></table>')
    if moved:
        rows = "".join(f'<tr><td class="name">{escape(case)}</td><td class="name">{escape(why)}</td></tr>'
                       for case, why in moved.items())
        out.append('<table class="suite structure-moved"><thead><tr><th class="name">case that moved</th>'
                   f'<th class="name">behind it</th></tr></thead><tbody>{rows}</tbody></table>')
    return "".join(out)


def _could_see(o: Mapping[str, Any]) -> str:
    if "ratio" not in o:
        return "-"
    d = o.get("detectable_slowdown_pct")
    return "unbounded" if d is None else f"&ge;{d:.1f}%"


def _power(latency: list[Mapping[str, Any]]) -> str:
    """How many compared cases could have seen a 2 % and a 5 % slowdown (suite/gate/tables.py power_line)."""
    seen = [math.inf if (d := o.get("detectable_slowdown_pct")) is None else d / 100 for o in latency
            if "ratio" in o and o.get("status") not in ("busy", "no-baseline")]
    if not seen:
        return ""
    compared, at2, at5 = detection_power(seen)
    return f"Power: {at2} of {compared} compared cases could see a 2% slowdown, {at5} a 5% one."


def _share(x: Any) -> str:
    return "-" if x is None else f"{float(x) * 100:.0f}%"


def _others(o: Mapping[str, Any]) -> str:
    """Others' CPU share now / when the baseline was saved, as the terminal prints it ('68% / 90%')."""
    if o.get("interference") is None and o.get("baseline_interference") is None:
        return "-"
    return f"{_share(o.get('interference'))} / {_share(o.get('baseline_interference'))}"


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

"""The suite's section of the pytest-html report: ``render_report`` puts the sections together, each a pure
function from the run's plain data to markup, in its own module.

Inputs are what the run already writes (the --suite-results shape plus the gate's results, the
verdict and how the run was made), so the same functions render a live session's report and a saved
one, and the tests can feed them by hand.

Order, for the reader who opens the report after an upgrade (docs/report.md):

0. what differs between the baseline runs' environments and this run's (report/difference_section.py), where the
   run was given a baseline: the likeliest cause of whatever follows;
1. the verdict (report/verdict_section.py): passed / failed / not judged, why (and the error that
   stopped a run), the counts, what was not tested at all, the gates' warnings, the failed checks,
   latency regressions, what was not judged (reasons not accepted open, accepted ones folded and
   grouped), known failures; then a baseline from another environment and self-test knobs that were
   on (report/baseline_changes.py);
2. the run (report/run_section.py): the environment that matters (GPU, driver, CUDA, cuDNN, torch,
   ONNX Runtime, TensorRT), config, engine options, commit, run metadata, the gates' coverage, wall
   time per phase;
3. per model (report/model_section.py): the practitioners' table per latency shape (batch and named
   axes; rows engine x precision x path; report/practitioners_table.py), latency and throughput
   figures (report/plots.py), the harness-overhead table that vouches for them (or why there is
   none), GPU over time, parity per data set (and worst layers where localized), the top-10 rank
   table (report/parity_tables.py);
4. changed since baseline (report/baseline_changes.py), and the full environment fingerprint
   (report/environment_section.py).

Shared by the sections: report/format.py (how a value prints), report/cases.py (how cases are named
and ordered), report/style.py (the CSS).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from html import escape
from typing import Any

from report.baseline_changes import changes_section, environment_warning, knob_warning
from report.difference_section import difference_section
from report.environment_section import environment_section
from report.model_section import model_section
from report.run_section import run_section
from report.shard_section import cells_section, shards_section
from report.style import STYLE
from report.verdict_section import verdict_section

#: What other modules import from here: report/plugin.py renders the report through it, tools/merge.py the merged
#: night's.
__all__ = ["render_merged_report", "render_report"]


def render_report(records: Sequence[Mapping[str, Any]], engines: Mapping[str, Mapping[str, Any]],
                  environment: Mapping[str, Any], gate: Mapping[str, Any] | None = None,
                  verdict: Mapping[str, Any] | None = None, run_info: Mapping[str, Any] | None = None,
                  with_plots: bool = True, difference: Mapping[str, Any] | None = None) -> str:
    """The whole suite section: the difference from the baselines, verdict, the run, per-model tables and figures,
    changes, environment. ``difference``: suite/gate/baseline_environment.py's block (None: no baseline)."""
    parts = [STYLE, '<div class="suite-report">']
    parts.append(difference_section(difference))
    parts.append(verdict_section(verdict, gate, records))
    parts.append(environment_warning(gate))
    parts.append(knob_warning(gate))
    parts.append(run_section(environment, run_info, gate))
    for model in models_of(records, engines):
        parts.append(model_section(model, records, engines, gate, with_plots, environment))
    parts.append(changes_section(gate))
    parts.append(environment_section(environment, gate))
    parts.append("</div>")
    return "\n".join(p for p in parts if p)


def render_merged_report(shards: Sequence[Mapping[str, Any]], cells: Sequence[Mapping[str, Any]],
                         records: Sequence[Mapping[str, Any]], engines: Mapping[str, Mapping[str, Any]],
                         environment: Mapping[str, Any], verdict: Mapping[str, Any], title: str,
                         with_plots: bool = True) -> str:
    """A merged night (suite-merge) as one self-contained HTML file: the shards' environments first, then the verdict,
    every cell's verdict, and the same per-model sections and environment as a run's report. Not a pytest-html file:
    the merge runs no tests, so pytest-html's results table has no rows to show; the verdict's counts are the
    merged verdict's (report/shard_section.py)."""
    parts = ["<!DOCTYPE html>", '<html><head><meta charset="utf-8">', f"<title>{escape(title)}</title></head><body>",
             f"<h1>{escape(title)}</h1>", STYLE, '<div class="suite-report">', shards_section(shards),
             verdict_section(verdict, None, records, results_table=False), cells_section(cells)]
    for model in models_of(records, engines):
        parts.append(model_section(model, records, engines, None, with_plots, environment))
    parts += [environment_section(environment, None), "</div>", "</body></html>"]
    return "\n".join(p for p in parts if p)


def models_of(records: Iterable[Mapping[str, Any]], engines: Mapping[str, Any]) -> list[str]:
    """Every model with a record or an engine built, so a model built but never measured still gets its section."""
    seen = {str(r["model"]) for r in records if r.get("model")}
    seen |= {cell.split("-")[0] for cell in engines}
    return sorted(seen)

"""The report's first section, above the verdict: what differs between the baseline runs' environments and this
run's (suite/gate/baseline_environment.py), one row per key in metrics/environment_diff.py's order. Its own module
because it reads only that block; first because after an upgrade a changed library explains what the verdict says.
"""

from __future__ import annotations

from collections.abc import Mapping
from html import escape
from typing import Any

from metrics.environment_diff import NO_DIFFERENCE, value_text


def difference_section(block: Mapping[str, Any] | None) -> str:
    """The difference from the baselines; nothing where the run was given no baseline."""
    if not block:
        return ""
    sources = "".join(f"<li><code>{escape(str(s))}</code></li>" for s in block.get("baselines") or [])
    diffs = block.get("differences") or []
    rows = "".join(f'<tr data-key="{escape(str(d["key"]))}"><td class="name">{escape(str(d["key"]))}</td>'
                   f'<td class="name">{" | ".join(escape(value_text(d["key"], v)) for v in d["baseline"])}</td>'
                   f'<td class="name">{escape(value_text(d["key"], d["current"]))}</td></tr>' for d in diffs)
    body = (f'<table class="suite env-diff"><thead><tr><th class="name">key</th><th class="name">baseline</th>'
            f'<th class="name">this run</th></tr></thead><tbody>{rows}</tbody></table>' if diffs else "")
    unrecorded = block.get("unrecorded") or []
    if unrecorded:
        body += ('<p class="note">Not compared, no environment recorded: '
                 + "; ".join(f"<code>{escape(str(s))}</code>" for s in unrecorded) + "</p>")
    if not diffs and len(unrecorded) < len(block.get("baselines") or []):
        body += f'<p class="no-difference">{escape(NO_DIFFERENCE[0].upper() + NO_DIFFERENCE[1:])}.</p>'
    return (f'<section id="suite-difference" class="{"differs" if diffs else "same"}"><h2>What differs from the '
            f'baseline</h2><p class="note">The baseline runs this run is compared with; where they recorded '
            f'different values, each is shown, in this order:</p><ul class="baselines">{sources}</ul>{body}</section>')

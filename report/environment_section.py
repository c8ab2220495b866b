"""The report's one environment table, at the end: the whole fingerprint (suite/environment.py), keys that differ
from a baseline's in red. Its own module because it is the reference the run section's few keys are taken from."""

from __future__ import annotations

from collections.abc import Mapping
from html import escape
from typing import Any

from report.format import env_value


def environment_section(environment: Mapping[str, Any], gate: Mapping[str, Any] | None) -> str:
    """The one environment table of the report: the suite's fingerprint (suite/environment.py)."""
    diffs = (gate or {}).get("environment_differences") or {}
    differing = {k for d in diffs.values() for k in d["keys"]}
    rows = "".join(f'<tr class="{"drift" if k in differing else ""}"><td class="name">{escape(str(k))}</td>'
                   f'<td class="name">{escape(env_value(str(k), v))}</td></tr>' for k, v in environment.items())
    return (f'<h2 id="suite-environment">Environment</h2><table class="suite environment"><caption>The run\'s '
            'environment fingerprint (suite/environment.py)<span class="detail">The same dictionary the results '
            "file, pytest-benchmark's machine_info and the baseline comparison use; red: differs from a "
            "baseline's.</span></caption><thead><tr>"
            f'<th class="name">key</th><th class="name">value</th></tr></thead><tbody>{rows}</tbody></table>')

"""A merged night's own sections (suite-merge, tools/merge.py): first, how the shards' environments differ (hosts,
drivers, GPUs, suite commit), since a night spread over hosts is judged once only if they ran alike; then every cell
of the plan with its shard, its host and its verdict. Its own module because only a merge has shards; the rest of the
merged report is report/html.py's sections over the merged records and verdict.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from html import escape
from typing import Any

from metrics.environment_diff import IGNORED, KEY_ORDER
from report.format import duration, env_value

#: The keys every shard row shows, differing or not: where it ran, on what, with which suite.
ALWAYS = ("hostname", "gpu_name", "driver", "worker_count", "suite_commit")

#: A cell's verdict word -> its CSS class (report/style.py's verdict colours).
CELL_CLASS = {"passed": "passed", "failed": "failed", "not judged": "not-judged"}


def differing_keys(environments: Sequence[Mapping[str, Any]]) -> list[str]:
    """The fingerprint keys whose values are not the same on every shard that ran, in the difference's order."""
    keys = set().union(*environments) - IGNORED if environments else set()
    differ = {k for k in keys if len({repr(e.get(k)) for e in environments}) > 1}
    return [k for k in KEY_ORDER if k in differ] + sorted(differ - set(KEY_ORDER))


def shards_section(shards: Sequence[Mapping[str, Any]]) -> str:
    """One row per planned shard (``shard``, ``of``, ``gpu_model``, ``lost``: why it does not count or None, and for
    a shard that ran its ``environment`` with ``suite_commit``, its ``source`` and ``wall_s``): the keys of ALWAYS
    and every key on which the shards that ran differ, those in red."""
    ran = [s for s in shards if s.get("environment") is not None]
    differ = differing_keys([s["environment"] for s in ran])
    keys = list(ALWAYS) + [k for k in differ if k not in ALWAYS]
    head = "".join(f'<th class="name">{escape(k)}</th>' for k in keys)
    rows = []
    for s in shards:
        env = s.get("environment") or {}
        state = f'lost: {escape(str(s["lost"]))}' if s.get("lost") else "merged"
        cells = "".join(f'<td class="name{" drift" if k in differ else ""}">{escape(env_value(k, env.get(k)))}</td>'
                        if s.get("environment") is not None else '<td class="name">-</td>' for k in keys)
        wall = duration(s["wall_s"]) if s.get("wall_s") is not None else "-"
        rows.append(f'<tr class="{"lost" if s.get("lost") else "merged"}" data-shard="{int(s["shard"])}">'
                    f'<td class="name">{int(s["shard"])}/{int(s["of"])}</td>'
                    f'<td class="name">{escape(str(s.get("gpu_model", "-")))}</td>'
                    f'<td class="name">{state}</td><td>{wall}</td>{cells}</tr>')
    said = (f"the shards differ in {', '.join(differ)} (red)" if differ
            else "the shards that ran recorded the same environment, but for what every row shows")
    return ('<section id="suite-shards"><h2>The shards: where the night ran</h2>'
            f'<p class="note">{len(shards)} shard(s) planned, {len(ran)} merged; {escape(said)}. A lost shard\'s '
            "cells are not judged (shard-lost).</p>"
            '<table class="suite shards"><thead><tr><th class="name">shard</th><th class="name">GPU model</th>'
            f'<th class="name">state</th><th>wall</th>{head}</tr></thead><tbody>{"".join(rows)}</tbody></table>'
            "</section>")


def cells_section(cells: Sequence[Mapping[str, Any]]) -> str:
    """Every cell of the plan (``cell``, ``shard``, ``host``, ``verdict``, ``passed``, ``failed``, ``not_judged``:
    {reason: count}), in the plan's order: the merged verdict cell by cell."""
    words = Counter(str(c["verdict"]) for c in cells)
    rows = "".join(
        f'<tr class="{CELL_CLASS.get(str(c["verdict"]), "")}" data-cell="{escape(str(c["cell"]))}">'
        f'<td class="name">{escape(str(c["cell"]))}</td><td>{escape(str(c.get("shard", "-")))}</td>'
        f'<td class="name">{escape(str(c.get("host") or "-"))}</td>'
        f'<td class="name verdict">{escape(str(c["verdict"]))}</td><td>{int(c.get("passed", 0))}</td>'
        f'<td>{int(c.get("failed", 0))}</td><td class="name">'
        + escape(", ".join(f"{r} {n}" for r, n in sorted((c.get("not_judged") or {}).items())) or "-")
        + "</td></tr>" for c in cells)
    return ('<section id="suite-cells"><h2>Every cell\'s verdict</h2>'
            f'<p class="note">{len(cells)} cells: '
            + escape(", ".join(f"{n} {w}" for w, n in sorted(words.items()))) + ". A cell is judged as the night is: "
            "failed with any failed check, not judged with any check not judged for a reason not accepted, else "
            "passed (its accepted not-judged checks listed); not collected with no check (it cannot run on the "
            "shard's device).</p>"
            '<table class="suite cells"><thead><tr><th class="name">cell</th><th>shard</th><th class="name">host</th>'
            '<th class="name">verdict</th><th>passed</th><th>failed</th><th class="name">not judged</th></tr></thead>'
            f"<tbody>{rows}</tbody></table></section>")

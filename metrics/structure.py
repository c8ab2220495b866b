"""What changed in an engine's structure between a baseline run and this one, free of timing noise.

Why: after an upgrade a case that got slower or whose numbers moved needs a cause a reader can act on. Timing
alone is often inconclusive; a fusion that disappeared (FusedConv -> Conv + Relu), compute nodes that moved to
another precision, an execution provider dropped, or an engine twice the size are facts, not estimates. Both runs
record each cell's engine facts (--suite-results ``engines``); this compares them, one readable line per change.
Pure: dicts in, lines out.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

#: A size change below this fraction is a rebuild's noise (metadata, names), not a structural change.
SIZE_TOLERANCE = 0.01


def changed_keys(before: Mapping[str, Any], after: Mapping[str, Any]) -> list[str]:
    """The keys whose counts differ, in the order the line names them (what metrics/attribution.py scores): those
    that appear or disappear first (a fusion lost or gained: Attention 6 -> 0), then by the size of the change, then
    by name. Why not by name alone: a lost Attention fusion was named after its parts ("Add 18 -> 42" first)."""
    changed = [key for key in set(before) | set(after) if before.get(key, 0) != after.get(key, 0)]
    return sorted(changed, key=lambda k: (bool(before.get(k, 0)) and bool(after.get(k, 0)),
                                          -abs(after.get(k, 0) - before.get(k, 0)), k))


def _histogram_change(what: str, before: Mapping[str, Any] | None, after: Mapping[str, Any] | None) -> str | None:
    """'WHAT: Conv 2 -> 0, FusedConv 0 -> 2' over the keys whose counts differ (``changed_keys``); None if none."""
    if before is None or after is None:
        return None
    changed = [f"{key} {before.get(key, 0)} -> {after.get(key, 0)}" for key in changed_keys(before, after)]
    return f"{what}: {', '.join(changed)}" if changed else None


def _census(facts: Mapping[str, Any]) -> Mapping[str, Any]:
    census = facts.get("precision_census")
    return census if isinstance(census, Mapping) else {}


def cell_changes(before: Mapping[str, Any], after: Mapping[str, Any]) -> list[str]:
    """The structural differences of one cell's engine facts (baseline ``before``, this run ``after``)."""
    lines = [
        _histogram_change("compute nodes as run", _census(before).get("ops"), _census(after).get("ops")),
        _histogram_change("precision of compute nodes", _census(before).get("counts"), _census(after).get("counts")),
        _histogram_change("exported graph", before.get("op_histogram"), after.get("op_histogram")),
    ]
    out = [line for line in lines if line]
    if before.get("providers") is not None and after.get("providers") is not None \
            and before["providers"] != after["providers"]:
        out.append(f"execution providers: {', '.join(before['providers'])} -> {', '.join(after['providers'])}")
    for key, what in (("layers", "layers"), ("parameters", "parameters")):
        if before.get(key) is not None and after.get(key) is not None and before[key] != after[key]:
            out.append(f"{what}: {before[key]} -> {after[key]}")
    size_before, size_after = before.get("size_mb"), after.get("size_mb")
    if size_before and size_after is not None and abs(size_after / size_before - 1) > SIZE_TOLERANCE:
        out.append(f"engine size: {size_before:.2f} -> {size_after:.2f} MB ({size_after / size_before - 1:+.1%})")
    return out


def structural_changes(baseline: Mapping[str, Mapping[str, Any]],
                       current: Mapping[str, Mapping[str, Any]]) -> dict[str, list[str]]:
    """Cell id -> its structural changes, for every cell both runs built whose structure differs."""
    changes = {}
    for cell in sorted(set(baseline) & set(current)):
        lines = cell_changes(baseline[cell], current[cell])
        if lines:
            changes[cell] = lines
    return changes


def explain(case_cell: str, changes: Mapping[str, list[str]], compared: bool) -> str:
    """The sentence shown beside a case that moved: its cell's structural changes, or that none was found (only
    where both runs recorded the cell's facts; else that there was nothing to compare)."""
    if not compared:
        return "structure: not compared (the baseline run recorded no engine facts for this cell)"
    found = changes.get(case_cell)
    return "structure: " + ("; ".join(found) if found else "no structural change found (same graph, precision, "
                                                          "providers and size)")

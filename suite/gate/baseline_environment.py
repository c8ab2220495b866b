"""The block that opens the terminal's verdict, the results file and the HTML report of a run given a baseline: what
differs between the baseline runs' environments and this run's (metrics/environment_diff.py), and which runs those
were. Why first: after an engine or driver upgrade, a changed library is the likeliest cause of every change below.

The suite's own commit and config count as environment: the same engine measured by another version of the suite,
or under another config, is not the same measurement.
"""

from __future__ import annotations

import hashlib
import json
import tomllib
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from metrics.environment_diff import (
    CONFIG_PREFIX,
    NO_DIFFERENCE,
    EnvironmentDifference,
    environment_differences,
    value_text,
)


def config_digest(path: Path | str) -> str | None:
    """The config as the difference compares it: its name and the start of its content's SHA-256 (a path differs
    between checkouts; the content is what decides the run)."""
    try:
        digest = hashlib.sha256(Path(path).read_bytes()).hexdigest()[:12]
    except OSError:
        return None
    return f"{Path(path).name} sha256:{digest}"


#: The config's keys as a fingerprint holds them (one mapping); the difference spreads them out, one per key.
CONFIG_KEYS = "suite_config_keys"


def config_keys(path: Path | str) -> dict[str, str] | None:
    """Every leaf of the config, by its dotted TOML path, its value as JSON (issue 46: the difference said only
    ``suite_config sha256:1aeb24a001a2 -> sha256:bf0529a00a3d`` when one engine option of one model was removed)."""
    try:
        data = tomllib.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError):
        return None
    out: dict[str, str] = {}

    def walk(node: Any, prefix: str) -> None:
        if isinstance(node, Mapping) and node:
            for key, value in node.items():
                walk(value, f"{prefix}.{key}" if prefix else str(key))
        else:
            out[prefix] = json.dumps(node, sort_keys=True, default=str)

    walk(data, "")
    return out


def current_fingerprint(environment: Mapping[str, Any], run_info: Mapping[str, Any]) -> dict[str, Any]:
    """This run's side: its fingerprint, with the suite's commit and config (suite/hooks/run_identity.py run_info)."""
    return {**environment, "suite_commit": run_info.get("git_commit"), "suite_config": run_info.get("config_digest"),
            CONFIG_KEYS: run_info.get("config_keys")}


def spread_config_keys(fingerprints: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Each fingerprint with its config's keys spread out as ``config KEY`` entries, so that the difference names
    each key that changed; where a side did not record them (a run saved before they were), none are compared:
    every key would read as changed, and the config's digest still shows that it did."""
    every = all(isinstance(fp.get(CONFIG_KEYS), Mapping) for fp in fingerprints)
    out = []
    for fp in fingerprints:
        keys = fp.get(CONFIG_KEYS)
        spread = {k: v for k, v in fp.items() if k != CONFIG_KEYS}
        if every and isinstance(keys, Mapping):
            spread.update({f"{CONFIG_PREFIX}{k}": v for k, v in keys.items()})
        out.append(spread)
    return out


def difference_block(current: Mapping[str, Any],
                     baselines: Sequence[tuple[str, Mapping[str, Any]]]) -> dict[str, Any] | None:
    """{"baselines": [source], "unrecorded": [source], "differences": [{key, baseline, current}]}, or None where the
    run was given no baseline. A baseline that recorded no fingerprint is listed apart, not compared (every key
    would read as changed)."""
    if not baselines:
        return None
    recorded = [fp for _, fp in baselines if fp]
    current, *recorded = spread_config_keys([current, *recorded])
    return {"baselines": [str(s) for s, _ in baselines], "unrecorded": [str(s) for s, fp in baselines if not fp],
            "differences": [d.as_dict() for d in environment_differences(current, recorded)] if recorded else []}


def block_lines(block: Mapping[str, Any]) -> list[str]:
    """The block as the terminal prints it: a title naming the baselines, then one line per difference."""
    sources = list(block["baselines"])
    lines = [f"environment: baseline ({'; '.join(sources)}) -> this run:"]
    diffs = [EnvironmentDifference(d["key"], tuple(d["baseline"]), d["current"]) for d in block["differences"]]
    width = max((len(d.key) for d in diffs), default=0)
    for d in diffs:
        lines.append(f"  {d.key:<{width}}  {' | '.join(value_text(d.key, v) for v in d.baseline)}  ->  "
                     f"{value_text(d.key, d.current)}")
    if block["unrecorded"]:
        lines.append(f"  not compared, no environment recorded: {'; '.join(block['unrecorded'])}")
    if not diffs and len(block["unrecorded"]) < len(sources):
        lines.append(f"  {NO_DIFFERENCE}")
    return lines

"""suite-plan: one night over many GPU hosts, as data: which models each shard runs (issue 44).

Reads the suite config, the previous nights' seconds per cell (``durations.json``, which the scheduler keeps beside
the engine cache: suite/fleet/scheduling.py save_durations; several nights' files give each cell its median) and a host
inventory, and writes ``plan.json`` (suite/fleet/shard.py: its format and hash). For each GPU model of the inventory,
the whole config is split over its hosts, one shard per host: each model whole on one shard (its module, data, reference
outputs and engine cache are there), models packed longest first onto the shard that ends first, a shard's time being
its models' seconds over its GPUs (one xdist worker each), then moved or swapped while that shortens the slowest
shard. A shard over the night's budget is an error naming it. A cell without seconds (a new one, a first night) is
costed at the median known cell's seconds, and the plan says how many were so estimated.

The inventory (TOML or JSON), one table per GPU model::

    [[gpu]]
    model = "H200"            # as the GPU names itself (torch: "NVIDIA H200"); the shard checks it
    gpus_per_host = 2
    hosts = 3
    label = "h200"            # the runner label of its hosts (default: the model, lower case)
    budget_s = 3600           # the night's budget per shard (optional)
    durations = ["nights/h200/durations.json"]   # optional; relative to the inventory; else --durations

    python tools/plan.py --suite-config suite-gpu.toml --inventory hosts.toml --durations DIR/durations.json \
        --out plan.json
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tomllib
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from suite.config import ConfigError, load_config  # noqa: E402
from suite.fleet.shard import FORMAT, PlanError, check_plan, config_cells, plan_hash  # noqa: E402
from suite.gate.baseline_environment import config_digest  # noqa: E402
from suite.results import write_json_atomic  # noqa: E402

#: Cost of a cell when no night has timed any cell (seconds): only the order among unknowns depends on it.
UNKNOWN_CELL_S = 1.0


class InventoryError(ValueError):
    pass


def read_inventory(path: Path) -> list[dict[str, Any]]:
    """The inventory's GPU models, each {model, gpus_per_host, hosts, label, budget_s, durations}, checked."""
    try:
        text = path.read_text()
        data = json.loads(text) if path.suffix == ".json" else tomllib.loads(text)
    except (OSError, ValueError) as exc:
        raise InventoryError(f"--inventory {path}: cannot read ({exc})") from exc
    groups = data.get("gpu") if isinstance(data, dict) else None
    if not isinstance(groups, list) or not groups:
        raise InventoryError(f"--inventory {path}: expected one or more [[gpu]] tables")
    out = []
    for i, g in enumerate(groups):
        where = f"--inventory {path}: gpu[{i}]"
        if not isinstance(g, dict):
            raise InventoryError(f"{where}: not a table")
        unknown = set(g) - {"model", "gpus_per_host", "hosts", "label", "budget_s", "durations"}
        if unknown:
            raise InventoryError(f"{where}: unknown key(s) {', '.join(sorted(unknown))}")
        if not isinstance(g.get("model"), str) or not g["model"].strip():
            raise InventoryError(f"{where}.model: expected the GPU model's name, e.g. \"H200\"")
        for key in ("gpus_per_host", "hosts"):
            if not isinstance(g.get(key), int) or isinstance(g.get(key), bool) or g[key] < 1:
                raise InventoryError(f"{where}.{key}: expected an integer >= 1, got {g.get(key)!r}")
        budget = g.get("budget_s")
        if budget is not None and (not isinstance(budget, (int, float)) or isinstance(budget, bool) or budget <= 0):
            raise InventoryError(f"{where}.budget_s: expected seconds > 0, got {budget!r}")
        durations = g.get("durations", [])
        if not isinstance(durations, list) or not all(isinstance(d, str) for d in durations):
            raise InventoryError(f"{where}.durations: expected a list of paths")
        out.append({"model": g["model"].strip(), "gpus_per_host": g["gpus_per_host"], "hosts": g["hosts"],
                    "label": str(g.get("label") or g["model"].strip().lower()), "budget_s": budget,
                    "durations": [path.parent / d for d in durations]})
    names = [g["model"] for g in out]
    if len(set(names)) != len(names):
        raise InventoryError(f"--inventory {path}: a GPU model listed twice ({', '.join(names)})")
    return out


def night_seconds(files: Sequence[Path]) -> dict[str, float]:
    """Each unit's seconds over the nights' durations files (suite/fleet/scheduling.py's format): the median of those
    that timed it. A file that cannot be read is an error (load_durations alone would read it as no nights)."""
    seen: dict[str, list[float]] = {}
    for path in files:
        if not Path(path).is_file():
            raise InventoryError(f"durations {path}: no such file")
        for unit, seconds in _durations_file(Path(path)).items():
            seen.setdefault(unit, []).append(seconds)
    return {u: float(statistics.median(v)) for u, v in seen.items()}


def _durations_file(path: Path) -> dict[str, float]:
    try:
        return {str(k): float(v) for k, v in json.loads(path.read_text()).items()}
    except (OSError, ValueError, TypeError, AttributeError) as exc:
        raise InventoryError(f"durations {path}: not a durations file ({exc})") from exc


def model_seconds(cells: Mapping[str, Sequence[str]], seconds: Mapping[str, float]) -> tuple[dict[str, float], int]:
    """Each model's seconds: its cells' and its tests' of no cell (``MODEL``, ``MODEL-harness``); and how many cells
    were estimated. A cell no night timed costs the median timed cell's seconds where some model's cell of its engine
    and precision was timed, else nothing where the nights timed other cells (that engine and precision never run on
    this GPU model: TensorRT on a CPU), else UNKNOWN_CELL_S (no night at all)."""
    known = [seconds[c] for cs in cells.values() for c in cs if c in seconds]
    guess = float(statistics.median(known)) if known else UNKNOWN_CELL_S
    timed_kinds = {kind(m, c) for m, cs in cells.items() for c in cs if c in seconds}
    out, estimated = {}, 0
    for model, cs in cells.items():
        unknown = [c for c in cs if c not in seconds]
        estimated += len(unknown)
        out[model] = (sum(seconds[c] for c in cs if c in seconds) + seconds.get(model, 0.0)
                      + seconds.get(f"{model}-harness", 0.0)
                      + sum(guess for c in unknown if not known or kind(model, c) in timed_kinds))
    return out, estimated


def kind(model: str, cell: str) -> str:
    """A cell's ENGINE-PRECISION (its id less its model's name)."""
    return cell[len(model) + 1:]


def pack(work: Mapping[str, float], bins: int) -> list[list[str]]:
    """Models onto ``bins`` shards: longest first onto the least loaded (ties: the lower shard, the model first in
    ``work``), then single moves and pairwise swaps between the slowest shard and another while the slowest gets
    shorter. Deterministic. Shards left empty are dropped (more hosts than models)."""
    order = sorted(work, key=lambda m: (-work[m], list(work).index(m)))
    shards: list[list[str]] = [[] for _ in range(max(1, bins))]
    load = [0.0] * len(shards)
    for model in order:
        i = min(range(len(shards)), key=lambda j: (load[j], j))
        shards[i].append(model)
        load[i] += work[model]
    for _ in range(len(work) ** 2 + 1):  # each step shortens the slowest shard: finitely many
        if not _improve(shards, load, work):
            break
    return [sorted(s, key=order.index) for s in shards if s]


def _improve(shards: list[list[str]], load: list[float], work: Mapping[str, float]) -> bool:
    slow = max(range(len(shards)), key=lambda j: (load[j], -j))
    best: tuple[float, int, str, str | None] | None = None
    for j in range(len(shards)):
        if j == slow:
            continue
        for a in shards[slow]:
            for b in [None, *shards[j]]:
                delta = work[a] - (work[b] if b is not None else 0.0)
                if delta <= 0:
                    continue
                new_max = max(load[slow] - delta, load[j] + delta)
                if new_max < load[slow] - 1e-9 and (best is None or new_max < best[0]):
                    best = (new_max, j, a, b)
    if best is None:
        return False
    _, j, a, b = best
    shards[slow].remove(a)
    shards[j].append(a)
    load[slow] -= work[a]
    load[j] += work[a]
    if b is not None:
        shards[j].remove(b)
        shards[slow].append(b)
        load[j] -= work[b]
        load[slow] += work[b]
    return True


def make_plan(config_path: Path, inventory: Sequence[Mapping[str, Any]], default_durations: Sequence[Path]) \
        -> dict[str, Any]:
    """The plan document (suite/fleet/shard.py), its hash included. Raises InventoryError for a shard over budget."""
    config = load_config(config_path)
    cells = config_cells(config.models)
    shards: list[dict[str, Any]] = []
    gpu_models: dict[str, Any] = {}
    for group in inventory:
        seconds = night_seconds(group["durations"] or default_durations)
        work, estimated = model_seconds(cells, seconds)
        packed = pack(work, group["hosts"])
        first = len(shards) + 1
        for models in packed:
            wall = sum(work[m] for m in models) / group["gpus_per_host"]
            if group["budget_s"] is not None and wall > group["budget_s"]:
                raise InventoryError(
                    f"{group['model']}: shard {len(shards) + 1} ({', '.join(models)}) needs about {wall:.0f} s, over "
                    f"the night's budget of {group['budget_s']:.0f} s with {group['hosts']} host(s) of "
                    f"{group['gpus_per_host']} GPU(s): add hosts or raise budget_s")
            shards.append({"shard": len(shards) + 1, "gpu_model": group["model"], "label": group["label"],
                           "gpus": group["gpus_per_host"], "models": models,
                           "cells": [c for m in models for c in cells[m]], "seconds": round(wall, 1)})
        walls = [s["seconds"] for s in shards[first - 1:]]
        gpu_models[group["model"]] = {
            "label": group["label"], "gpus_per_host": group["gpus_per_host"], "hosts": group["hosts"],
            "hosts_idle": group["hosts"] - len(packed), "budget_s": group["budget_s"],
            "shards": list(range(first, len(shards) + 1)), "cells_estimated": estimated,
            "cells_timed": sum(len(c) for c in cells.values()) - estimated,
            "slowest_over_mean": round(max(walls) / statistics.mean(walls), 3) if walls and statistics.mean(walls)
            else 1.0}
    doc = {"format": FORMAT, "config": config_digest(config_path), "models": cells, "gpu_models": gpu_models,
           "shards": shards}
    doc["hash"] = plan_hash(doc)
    check_plan(doc, "(made)")
    return doc


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--suite-config", default=str(ROOT / "suite.toml"), help="the suite config the shards run")
    parser.add_argument("--inventory", required=True, help="the hosts: one [[gpu]] table per GPU model (TOML/JSON)")
    parser.add_argument("--durations", action="append", default=[],
                        help="a night's durations.json (the engine cache's, suite/fleet/scheduling.py); repeat for "
                             "several nights; for the GPU models whose inventory names none")
    parser.add_argument("--out", default="plan.json", help="where to write the plan (default plan.json)")
    parser.add_argument("--matrix", metavar="FILE",
                        help="also write the shards as a CI matrix to FILE (JSON: {include: [{shard, of, label}]})")
    args = parser.parse_args(argv)
    try:
        inventory = read_inventory(Path(args.inventory))
        doc = make_plan(Path(args.suite_config), inventory, [Path(p) for p in args.durations])
    except (InventoryError, ConfigError, PlanError) as exc:
        print(f"suite-plan: {exc}", file=sys.stderr)
        return 4
    write_json_atomic(args.out, doc)
    n = len(doc["shards"])
    for s in doc["shards"]:
        print(f"shard {s['shard']}/{n} {s['gpu_model']} x{s['gpus']}: about {s['seconds']:.0f} s: "
              f"{', '.join(s['models'])} ({len(s['cells'])} cells)")
    for name, g in doc["gpu_models"].items():
        print(f"{name}: {len(g['shards'])} shard(s) on {g['hosts']} host(s) ({g['hosts_idle']} idle), slowest shard "
              f"{g['slowest_over_mean']:.2f}x the mean; {g['cells_estimated']} cell(s) without a night's seconds")
    print(f"plan {doc['hash'][:12]} written to {args.out}")
    if args.matrix:
        Path(args.matrix).write_text(json.dumps(
            {"include": [{"shard": s["shard"], "of": n, "label": s["label"]} for s in doc["shards"]]}) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""A night past one host: the plan's data (``plan.json``), what a shard of it runs, and the one line that refuses a
shard whose cells are not the plan's.

Why data: the plan (tools/plan.py writes it) is the same whichever engine runs the shards (a CI matrix, a Kubernetes
Indexed Job, a Slurm array: docs/nightly.md), and the merge (tools/merge.py) holds the shards' results to it. So a
plan names, for each shard, the GPU model it runs on and the models it runs, whole (a model's cells share its
module, data, reference outputs and cache), with each model's cells as the config makes them; its ``hash`` is the
SHA-256 of the rest, so that a shard, the merge and a reader all name the same plan, and an edited plan is refused.

A shard runs exactly its models' tests (``--plan plan.json --shard K/N``: the others are deselected). Fail closed: a
shard whose config, models or cells are not the plan's is a usage error (exit 4), never a smaller night that passes.
Tests of no model (none in the main job) run in shard 1, as one run would run them once. Pytest-free: the plugin is
suite/shard_plugin.py.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from core.hashing import digest

FORMAT = 1

#: ``K/N``: shard K (from 1) of N.
_SHARD = re.compile(r"^\s*(\d+)\s*/\s*(\d+)\s*$")


class PlanError(ValueError):
    """A plan that cannot be read or trusted, or a shard that does not match it: one line, the usage error's."""


def plan_hash(doc: Mapping[str, Any]) -> str:
    """The plan's content hash: SHA-256 of its canonical JSON without the ``hash`` key itself."""
    return digest({k: v for k, v in doc.items() if k != "hash"})


def short(hash_: str) -> str:
    return str(hash_)[:12]


def config_cells(models: Mapping[str, Any]) -> dict[str, list[str]]:
    """Each model's cells (``MODEL-ENGINE-PRECISION``, suite.session.Cell.id), engines then precisions, as the session
    makes them: what a plan places and a shard must find."""
    return {name: [f"{name}-{e}-{p}" for e in m.engines for p in m.precisions] for name, m in models.items()}


@dataclass(frozen=True)
class Shard:
    index: int  # from 1
    gpu_model: str
    gpus: int
    models: tuple[str, ...]
    cells: tuple[str, ...]
    seconds: float  # the plan's estimate of its wall: its models' seconds over its GPUs

    def units(self) -> set[str]:
        """What suite.lifetime.unit_of_nodeid names this shard's tests by: its cells, and its models' tests of no
        cell (``MODEL``, ``MODEL-harness``)."""
        return {*self.cells, *self.models, *(f"{m}-harness" for m in self.models)}


@dataclass(frozen=True)
class Plan:
    doc: dict[str, Any]
    source: str

    @property
    def hash(self) -> str:
        return str(self.doc["hash"])

    @property
    def config(self) -> str:
        return str(self.doc["config"])

    @property
    def models(self) -> dict[str, list[str]]:
        return {str(m): [str(c) for c in cells] for m, cells in self.doc["models"].items()}

    @property
    def shards(self) -> list[Shard]:
        return [Shard(int(s["shard"]), str(s["gpu_model"]), int(s["gpus"]), tuple(s["models"]), tuple(s["cells"]),
                      float(s["seconds"])) for s in self.doc["shards"]]

    def shard(self, index: int) -> Shard:
        return self.shards[index - 1]

    def label(self, index: int) -> str:
        return f"shard {index}/{len(self.doc['shards'])} of plan {short(self.hash)}"


def parse_shard(text: str | None) -> tuple[int, int]:
    """``K/N`` -> (K, N), 1 <= K <= N."""
    match = _SHARD.match(text or "")
    if not match or not 1 <= int(match[1]) <= int(match[2]):
        raise PlanError(f"--shard {text!r}: expected K/N with 1 <= K <= N, e.g. 2/3")
    return int(match[1]), int(match[2])


def load_plan(path: Path | str) -> Plan:
    """A plan file, checked: readable JSON of this format, its hash its content's, every model on exactly one shard
    of each GPU model, every shard's cells its models'."""
    try:
        doc = json.loads(Path(path).read_text())
    except (OSError, ValueError) as exc:
        raise PlanError(f"--plan {path}: cannot read JSON ({exc})") from exc
    return check_plan(doc, str(path))


def check_plan(doc: Any, source: str) -> Plan:
    where = f"--plan {source}"
    if not isinstance(doc, dict) or doc.get("format") != FORMAT:
        raise PlanError(f"{where}: not a plan of format {FORMAT} (written by suite-plan)")
    for key, kind in (("hash", str), ("config", str), ("models", dict), ("shards", list), ("gpu_models", dict)):
        if not isinstance(doc.get(key), kind):
            raise PlanError(f"{where}: '{key}' missing or not a {kind.__name__}")
    if plan_hash(doc) != doc["hash"]:
        raise PlanError(f"{where}: its hash {short(doc['hash'])} is not its content's ({short(plan_hash(doc))}): "
                        "the file was edited after suite-plan wrote it; make a new plan")
    plan = Plan(doc, source)
    try:
        shards = plan.shards
    except (KeyError, TypeError, ValueError) as exc:
        raise PlanError(f"{where}: a shard lacks {exc}") from exc
    models = plan.models
    for i, shard in enumerate(shards, 1):
        if shard.index != i:
            raise PlanError(f"{where}: shard {i} is numbered {shard.index}; shards are numbered 1..N in order")
        unknown = [m for m in shard.models if m not in models]
        if unknown:
            raise PlanError(f"{where}: shard {i} names model(s) {', '.join(unknown)} that the plan's models lack")
        if list(shard.cells) != [c for m in shard.models for c in models[m]]:
            raise PlanError(f"{where}: shard {i}'s cells are not its models' cells")
    for gpu_model in doc["gpu_models"]:
        placed = [m for s in shards if s.gpu_model == gpu_model for m in s.models]
        twice = sorted({m for m in placed if placed.count(m) > 1})
        missing = sorted(set(models) - set(placed))
        if twice or missing:
            raise PlanError(f"{where}: on {gpu_model}, " + (f"model(s) {', '.join(twice)} on more than one shard"
                                                            if twice else f"model(s) {', '.join(missing)} on no shard"))
    return plan


def check_shard(plan: Plan, index: int, of: int, config_digest: str | None, cells: Mapping[str, Sequence[str]],
                gpu_name: str | None = None) -> Shard:
    """The shard this run is, or a PlanError naming what differs: the shard count, the config (its digest,
    suite.gate.baseline_environment.config_digest), the models and each model's cells (``cells``: this run's, after
    --models/--engines/--precisions: a narrowed run is not the shard), and the GPU where the run can tell."""
    label = plan.label(index)
    if of != len(plan.shards):
        raise PlanError(f"--shard {index}/{of}: plan {short(plan.hash)} ({plan.source}) has {len(plan.shards)} "
                        "shards; run each as K/" + str(len(plan.shards)))
    if config_digest != plan.config:
        raise PlanError(f"{label}: made from {plan.config}, this run's config is {config_digest}: make the plan "
                        "from the config the shards run")
    planned = plan.models
    extra, missing = sorted(set(cells) - set(planned)), sorted(set(planned) - set(cells))
    if extra or missing:
        raise PlanError(f"{label}: " + "; ".join(
            [*([f"this run's model(s) {', '.join(extra)} are in no shard of the plan"] if extra else []),
             *([f"the plan's model(s) {', '.join(missing)} are not in this run (--models?)"] if missing else [])]))
    for model, mine in cells.items():
        if list(mine) != planned[model]:
            gone, new = sorted(set(planned[model]) - set(mine)), sorted(set(mine) - set(planned[model]))
            raise PlanError(f"{label}: {model}'s cells differ from the plan's (" + "; ".join(
                [*([f"not in this run: {', '.join(gone)}"] if gone else []),
                 *([f"not in the plan: {', '.join(new)}"] if new else []),
                 *(["in another order"] if not gone and not new else [])]) + "; --engines/--precisions narrow a run)")
    shard = plan.shard(index)
    if gpu_name is not None and not same_gpu_model(shard.gpu_model, gpu_name):
        raise PlanError(f"{label}: planned for {shard.gpu_model}, this host's GPU is {gpu_name}")
    return shard


def same_gpu_model(planned: str, gpu_name: str) -> bool:
    """Whether a GPU's name (torch's: 'NVIDIA H200') is the inventory's GPU model ('H200', 'NVIDIA-H200'): its
    letters and digits end the name, word for word ('H200' is not 'NVIDIA H200 NVL')."""
    want = re.findall(r"[a-z0-9]+", planned.lower())
    words = re.findall(r"[a-z0-9]+", gpu_name.lower())
    return bool(want) and words[len(words) - len(want):] == want


def owner(shard: Shard, model: str | None) -> bool:
    """Whether ``shard`` runs a test of ``model`` (None: a test of no model, which shard 1 runs)."""
    if model is None:
        return shard.index == 1
    return model in shard.models


def stray_units(shard: Shard, units: Iterable[str | None]) -> list[str]:
    """The units of collected tests that are not this shard's (none, where deselection did its work)."""
    mine = shard.units()
    return sorted({u for u in units if u is not None and u not in mine})


def shard_block(plan: Plan, shard: Shard) -> dict[str, Any]:
    """What a shard's --suite-results, benchmark JSON and environment say of the plan and shard."""
    return {"plan_hash": plan.hash, "shard": shard.index, "of": len(plan.shards), "gpu_model": shard.gpu_model,
            "models": list(shard.models), "cells": list(shard.cells)}

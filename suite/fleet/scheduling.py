"""Which worker runs which tests: a cell (model x engine x precision) at a time, a worker keeping to its model,
the costliest first by the previous run's seconds (longest processing time first), so that two GPUs share a night
evenly. The engine cache's per-entry lock (core/cache.py) keeps each build single across workers and hosts."""

from __future__ import annotations

import json
from collections import OrderedDict
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import pytest

from engines.pytorch.backend import layer_shapes
from suite.lifetime import model_of_nodeid, unit_of_nodeid
from suite.options import options_of
from suite.results import write_json_atomic
from suite.state import suite_session

DURATIONS_FILE = "durations.json"


class CostQueue(OrderedDict):  # type: ignore[type-arg]
    """LoadScope's work queue. A worker stays on its model (``prefer``) while that model has cells left: its
    module, data and reference outputs are warm there. When it must change, it takes a model no other worker is on
    (``elsewhere``), so that two workers rarely build the same model's reference twice: first the kin (``kin``) of
    a model it ran (``history``), then one that is no kin of what the other workers ran or run (``others``), then
    any; among those, the one with the most work left (longest first). Only when every model left is another
    worker's does it join one. Within the model, the costliest cell first. (Reordering the collection instead
    would break xdist: workers run tests by their index in their own collection.)

    Why kin: models with layers of the same shapes share a process's kernel caches (cuDNN's runtime-compiled
    kernels and algorithm choices, torch's and Inductor's). On two H200s, efficientnet_lite0's cells took 20 s
    more in a worker that had not run mobilenet_v2 than after it in the one-GPU run (docs/gpu.md)."""

    def __init__(self, cost: Any, model_of: Any = None, kin: Any = None) -> None:
        super().__init__()
        self.cost = cost
        self.model_of = model_of or (lambda scope: None)
        self.kin = kin or (lambda a, b: False)
        self.prefer: str | None = None
        self.elsewhere: frozenset[str | None] = frozenset()  # the models other workers are on
        self.history: frozenset[str | None] = frozenset()  # the models this worker ran
        self.others: frozenset[str | None] = frozenset()  # the models other workers ran or are on

    def popitem(self, last: bool = True) -> Any:
        if last or not self:
            return super().popitem(last)
        order = {s: i for i, s in enumerate(self)}
        left: dict[str | None, float] = {}  # each model's work left, in the order its first cell is queued
        for s in self:
            left[self.model_of(s)] = left.get(self.model_of(s), 0.0) + self.cost(s, self[s])
        model = self.prefer if self.prefer is not None and self.prefer in left else None
        if model is None:  # max keeps the first of equals: ties go to the model queued first
            free = [m for m in left if m not in self.elsewhere]
            mine = [m for m in free if any(self.kin(m, ran) for ran in self.history)]
            clear = [m for m in free if not any(self.kin(m, theirs) for theirs in self.others)]
            model = max(mine or clear or free or list(left), key=left.__getitem__)
        scope = max((s for s in self if self.model_of(s) == model), key=lambda s: (self.cost(s, self[s]), -order[s]))
        return scope, self.pop(scope)


def _scheduler_class() -> Any:
    from xdist.scheduler.loadscope import LoadScopeScheduling

    class CellScheduling(LoadScopeScheduling):  # type: ignore[misc]
        """LoadScope with the cell (model x engine x precision) as the scope: finer than a model, so that two
        GPUs share a night evenly, and whole, so that a cell's engine is loaded once in the one worker that
        runs its tests (the engine cache's per-entry lock keeps each build single across workers). Which cell
        goes where: CostQueue (a worker keeps to its model; a new model is the one with the most work left that
        no other worker is on). Cost is the previous run's seconds for the cell, else its number of tests."""

        def __init__(self, config: pytest.Config, log: Any = None, models: Iterable[str] = (),
                     durations: dict[str, float] | None = None, place: Any = None, kin: Any = None) -> None:
            super().__init__(config, log)
            known = durations or {}
            self.place = place or (lambda nodeid: (None, None))
            self.scope_model: dict[str, str | None] = {}
            self.node_model: dict[Any, str | None] = {}
            self.node_history: dict[Any, set[str | None]] = {}
            self.workqueue = CostQueue(lambda scope, tests: unit_cost(known, scope.removeprefix("unit:"), len(tests)),
                                       self.scope_model.get, kin)

        def _split_scope(self, nodeid: str) -> str:
            unit, model = self.place(nodeid)
            scope = f"unit:{unit}" if unit is not None else str(super()._split_scope(nodeid))
            self.scope_model[scope] = model
            return scope

        def _assign_work_unit(self, node: Any) -> None:
            self.workqueue.prefer = self.node_model.get(node)
            self.workqueue.elsewhere = frozenset(m for n, m in self.node_model.items() if n is not node)
            self.workqueue.history = frozenset(self.node_history.get(node, ()))
            self.workqueue.others = frozenset(m for n, ran in self.node_history.items() if n is not node for m in ran)
            super()._assign_work_unit(node)
            scope = next(reversed(self.assigned_work[node]))  # the unit just assigned
            self.node_model[node] = self.scope_model.get(scope)
            self.node_history.setdefault(node, set()).add(self.node_model[node])

    return CellScheduling


#: Two models are kin when at least this share of the smaller one's layer shapes are the other's too (the tier's:
#: resnet18 and resnet50 0.55, mobilenet_v2 and efficientnet_lite0 0.33, any of them and another 0).
KIN_SHARE = 0.25


def kin_by_layer_shapes(shapes_of: Callable[[str], frozenset[Any]]) -> Callable[[str | None, str | None], bool]:
    """``kin(a, b)`` for CostQueue: the models' layer shapes (``shapes_of``, each model's once) overlap by KIN_SHARE
    of the smaller set. A model whose shapes cannot be had is nobody's kin."""
    known: dict[str, frozenset[Any]] = {}

    def shapes(model: str) -> frozenset[Any]:
        if model not in known:
            try:
                known[model] = frozenset(shapes_of(model))
            except Exception:  # its own tests say what is wrong with it; the schedule only loses a hint
                known[model] = frozenset()
        return known[model]

    def kin(a: str | None, b: str | None) -> bool:
        if a is None or b is None or a == b:
            return False
        sa, sb = shapes(a), shapes(b)
        return bool(sa and sb) and len(sa & sb) >= KIN_SHARE * min(len(sa), len(sb))

    return kin


def model_kinship(config: pytest.Config) -> Callable[[str | None, str | None], bool]:
    """Kinship of this run's models by the shapes of their torch modules' layers (engines.pytorch.layer_shapes); the
    modules are the start-up check's, already made in this process."""
    suite = suite_session(config)
    return kin_by_layer_shapes(lambda model: layer_shapes(suite.build(model).torch_module()))


def unit_cost(durations: dict[str, float], unit: str, tests: int) -> float:
    """What a unit of work costs the schedule: the previous run's seconds for it, else its number of tests."""
    return durations.get(unit, float(tests))


def work_per_model(nodeids: Iterable[str], place: Callable[[str], tuple[str | None, str | None]],
                   durations: dict[str, float]) -> dict[str, float]:
    """Each model's work in these tests (``place``: nodeid -> (unit, model)), as the schedule costs its units, in
    the order the models first appear."""
    tests: dict[tuple[str, str], int] = {}
    for nodeid in nodeids:
        unit, model = place(nodeid)
        if unit is not None and model is not None:
            tests[(unit, model)] = tests.get((unit, model), 0) + 1
    work: dict[str, float] = {}
    for (unit, model), n in tests.items():
        work[model] = work.get(model, 0.0) + unit_cost(durations, unit, n)
    return work


def load_durations(cache_root: Path) -> dict[str, float]:
    try:
        data = json.loads((cache_root / DURATIONS_FILE).read_text())
        return {str(k): float(v) for k, v in data.items()}
    except (OSError, ValueError, TypeError, AttributeError):
        return {}


def save_durations(cache_root: Path, per_unit: dict[str, float]) -> None:
    """Seconds per unit of work (a cell) of this run, for the next run's scheduling (kept with the engine cache)."""
    if not per_unit:
        return
    known = load_durations(cache_root)
    known.update({k: round(v, 2) for k, v in per_unit.items()})
    write_json_atomic(cache_root / DURATIONS_FILE, known)


def work_unit_of(config: pytest.Config) -> Any:
    """``nodeid -> (unit, model)`` for this run's models (suite.lifetime.unit_of_nodeid): the unit is a cell, or
    a model's tests of no cell; (None, None) for a test of no model."""
    models = list(suite_session(config).config.models)
    configured = suite_session(config).config.models.values()
    overhead = options_of(config).overhead_model or next(iter(models), None)
    engines = {e for m in configured for e in m.engines}
    precisions = {p for m in configured for p in m.precisions}
    return lambda nodeid: (unit_of_nodeid(nodeid, models, engines, precisions, overhead),
                           model_of_nodeid(nodeid, models, overhead))

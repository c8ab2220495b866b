"""How long an engine lives: from its cell's first test in a process to its cell's last one there.

Why: a run that kept every engine until it ended held 81 GB on one H100 after four vision models, and the
checks after that failed out of memory (issue 22). So each process runs its tests grouped by model and, within
a model, by cell (the fp32 reference first), and drops a cell's engine once the next test is another cell's;
the model's reference engine goes when the next test is another model's. A run's peak GPU memory is then about
its largest cell's beside its model's reference, not the sum of all. What lives on the host stays: the model's
CPU module, its data and its reference outputs, so that a worker that comes back to a model (suite/fleet/plugin.py
hands out cells, not models) does not make them again.

The order is the same in every process (xdist requires identical collections), and the xdist scheduler hands
out whole cells (suite/fleet/plugin.py), so a cell's tests stay together in the process that runs them. A later test
of a released cell (a plugin that reorders tests after this sort, such as pytest-randomly, can split a cell's
tests) loads it again from the engine cache: never a wrong answer, only a reload.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import pytest

from suite.gpu_memory import MemoryMeter, release_device_memory
from suite.session import Cell, SuiteSession

#: Where a test id names no cell: the harness-overhead check's ids name a batch and a path (its model is the
#: --overhead-model); they run after the model's cells.
HARNESS_TEST = "test_harness_overhead.py::test_harness_overhead["


def cell_of(item: pytest.Item) -> Cell | None:
    """The cell a test exercises, from its parameters (``cell``, ``accuracy_cell``, ``latency_case``)."""
    callspec = getattr(item, "callspec", None)
    if callspec is None:
        return None
    params = callspec.params
    for name in ("cell", "accuracy_cell"):
        if isinstance(params.get(name), Cell):
            return params[name]
    case = params.get("latency_case")
    if isinstance(case, tuple) and case and isinstance(case[0], Cell):
        return case[0]
    return None


def model_of_nodeid(nodeid: str, models: Sequence[str], overhead_model: str | None = None) -> str | None:
    """The configured model a test id exercises (ids start with the model's name: Cell.id), the overhead
    model for the harness-overhead check, None for a test of no model (the self-tests)."""
    if overhead_model is not None and HARNESS_TEST in nodeid.replace("\\", "/"):
        return overhead_model
    param = nodeid.partition("[")[2]
    return next((n for n in sorted(models, key=len, reverse=True) if param == n + "]" or param.startswith(n + "-")),
                None)


def unit_of_nodeid(nodeid: str, models: Sequence[str], engines: Iterable[str], precisions: Iterable[str],
                   overhead_model: str | None = None) -> str | None:
    """The unit of work a test belongs to (suite/fleet/plugin.py hands out whole units): its cell (``MODEL-ENGINE-
    PRECISION``), ``MODEL`` for a test of the model but of no cell, None for a test of no model."""
    model = model_of_nodeid(nodeid, models, overhead_model)
    if model is None:
        return None
    if overhead_model is not None and HARNESS_TEST in nodeid.replace("\\", "/"):
        return f"{model}-harness"
    rest = nodeid.partition("[")[2][len(model) + 1:].rstrip("]")
    engine, _, tail = rest.partition("-")
    precision = tail.partition("-")[0]
    if engine in set(engines) and precision in set(precisions):
        return f"{model}-{engine}-{precision}"
    return model


def run_order(items: list[pytest.Item], session: SuiteSession, overhead_model: str | None) -> None:
    """Sort ``items`` in place: tests of no model first, as collected; then each model in config order, its
    reference cell first, then its other cells in config order (engines, then precisions), then its tests of no
    cell; within a cell, as collected (a latency case's graph replay before its eager path: suite/gate/bound.py)."""
    models = list(session.config.models)
    rank_of_model = {m: i for i, m in enumerate(models)}
    rank_of_cell = {c: i for i, c in enumerate(
        sorted(session.cells(), key=lambda c: (rank_of_model[c.model], not c.is_reference)))}
    position = {id(item): i for i, item in enumerate(items)}

    def key(item: pytest.Item) -> tuple[int, int, int]:
        cell = cell_of(item)
        model = cell.model if cell is not None else model_of_nodeid(item.nodeid, models, overhead_model)
        if model is None or model not in rank_of_model:
            return (-1, 0, position[id(item)])
        return (rank_of_model[model], rank_of_cell.get(cell, len(rank_of_cell)) if cell is not None
                else len(rank_of_cell), position[id(item)])

    items.sort(key=key)


class EngineLifetime:
    """Per process: opens a cell's GPU memory window at its first test, and after each test releases what the
    next test no longer needs (see the module's docstring), recording each cell's peak GPU memory."""

    def __init__(self, session: SuiteSession, models: Sequence[str], overhead_model: str | None) -> None:
        self.session = session
        self.models = list(models)
        self.overhead_model = overhead_model
        self.meter = MemoryMeter(session.device)
        self.releases = 0
        self._reference_figures: dict[str, dict[str, Any]] = {}

    def place(self, item: pytest.Item | None) -> tuple[str | None, Cell | None]:
        if item is None:
            return None, None
        cell = cell_of(item)
        if cell is not None:
            return cell.model, cell
        return model_of_nodeid(item.nodeid, self.models, self.overhead_model), None

    def before(self, item: pytest.Item) -> None:
        _, cell = self.place(item)
        if cell is not None:
            self.meter.begin(cell.id)

    def after(self, item: pytest.Item, nextitem: pytest.Item | None) -> list[dict[str, Any]]:
        """Release what ``nextitem`` does not need; returns the GPU memory records made (one per cell whose
        tests ended here)."""
        model, cell = self.place(item)
        next_model, next_cell = self.place(nextitem)
        made: list[dict[str, Any]] = []
        dropped = False
        if cell is not None and cell != next_cell:
            figures = self.meter.end(cell.id)
            if self.session.device.startswith("cuda"):  # a CPU run has no such figure to record
                made.append(self.session.record("gpu_memory", cell, **figures))
            if cell.is_reference and next_model == model:
                self._reference_figures[model] = figures  # kept: the model's other cells are judged against it
            else:
                dropped |= self.session.release(cell, figures)
        if model is not None and model != next_model:
            reference = self._reference_figures.pop(model, None)
            for alive in [c for c in self.session.loaded_cells() if c.model == model]:
                dropped |= self.session.release(alive, reference if alive.is_reference else None)
        if dropped:
            self.releases += 1
            release_device_memory()
        return made

    def close(self) -> None:
        self.meter.close()

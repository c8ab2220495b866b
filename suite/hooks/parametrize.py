"""Which cases each test runs: its parameters from the session's cells (accuracy, parity, latency), with the stable
ids that baselines name (``MODEL-ENGINE-PRECISION``, Cell.id; a latency case adds its shape and path)."""

from __future__ import annotations

import pytest

from suite import options, verdict
from suite.config import LatencyShape, ModelConfig
from suite.session import Cell
from suite.state import suite_session
from suite.timing import PATHS


def latency_shapes(config: pytest.Config, model: ModelConfig) -> tuple[LatencyShape, ...]:
    """The model's latency shapes; --latency-batch-sizes (checked at start-up: each fits some selected model)
    keeps those with these batch sizes, or for a batch-only model times each size within its profile."""
    chosen = options.options_of(config).latency_batch_sizes
    if chosen is None:
        return model.latency_shapes
    sizes = [int(b) for b in chosen.split(",") if b.strip()]
    if any(s.dims for s in model.latency_shapes):
        return tuple(s for s in model.latency_shapes if s.batch in sizes)
    return tuple(LatencyShape(b) for b in sizes if min(model.batch_sizes) <= b <= max(model.batch_sizes))


def latency_case_id(cell: Cell, shape: LatencyShape, path: str) -> str:
    """Stable names for baselines: "...-bs32" (with named axes "...-bs32-seq128"), and the path off 'all'."""
    return f"{cell.id}-{shape.id}" if path == "all" else f"{cell.id}-{shape.id}-{path}"


def generate_tests(metafunc: pytest.Metafunc) -> None:
    """pytest_generate_tests: ``accuracy_cell``, ``cell`` (with ``distribution``) and ``latency_case``."""
    session = suite_session(metafunc.config)
    if "accuracy_cell" in metafunc.fixturenames:
        cells = session.cells(lambda m: m.accuracy_dataset is not None)
        params = [pytest.param(c, id=c.id) for c in cells]
        params += [pytest.param(None, id=m.name, marks=pytest.mark.skip(reason=verdict.skip_message(
            "no-data", f"{m.name} declares no accuracy_dataset"))) for m in session.config.models.values()
            if m.accuracy_dataset is None]
        metafunc.parametrize("accuracy_cell", params)
    if "cell" in metafunc.fixturenames and "distribution" in metafunc.fixturenames:
        pairs = [(c, d) for c in session.cells() if not c.is_reference
                 for d in session.model(c.model).generated[c.precision]]
        metafunc.parametrize("cell,distribution", pairs, ids=[f"{c.id}-{d}" for c, d in pairs])
    elif "cell" in metafunc.fixturenames:
        cells = [c for c in session.cells() if not c.is_reference]
        metafunc.parametrize("cell", cells, ids=[c.id for c in cells])
    if "latency_case" in metafunc.fixturenames:
        paths = options.split_list(options.options_of(metafunc.config).latency_paths)  # checked at start-up
        if not paths:
            paths = ["all"] if session.device == "cpu" else list(PATHS)
        # Graph replay first: a cell's eager case is classified against its replay (suite/gate/bound.py).
        paths = sorted(paths, key=lambda p: ("graph", "model", "all").index(p))
        cases = [(c, shape, p) for c in session.cells()
                 for shape in latency_shapes(metafunc.config, session.model(c.model)) for p in paths]
        metafunc.parametrize("latency_case", cases, ids=[latency_case_id(*c) for c in cases])

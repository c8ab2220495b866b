"""Each cell's precision census as the last run that loaded it found it, kept with the engine cache, so that a later
run does not collect the checks of a cell that computes nothing, or almost nothing, in its precision here (issue 47:
on the CPU, ONNX Runtime's "fp16" cells ran 0 of 50 conv/gemm/matmul nodes in fp16 and minilm_l6_fused's int8 cell 0
of 24 in int8: 30 checks collected only to end 'not judged (precision-not-run)').

The census is the engine's own (suite/session.py ``_with_census``); this only keeps it. A census is used only under
the key it was recorded with (``context_key``: the cell, the device, the ONNX Runtime and onnx versions, the CPU's
model and flags, the model's whole config), so an upgrade, another CPU or a changed model table collects the cell
again, and its census is taken again. A cold cache records nothing: its cells are collected and judged as before.
"""

from __future__ import annotations

import datetime as dt
import importlib.metadata
import json
from pathlib import Path
from typing import Any

from core.cpuinfo import cpuinfo
from core.hashing import digest
from engines import get_backend
from suite.results import write_json_atomic
from suite.session import Cell, SuiteSession

CENSUS_FILE = "precision-census.json"


def context_key(session: SuiteSession, cell: Cell) -> str:
    """What the census of ``cell`` depends on, as known before anything is built."""
    model, flags = cpuinfo()
    return digest({"cell": cell.id, "device": session.device, "onnxruntime": _version("onnxruntime"),
                   "onnx": _version("onnx"), "cpu": model, "cpu_flags": sorted(flags or ()),
                   "model": repr(session.model(cell.model))})


def _version(dist: str) -> str | None:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return None


def load(cache_root: Path) -> dict[str, Any]:
    try:
        data = json.loads((cache_root / CENSUS_FILE).read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def save(session: SuiteSession, engine_facts: dict[str, dict[str, Any]]) -> None:
    """This run's census of every cell that has one (engine facts by cell id, an xdist worker's included), beside
    what earlier runs recorded of other cells."""
    cells = {c.id: c for c in session.cells()}
    known = load(session.cache.root)
    today = dt.date.today().isoformat()
    for cell_id, facts in engine_facts.items():
        census = facts.get("precision_census")
        if cell_id in cells and isinstance(census, dict):
            known[cell_id] = {"key": context_key(session, cells[cell_id]), "ok": bool(census.get("ok")),
                              "text": str(census.get("text", "")), "recorded": today}
    if known:
        write_json_atomic(session.cache.root / CENSUS_FILE, known)


def precision_not_run(session: SuiteSession) -> dict[Cell, str]:
    """The selected cells whose census, recorded under this run's key, says their precision does not run here,
    each with the census's words; where none is recorded, those the engine predicts before any build (ONNX
    Runtime's kernel registry: a fresh clone's first run no longer collects 24 checks only to leave them not
    judged). A census recorded under this run's key, either way, outranks a prediction."""
    known = load(session.cache.root)
    out = {}
    for cell in session.cells():
        entry = known.get(cell.id)
        if isinstance(entry, dict) and entry.get("key") == context_key(session, cell):
            if entry.get("ok") is False:
                out[cell] = (f"{cell.engine} {entry.get('text', '').split(':', 1)[0]} here (the precision census "
                             f"of the run of {entry.get('recorded')}, docs/localization.md)")
            continue
        predict = getattr(get_backend(cell.engine), "predicted_precision_not_run", None)
        predicted = predict(session.request(cell)) if predict is not None else None
        if predicted:
            out[cell] = f"{cell.engine} {predicted}"
    return out

"""The precision census's verdict: a cell whose engine computes nothing, or almost nothing, in its precision (on
the CPU EP an 'fp16' ONNX Runtime cell computes every conv and gemm in fp32) never passes as a check of that
precision. The census itself is the session's (suite/session.py, engines.localize.cell_census); this reports it."""

from __future__ import annotations

from typing import Any

import pytest

from suite import verdict
from suite.session import Cell, SuiteSession


def check_precision(node: pytest.Item, session: SuiteSession, records: list[dict[str, Any]]) -> None:
    """Each cell of ``records`` whose census says its precision is not run: a component not judged (suite.verdict
    reason 'precision-not-run') of ``node``'s test; its failures still fail."""
    cells = {(r["model"], r["engine"], r["precision"]) for r in records if "engine" in r}
    for model, engine, precision in sorted(cells):
        said = session.precision_check(Cell(model, engine, precision))
        if said is not None and not said[0]:
            verdict.report_component(node, verdict.Component(
                f"precision census {model}-{engine}-{precision}", verdict.NOT_JUDGED, "precision-not-run",
                said[1]))

"""The localizer's per-layer table against the baseline run's (issue 26): where, layer by layer, a parity record's
error against the reference moved between two runs that both localized it (--localize). Pure tables and in-memory
baselines; the localizer itself is tests/selftest/test_localize.py's."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest

from metrics.drift import DriftTolerances, compare_parity
from metrics.layer_drift import explain_layers, layer_moves
from suite.gate.baselines import RecordsByCase, ResultsBaseline
from suite.gate.state import Gate

pytestmark = pytest.mark.selftest


def _table(errors: list[float], names: list[str] | None = None) -> list[dict[str, Any]]:
    names = names or [f"conv{i}" for i in range(len(errors))]
    return [{"name": n, "op_type": "Conv", "max_abs_error": e, "cosine": 1.0 - e} for n, e in zip(names, errors,
                                                                                                 strict=True)]


def test_the_first_layer_whose_error_moved_is_where_the_change_began() -> None:
    base = _table([1e-4, 2e-4, 3e-4, 4e-4])
    now = _table([1e-4, 2.5e-4, 3e-3, 5e-3])  # conv1 within 2x; conv2 10x: the change began there
    said = explain_layers(base, now)
    assert said.startswith("per layer against the baseline run's localizer table (4 layers matched): 2 moved more "
                           "than 2x; first layer 2 conv2 (Conv): max abs error 0.0003 -> 0.003 (10x)"), said
    assert said.index("layer 3 conv3") > said.index("largest: ")  # 12.5x: the largest move
    assert "no layer's error" in explain_layers(base, base)
    better = explain_layers(base, _table([1e-4, 2e-4, 3e-5, 4e-4]))  # a move down counts too
    assert "1 moved more than 2x; first layer 2 conv2 (Conv): max abs error 0.0003 -> 3e-05 (0.1x)" in better


def test_layers_are_matched_by_name_and_noise_is_not_a_move() -> None:
    base = _table([1e-4, 1e-9], ["a", "b"])
    now = _table([1e-4, 8e-9, 1e-3], ["a", "b", "c"])  # b: 8x of nothing (below the floor); c: only in this run
    assert [m.name for m in layer_moves(base, now)] == ["a", "b"]
    said = explain_layers(base, now)
    assert "(2 layers matched, 1 only in this run): no layer's error" in said
    nan = explain_layers(base, [{"name": "a", "op_type": "Conv", "max_abs_error": None, "cosine": None}])
    assert "1 moved more than 2x" in nan and "nan" in nan  # a layer that became non-finite is a move
    assert math.isnan(layer_moves(base, [{"name": "a", "max_abs_error": "inf?"}])[0].current_error)


def _parity(isclose: float, errors: list[float] | None) -> dict[str, Any]:
    record: dict[str, Any] = {"kind": "parity", "cell": "m-onnxruntime-fp16", "dataset": "d", "name": "logits",
                              "isclose_pct": isclose, "mae": 0.01, "max_abs_error": 0.1, "passed": True}
    if errors is not None:
        record["localization"] = {"layers": _table(errors)}
    return record


def _gate(baseline: dict[str, Any]) -> Gate:
    records = RecordsByCase()
    records.add(baseline)
    gate = Gate(max_slowdown=0.05, confidence=0.99, busy_limit=0.2, drift=DriftTolerances(), inject_slowdown=None,
                inject_accuracy_drop=None, environment={})
    gate.results_baseline = ResultsBaseline(source=Path("old.json"), environment={}, records=records,
                                            engines={"m-onnxruntime-fp16": {"layers": 3}})
    return gate


def test_a_moved_record_says_where_between_the_runs_its_error_began_to_move() -> None:
    gate = _gate(_parity(99.0, [1e-4, 2e-4, 3e-4]))
    component, message = gate.check_drift(_parity(80.0, [1e-4, 2e-3, 3e-3]), "t::p")
    assert component is not None and message is not None  # 19 points of isclose: beyond tolerance
    assert "first layer 1 conv1 (Conv): max abs error 0.0002 -> 0.002 (10x)" in message, message
    structure = gate.structure({"m-onnxruntime-fp16": {"layers": 3}}, [])
    assert structure is not None and "first layer 1 conv1" in structure["moved"]["m-onnxruntime-fp16"]
    within = _gate(_parity(99.0, [1e-4, 2e-4, 3e-4]))
    within.check_drift(_parity(98.9, [1e-4, 2e-4, 9e-4]), "t::p")  # moved within tolerance: explained too
    assert "first layer 2 conv2" in str(within.drift_results[0].layers)
    assert within.export_outcomes()["drift"][0]["layers"] == within.drift_results[0].layers  # travels from a worker


def test_without_both_tables_there_is_no_per_layer_note() -> None:
    for base, now in ((None, [1e-4]), ([1e-4], None)):
        gate = _gate(_parity(99.0, base))
        gate.check_drift(_parity(80.0, now), "t::p")
        assert gate.drift_results[0].layers is None
    assert compare_parity(_parity(99.0, None), _parity(99.0, None), 1.0, 2.0).failed is False

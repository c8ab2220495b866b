"""Structural diffs between a baseline run's engine facts and this run's (metrics/structure.py, issue 26)."""

from __future__ import annotations

import copy

import pytest

from metrics.structure import cell_changes, explain, structural_changes

pytestmark = pytest.mark.selftest

FACTS = {"size_mb": 4.80, "layers": 9, "parameters": 1199882, "op_histogram": {"Conv": 2, "Relu": 3, "Gemm": 2},
         "providers": ["CUDAExecutionProvider", "CPUExecutionProvider"],
         "precision_census": {"counts": {"fp16": 4}, "ops": {"FusedConv": 2, "Gemm": 2}}}


def _changed(**edits):
    facts = copy.deepcopy(FACTS)
    for key, value in edits.items():
        if key in ("counts", "ops"):
            facts["precision_census"][key] = value
        else:
            facts[key] = value
    return facts


def test_identical_facts_have_no_change() -> None:
    assert cell_changes(FACTS, copy.deepcopy(FACTS)) == []
    assert cell_changes(FACTS, _changed(size_mb=4.82)) == []  # within a rebuild's noise


@pytest.mark.parametrize(("edit", "line"), [
    ({"ops": {"Conv": 2, "Gemm": 2}}, "compute nodes as run: Conv 0 -> 2, FusedConv 2 -> 0"),
    ({"counts": {"fp32": 4}}, "precision of compute nodes: fp16 4 -> 0, fp32 0 -> 4"),
    ({"op_histogram": {"Conv": 2, "Relu": 2, "Gemm": 2}}, "exported graph: Relu 3 -> 2"),
    ({"providers": ["CPUExecutionProvider"]},
     "execution providers: CUDAExecutionProvider, CPUExecutionProvider -> CPUExecutionProvider"),
    ({"layers": 10}, "layers: 9 -> 10"),
    ({"parameters": 1}, "parameters: 1199882 -> 1"),
    ({"size_mb": 9.6}, "engine size: 4.80 -> 9.60 MB (+100.0%)"),
], ids=["fusion", "precision", "graph", "providers", "layers", "parameters", "size"])
def test_each_structural_fact_that_changes_is_one_line(edit, line) -> None:
    assert cell_changes(FACTS, _changed(**edit)) == [line]


def test_only_cells_both_runs_built_and_whose_structure_moved() -> None:
    base = {"a": FACTS, "b": FACTS, "gone": FACTS}
    now = {"a": FACTS, "b": _changed(layers=10), "new": FACTS}
    assert structural_changes(base, now) == {"b": ["layers: 9 -> 10"]}


def test_a_moved_case_says_its_cells_change_or_that_none_was_found() -> None:
    changes = {"m-onnxruntime-fp16": ["layers: 9 -> 10"]}
    assert explain("m-onnxruntime-fp16", changes, compared=True) == "structure: layers: 9 -> 10"
    assert explain("m-torch-fp16", changes, compared=True).startswith("structure: no structural change found")
    assert "not compared" in explain("m-torch-fp16", changes, compared=False)

"""The localizer's per-layer table against the baseline run's, not only against the reference.

A parity record that moved since the baseline run (another ONNX Runtime, another cuDNN) says how much the output
moved; the localizer (metrics/localize.py) says where this engine departs from the fp32 reference. Joining the two
runs' per-layer tables, layer by layer, says where the *change* began: the first layer whose error against the
reference grew (or shrank) by more than ``factor``, and the layers that moved most. Layers are matched by name
(the same exported graph on both sides); a layer only one run has is counted apart. Pure: two lists of
``{"name", "op_type", "max_abs_error", "cosine"}`` in, moves and a sentence out.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

#: An error below this (absolute) is noise whatever its ratio: float32 rounding of a layer's values near 1.
FLOOR = 1e-6


@dataclass(frozen=True)
class LayerMove:
    """One layer's error against the reference in the baseline run and in this one."""

    index: int
    name: str
    op_type: str
    baseline_error: float
    current_error: float
    baseline_cosine: float
    current_cosine: float

    @property
    def ratio(self) -> float:
        return max(self.current_error, FLOOR) / max(self.baseline_error, FLOOR)

    def describe(self) -> str:
        return (f"layer {self.index} {self.name} ({self.op_type}): max abs error {self.baseline_error:.3g} -> "
                f"{self.current_error:.3g} ({self.ratio:.3g}x), cosine {self.baseline_cosine:.6f} -> "
                f"{self.current_cosine:.6f}")


def layer_moves(baseline: Sequence[Mapping[str, Any]], current: Sequence[Mapping[str, Any]]) -> list[LayerMove]:
    """Every layer both tables have, in the current table's order (topological)."""
    before = {str(layer.get("name")): layer for layer in baseline}
    moves = []
    for index, layer in enumerate(current):
        old = before.get(str(layer.get("name")))
        if old is None:
            continue
        moves.append(LayerMove(index, str(layer.get("name")), str(layer.get("op_type", "?")),
                               _num(old.get("max_abs_error")), _num(layer.get("max_abs_error")),
                               _num(old.get("cosine")), _num(layer.get("cosine"))))
    return moves


def _num(value: Any) -> float:
    try:
        return float(value)
    except (TypeError, ValueError):
        return math.nan


def _moved(move: LayerMove, factor: float) -> bool:
    r = move.ratio
    return math.isnan(r) or r > factor or r < 1.0 / factor


def explain_layers(baseline: Sequence[Mapping[str, Any]], current: Sequence[Mapping[str, Any]],
                   factor: float = 2.0, top: int = 3) -> str:
    """The sentence beside a record that moved: how many layers' error moved more than ``factor`` either way, the
    first of them (where the change began), and the largest moves."""
    moves = layer_moves(baseline, current)
    unmatched = len(current) - len(moves)
    head = f"per layer against the baseline run's localizer table ({len(moves)} layers matched"
    head += f", {unmatched} only in this run)" if unmatched else ")"
    moved = [m for m in moves if _moved(m, factor)]
    if not moved:
        return head + f": no layer's error against the reference moved more than {factor:g}x"
    largest = sorted(moved, key=lambda m: (0, 0.0) if math.isnan(m.ratio) else (1, -abs(math.log(m.ratio))))
    return (head + f": {len(moved)} moved more than {factor:g}x; first {moved[0].describe()}; largest: "
            + "; ".join(m.describe() for m in largest[:top]))
